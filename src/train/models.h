// The models the trainer knows, as LibTorch torch::nn modules behind one interface.
//   mlp       fully connected, ReLU, widths from --mlp-hidden (default 1536,1536: FC-heavy,
//             where compression pays)
//   lenet5    LeCun et al. 1998 with ReLU and max pooling; the first conv pads by 2 so 28x28
//             inputs get the paper's 32x32 geometry
//   resnet20  He et al. 2016's CIFAR ResNet (3 stages x 3 basic blocks, 16/32/64 channels,
//             option-A shortcuts: strided identity with zero-padded channels, no parameters)
//   transformer  a decoder-only language model over bytes (GPT-2's layout at a small size:
//             TransformerShape), for text data sets (data::Dataset::text)
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace gradcomp::train {

// The transformer's size. The default: 4 layers of d_model 128 with 4 heads, the output
// tied to the byte embedding; 834,304 parameters with a context of 64.
struct TransformerShape {
  std::int64_t layers = 4;
  std::int64_t d_model = 128;
  std::int64_t heads = 4;  // must divide d_model
};

struct ModelConfig {
  std::string name = "mlp";  // mlp | lenet5 | resnet20 | transformer
  std::vector<std::int64_t> mlp_hidden{1536, 1536};
  // Input C x H x W and classes: from the data set.
  std::int64_t in_c = 1;
  std::int64_t in_h = 28;
  std::int64_t in_w = 28;
  std::int64_t num_classes = 10;
  std::uint64_t seed = 0;  // torch::manual_seed before construction: same seed, same weights
  TransformerShape transformer = {};
};

class Model : public torch::nn::Module {
 public:
  // x: N x C x H x W float; returns N x num_classes logits (a language model: one row per
  // predicted token, (N * context) x vocabulary).
  virtual torch::Tensor forward(torch::Tensor x) = 0;
  // What the cross-entropy compares forward(x)'s rows with: the labels y for a classifier;
  // a language model's are x's next tokens (one per row).
  virtual torch::Tensor targets(const torch::Tensor& x, const torch::Tensor& y) {
    (void)x;
    return y;
  }
  // A language model: its test figure is perplexity rather than accuracy.
  virtual bool language_model() const { return false; }
};

// Throws InvalidArgument for an unknown name, an empty/non-positive width or an input
// too small for the architecture.
std::shared_ptr<Model> make_model(const ModelConfig& config);

// "1536,1536" -> {1536, 1536}; InvalidArgument on anything else, its message starting with
// `what` (the flag the list came from: --mlp-hidden, --milestones).
std::vector<std::int64_t> parse_widths(std::string_view s, std::string_view what = "mlp widths");

std::string known_models();                  // "lenet5, mlp, resnet20, transformer"
bool is_known_model(std::string_view name);  // one of known_models()

}  // namespace gradcomp::train
