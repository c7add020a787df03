#include "train/models.h"

#include <charconv>

#include "gradcomp/error.h"

namespace gradcomp::train {

namespace {

namespace nn = torch::nn;

class Mlp final : public Model {
 public:
  Mlp(std::int64_t in, const std::vector<std::int64_t>& hidden, std::int64_t classes) {
    std::int64_t prev = in;
    for (std::size_t i = 0; i < hidden.size(); ++i) {
      layers_.push_back(register_module("fc" + std::to_string(i + 1), nn::Linear(prev, hidden[i])));
      prev = hidden[i];
    }
    layers_.push_back(
        register_module("fc" + std::to_string(hidden.size() + 1), nn::Linear(prev, classes)));
  }

  torch::Tensor forward(torch::Tensor x) override {
    x = x.flatten(1);
    for (std::size_t i = 0; i + 1 < layers_.size(); ++i) x = torch::relu(layers_[i]->forward(x));
    return layers_.back()->forward(x);
  }

 private:
  std::vector<nn::Linear> layers_;
};

class LeNet5 final : public Model {
 public:
  LeNet5(std::int64_t c, std::int64_t h, std::int64_t w, std::int64_t classes)
      : conv1_(register_module("conv1", nn::Conv2d(nn::Conv2dOptions(c, 6, 5).padding(2)))),
        conv2_(register_module("conv2", nn::Conv2d(nn::Conv2dOptions(6, 16, 5)))),
        fc1_(register_module("fc1", nn::Linear(16 * ((h / 2 - 4) / 2) * ((w / 2 - 4) / 2), 120))),
        fc2_(register_module("fc2", nn::Linear(120, 84))),
        fc3_(register_module("fc3", nn::Linear(84, classes))) {}

  torch::Tensor forward(torch::Tensor x) override {
    x = torch::max_pool2d(torch::relu(conv1_->forward(x)), 2);
    x = torch::max_pool2d(torch::relu(conv2_->forward(x)), 2);
    x = torch::relu(fc1_->forward(x.flatten(1)));
    x = torch::relu(fc2_->forward(x));
    return fc3_->forward(x);
  }

 private:
  nn::Conv2d conv1_;
  nn::Conv2d conv2_;
  nn::Linear fc1_;
  nn::Linear fc2_;
  nn::Linear fc3_;
};

// A basic block: conv3x3-BN-ReLU-conv3x3-BN, plus the shortcut, then ReLU.
class BasicBlockImpl : public nn::Module {
 public:
  BasicBlockImpl(std::int64_t in, std::int64_t out, std::int64_t stride)
      : conv1_(register_module(
            "conv1",
            nn::Conv2d(nn::Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(false)))),
        bn1_(register_module("bn1", nn::BatchNorm2d(out))),
        conv2_(register_module(
            "conv2", nn::Conv2d(nn::Conv2dOptions(out, out, 3).stride(1).padding(1).bias(false)))),
        bn2_(register_module("bn2", nn::BatchNorm2d(out))),
        pad_channels_(out - in),
        stride_(stride) {}

  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor y = torch::relu(bn1_->forward(conv1_->forward(x)));
    y = bn2_->forward(conv2_->forward(y));
    torch::Tensor shortcut = x;
    if (stride_ != 1 || pad_channels_ != 0) {
      using torch::indexing::Slice;
      shortcut = x.index({Slice(), Slice(), Slice(0, torch::indexing::None, stride_),
                          Slice(0, torch::indexing::None, stride_)});
      // Option A: the new channels are zeros, half before and half after.
      const std::int64_t lo = pad_channels_ / 2;
      shortcut = torch::constant_pad_nd(shortcut, {0, 0, 0, 0, lo, pad_channels_ - lo}, 0);
    }
    return torch::relu(y + shortcut);
  }

