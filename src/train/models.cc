#include "train/models.h"

#include <charconv>
#include <cmath>
#include <limits>

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

// A small decoder-only transformer over bytes (GPT-2's layout at a toy size): learned
// token and position embeddings, `layers` pre-LayerNorm blocks of causal multi-head
// self-attention and a 4x GELU MLP, a final LayerNorm, and the output projection tied to
// the token embedding (it saves vocab x d parameters, a tenth of the model here).
class CausalSelfAttentionImpl : public nn::Module {
 public:
  CausalSelfAttentionImpl(std::int64_t d, std::int64_t heads)
      : qkv_(register_module("qkv", nn::Linear(d, 3 * d))),
        proj_(register_module("proj", nn::Linear(d, d))),
        heads_(heads) {}

  // x: B x T x d; mask: T x T, true above the diagonal (the future).
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& mask) {
    const std::int64_t b = x.size(0), t = x.size(1), d = x.size(2), hd = d / heads_;
    // B x T x 3 x H x hd -> 3 x B x H x T x hd
    const torch::Tensor qkv = qkv_->forward(x).view({b, t, 3, heads_, hd}).permute({2, 0, 3, 1, 4});
    const torch::Tensor q = qkv[0], k = qkv[1], v = qkv[2];
    torch::Tensor att = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(hd));
    att = torch::softmax(att.masked_fill(mask, -std::numeric_limits<float>::infinity()), -1);
    const torch::Tensor y = torch::matmul(att, v).transpose(1, 2).reshape({b, t, d});
    return proj_->forward(y);
  }

  nn::Linear& proj() { return proj_; }

 private:
  nn::Linear qkv_;
  nn::Linear proj_;
  std::int64_t heads_;
};
TORCH_MODULE(CausalSelfAttention);

class DecoderBlockImpl : public nn::Module {
 public:
  DecoderBlockImpl(std::int64_t d, std::int64_t heads)
      : ln1_(register_module("ln1", nn::LayerNorm(nn::LayerNormOptions({d})))),
        attn_(register_module("attn", CausalSelfAttention(d, heads))),
        ln2_(register_module("ln2", nn::LayerNorm(nn::LayerNormOptions({d})))),
        fc_(register_module("fc", nn::Linear(d, 4 * d))),
        out_(register_module("out", nn::Linear(4 * d, d))) {}

  torch::Tensor forward(torch::Tensor x, const torch::Tensor& mask) {
    x = x + attn_->forward(ln1_->forward(x), mask);
    return x + out_->forward(torch::gelu(fc_->forward(ln2_->forward(x))));
  }

  // The projections that write into the residual stream (GPT-2 scales their init).
  std::vector<torch::Tensor> residual_weights() { return {attn_->proj()->weight, out_->weight}; }

 private:
  nn::LayerNorm ln1_;
  CausalSelfAttention attn_;
  nn::LayerNorm ln2_;
  nn::Linear fc_;
  nn::Linear out_;
};
TORCH_MODULE(DecoderBlock);

class Transformer final : public Model {
 public:
  // context: the window the model reads (the data set's width - 1); vocab: its classes.
  Transformer(std::int64_t context, std::int64_t vocab, const TransformerShape& s)
      : context_(context),
        tok_(register_module("tok", nn::Embedding(vocab, s.d_model))),
        pos_(register_module("pos", nn::Embedding(context, s.d_model))),
        mask_(torch::ones({context, context}, torch::kBool).triu(1)) {
    // Registered in the order they run: parameters (and gradient buckets) follow it.
    for (std::int64_t i = 0; i < s.layers; ++i) {
      blocks_.push_back(
          register_module("block" + std::to_string(i), DecoderBlock(s.d_model, s.heads)));
    }
    ln_f_ = register_module("ln_f", nn::LayerNorm(nn::LayerNormOptions({s.d_model})));
    // GPT-2: N(0, 0.02) weights, zero biases, LayerNorm at (1, 0), and the projections
    // into the residual stream at 0.02 / sqrt(2 * layers) so that its variance does not
    // grow with depth.
    torch::NoGradGuard no_grad;
    for (auto& m : modules(/*include_self=*/false)) {
      if (auto* l = m->as<nn::Linear>()) {
        l->weight.normal_(0.0, 0.02);
        if (l->bias.defined()) l->bias.zero_();
      } else if (auto* e = m->as<nn::Embedding>()) {
        e->weight.normal_(0.0, 0.02);
      }
    }
    const double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(s.layers));
    for (auto& b : blocks_) {
      for (torch::Tensor& w : b->residual_weights()) w.normal_(0.0, residual_std);
    }
  }

  // x: B x 1 x 1 x (context + 1) byte values as floats; reads the first `context` and
  // returns (B * context) x vocab logits, one row per next byte (targets()).
  torch::Tensor forward(torch::Tensor x) override {
    const torch::Tensor tokens = x.flatten(1).slice(1, 0, context_).to(torch::kLong);
    const std::int64_t b = tokens.size(0);
    torch::Tensor h = tok_->forward(tokens) + pos_->weight.unsqueeze(0);
    for (auto& block : blocks_) h = block->forward(h, mask_);
    h = ln_f_->forward(h);
    // Tied output: logits against the token embedding.
    return torch::matmul(h, tok_->weight.t()).reshape({b * context_, -1});
  }

  torch::Tensor targets(const torch::Tensor& x, const torch::Tensor&) override {
    return x.flatten(1).slice(1, 1, context_ + 1).to(torch::kLong).reshape({-1});
  }
  bool language_model() const override { return true; }

 private:
  std::int64_t context_;
  nn::Embedding tok_;
  nn::Embedding pos_;
  std::vector<DecoderBlock> blocks_;
  nn::LayerNorm ln_f_{nullptr};
  torch::Tensor mask_;  // not a buffer: it is rebuilt from the shape, not checkpointed
};

}  // namespace

std::string known_models() { return "lenet5, mlp, resnet20, transformer"; }

bool is_known_model(std::string_view name) {
  return name == "lenet5" || name == "mlp" || name == "resnet20" || name == "transformer";
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
  if (config.name == "transformer") {
    // Text windows: 1 x 1 x (context + 1) byte values (data::text_windows).
    const TransformerShape& t = config.transformer;
    if (config.in_c != 1 || config.in_h != 1 || config.in_w < 2) {
      throw InvalidArgument("make_model: transformer needs text windows (1x1xW, W >= 2), got " +
                            std::to_string(config.in_c) + "x" + std::to_string(config.in_h) + "x" +
                            std::to_string(config.in_w));
    }
    if (t.layers < 1 || t.d_model < 1 || t.heads < 1 || t.d_model % t.heads != 0) {
      throw InvalidArgument("make_model: transformer with " + std::to_string(t.layers) +
                            " layers, d_model " + std::to_string(t.d_model) + ", " +
                            std::to_string(t.heads) + " heads (heads must divide d_model)");
    }
    return std::make_shared<Transformer>(config.in_w - 1, config.num_classes, t);
  }
  throw InvalidArgument("make_model: unknown model '" + config.name +
                        "' (known: " + known_models() + ")");
}

}  // namespace gradcomp::train
