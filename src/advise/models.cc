// Built-in models as tensor shapes; see models.h. The layer lists mirror
// src/train/models.cc (MLP, LeNet-5, ResNet-20, the byte-level transformer) and
// torchvision's resnet50.
#include "gradcomp/advise/models.h"

#include <charconv>
#include <cstddef>

#include "gradcomp/error.h"

namespace gradcomp::advise {

namespace {

class Builder {
 public:
  explicit Builder(std::string name) { m_.name = std::move(name); }
  void add(const std::string& name, std::vector<std::int64_t> shape) {
    ParamInfo p;
    p.name = name;
    p.numel = 1;
    for (std::int64_t d : shape) p.numel *= d;
    p.dim = static_cast<std::int64_t>(shape.size());
    p.rows = shape.empty() ? 0 : shape[0];
    m_.params.push_back(std::move(p));
  }
  void linear(const std::string& name, std::int64_t in, std::int64_t out) {
    add(name + ".weight", {out, in});
    add(name + ".bias", {out});
  }
  void conv(const std::string& name, std::int64_t in, std::int64_t out, std::int64_t k, bool bias) {
    add(name + ".weight", {out, in, k, k});
    if (bias) add(name + ".bias", {out});
  }
  void bn(const std::string& name, std::int64_t c) {
    add(name + ".weight", {c});
    add(name + ".bias", {c});
  }
  void layer_norm(const std::string& name, std::int64_t c) { bn(name, c); }
  ModelSizes done() { return std::move(m_); }

 private:
  ModelSizes m_;
};

ModelSizes mlp() {
  Builder b("mlp");
  b.linear("fc1", 784, 1536);
  b.linear("fc2", 1536, 1536);
  b.linear("fc3", 1536, 10);
  return b.done();
}

ModelSizes lenet5() {  // 1x28x28 input: fc1 sees 16 x 5 x 5
  Builder b("lenet5");
  b.conv("conv1", 1, 6, 5, true);
  b.conv("conv2", 6, 16, 5, true);
  b.linear("fc1", 16 * 5 * 5, 120);
  b.linear("fc2", 120, 84);
  b.linear("fc3", 84, 10);
  return b.done();
}

ModelSizes resnet20() {  // option-A shortcuts: no parameters in them
  Builder b("resnet20");
  b.conv("conv1", 1, 16, 3, false);
  b.bn("bn1", 16);
  std::int64_t in = 16;
  const std::int64_t widths[3] = {16, 32, 64};
  for (int stage = 0; stage < 3; ++stage) {
    for (int k = 0; k < 3; ++k) {
      const std::string p = "layer" + std::to_string(stage + 1) + "_" + std::to_string(k);
      b.conv(p + ".conv1", in, widths[stage], 3, false);
      b.bn(p + ".bn1", widths[stage]);
      b.conv(p + ".conv2", widths[stage], widths[stage], 3, false);
      b.bn(p + ".bn2", widths[stage]);
      in = widths[stage];
    }
  }
  b.linear("fc", 64, 10);
  return b.done();
}

ModelSizes resnet50() {  // torchvision: bottlenecks [3, 4, 6, 3], expansion 4
  Builder b("resnet50");
  b.conv("conv1", 3, 64, 7, false);
  b.bn("bn1", 64);
  std::int64_t in = 64;
  const int blocks[4] = {3, 4, 6, 3};
  const std::int64_t widths[4] = {64, 128, 256, 512};
  for (int stage = 0; stage < 4; ++stage) {
    const std::int64_t w = widths[stage];
    for (int k = 0; k < blocks[stage]; ++k) {
      const std::string p = "layer" + std::to_string(stage + 1) + "." + std::to_string(k);
      b.conv(p + ".conv1", in, w, 1, false);
      b.bn(p + ".bn1", w);
      b.conv(p + ".conv2", w, w, 3, false);
      b.bn(p + ".bn2", w);
      b.conv(p + ".conv3", w, 4 * w, 1, false);
      b.bn(p + ".bn3", 4 * w);
      if (k == 0) {
        b.conv(p + ".downsample.0", in, 4 * w, 1, false);
        b.bn(p + ".downsample.1", 4 * w);
      }
      in = 4 * w;
    }
  }
  b.linear("fc", 2048, 1000);
  return b.done();
}

// The trainer's language model with its defaults (TransformerShape: 4 layers, d_model
// 128) on the fortunes corpus: 256 byte values, context 64. The output projection is
// tied to the token embedding, so it has no tensor of its own.
ModelSizes transformer() {
  constexpr std::int64_t kVocab = 256, kContext = 64, kLayers = 4, kD = 128;
  Builder b("transformer");
  b.add("tok.weight", {kVocab, kD});
  b.add("pos.weight", {kContext, kD});
  for (std::int64_t i = 0; i < kLayers; ++i) {
    const std::string p = "block" + std::to_string(i);
    b.layer_norm(p + ".ln1", kD);
    b.linear(p + ".attn.qkv", kD, 3 * kD);
    b.linear(p + ".attn.proj", kD, kD);
    b.layer_norm(p + ".ln2", kD);
    b.linear(p + ".fc", kD, 4 * kD);
    b.linear(p + ".out", 4 * kD, kD);
  }
  b.layer_norm("ln_f", kD);
  return b.done();
}

}  // namespace

std::int64_t ModelSizes::numel() const {
  std::int64_t n = 0;
  for (const ParamInfo& p : params) n += p.numel;
  return n;
}

std::string known_models() { return "lenet5, mlp, resnet20, resnet50, transformer"; }

ModelSizes builtin_model(std::string_view name) {
  if (name == "mlp") return mlp();
  if (name == "lenet5") return lenet5();
  if (name == "resnet20") return resnet20();
  if (name == "resnet50") return resnet50();
  if (name == "transformer") return transformer();
  throw InvalidArgument("unknown model '" + std::string(name) + "' (known: " + known_models() +
                        "; or give --sizes)");
}

ModelSizes parse_sizes(std::string_view text, std::string name) {
  Builder b(std::move(name));
  std::size_t i = 0;
  int count = 0;
  auto is_sep = [](char c) { return c == ',' || c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  while (i < text.size()) {
    if (text[i] == '#') {
      while (i < text.size() && text[i] != '\n') ++i;
      continue;
    }
    if (is_sep(text[i])) {
      ++i;
      continue;
    }
    std::size_t end = i;
    while (end < text.size() && !is_sep(text[end]) && text[end] != '#') ++end;
    const std::string_view item = text.substr(i, end - i);
    std::vector<std::int64_t> shape;
    std::size_t p = 0;
    while (true) {
      std::int64_t d = 0;
      const auto [ptr, ec] = std::from_chars(item.data() + p, item.data() + item.size(), d);
      const std::size_t used = static_cast<std::size_t>(ptr - (item.data() + p));
      if (ec != std::errc() || used == 0 || d < 1 || d > (std::int64_t{1} << 40)) {
        throw InvalidArgument("sizes: '" + std::string(item) +
                              "' is not a shape (positive integers joined by 'x', e.g. 784x1536)");
      }
      shape.push_back(d);
      p += used;
      if (p == item.size()) break;
      if (item[p] != 'x' || p + 1 == item.size()) {
        throw InvalidArgument("sizes: '" + std::string(item) +
                              "' is not a shape (positive integers joined by 'x', e.g. 784x1536)");
      }
      ++p;
    }
    b.add("t" + std::to_string(count++), std::move(shape));
    i = end;
  }
  ModelSizes m = b.done();
  if (m.params.empty()) throw InvalidArgument("sizes: no tensor shapes given");
  return m;
}

}  // namespace gradcomp::advise