 private:
  nn::Conv2d conv1_;
  nn::BatchNorm2d bn1_;
  nn::Conv2d conv2_;
  nn::BatchNorm2d bn2_;
  std::int64_t pad_channels_;
  std::int64_t stride_;
};
TORCH_MODULE(BasicBlock);

class ResNet20 final : public Model {
 public:
  ResNet20(std::int64_t c, std::int64_t classes)
      : conv1_(register_module("conv1",
                               nn::Conv2d(nn::Conv2dOptions(c, 16, 3).padding(1).bias(false)))),
        bn1_(register_module("bn1", nn::BatchNorm2d(16))) {
    std::int64_t in = 16;
    const std::int64_t widths[3] = {16, 32, 64};
    for (int stage = 0; stage < 3; ++stage) {
      for (int b = 0; b < 3; ++b) {
        const std::int64_t stride = (stage > 0 && b == 0) ? 2 : 1;
        blocks_.push_back(
            register_module("layer" + std::to_string(stage + 1) + "_" + std::to_string(b),
                            BasicBlock(in, widths[stage], stride)));
        in = widths[stage];
      }
    }
    fc_ = register_module("fc", nn::Linear(64, classes));
    // He et al.: Kaiming-normal convolutions, BN weight 1 / bias 0 (LibTorch's default).
    for (auto& m : modules(/*include_self=*/false)) {
      if (auto* conv = m->as<nn::Conv2d>()) {
        nn::init::kaiming_normal_(conv->weight, 0.0, torch::kFanOut, torch::kReLU);
      }
    }
  }

  torch::Tensor forward(torch::Tensor x) override {
    x = torch::relu(bn1_->forward(conv1_->forward(x)));
    for (auto& b : blocks_) x = b->forward(x);
    x = torch::adaptive_avg_pool2d(x, {1, 1}).flatten(1);
    return fc_->forward(x);
  }

 private:
  nn::Conv2d conv1_;
  nn::BatchNorm2d bn1_;
  std::vector<BasicBlock> blocks_;
  nn::Linear fc_{nullptr};
};

}  // namespace

std::string known_models() { return "lenet5, mlp, resnet20"; }

bool is_known_model(std::string_view name) {
  return name == "lenet5" || name == "mlp" || name == "resnet20";
}

std::vector<std::int64_t> parse_widths(std::string_view s, std::string_view what) {
  std::vector<std::int64_t> out;
  std::size_t pos = 0;
  while (pos <= s.size()) {
    const std::size_t comma = std::min(s.find(',', pos), s.size());
    const std::string_view tok = s.substr(pos, comma - pos);
    std::int64_t v = 0;
    const auto [end, ec] = std::from_chars(tok.data(), tok.data() + tok.size(), v);
    if (tok.empty() || ec != std::errc() || end != tok.data() + tok.size() || v <= 0) {
      throw InvalidArgument(std::string(what) + ": '" + std::string(tok) + "' in '" +
                            std::string(s) + "' is not a positive integer");
    }
    out.push_back(v);
    pos = comma + 1;
  }
  return out;
}

std::shared_ptr<Model> make_model(const ModelConfig& config) {
  if (config.in_c <= 0 || config.in_h <= 0 || config.in_w <= 0 || config.num_classes <= 0) {
    throw InvalidArgument("make_model: input " + std::to_string(config.in_c) + "x" +
                          std::to_string(config.in_h) + "x" + std::to_string(config.in_w) +
                          " with " + std::to_string(config.num_classes) + " classes");
  }
  torch::manual_seed(config.seed);
  if (config.name == "mlp") {
    for (std::int64_t w : config.mlp_hidden) {
      if (w <= 0) throw InvalidArgument("make_model: mlp width " + std::to_string(w) + " <= 0");
    }
    return std::make_shared<Mlp>(config.in_c * config.in_h * config.in_w, config.mlp_hidden,
                                 config.num_classes);
  }
  if (config.name == "lenet5") {
    // conv5 pad 2, pool 2, conv5, pool 2 must leave at least 1x1.
    if (config.in_h < 12 || config.in_w < 12) {
      throw InvalidArgument("make_model: lenet5 needs inputs of at least 12x12, got " +
                            std::to_string(config.in_h) + "x" + std::to_string(config.in_w));
    }
    return std::make_shared<LeNet5>(config.in_c, config.in_h, config.in_w, config.num_classes);
  }
  if (config.name == "resnet20") {
    if (config.in_h < 4 || config.in_w < 4) {
      throw InvalidArgument("make_model: resnet20 needs inputs of at least 4x4");
    }
    return std::make_shared<ResNet20>(config.in_c, config.num_classes);
  }
  throw InvalidArgument("make_model: unknown model '" + config.name +
                        "' (known: " + known_models() + ")");
}

}  // namespace gradcomp::train
