// fp16 on the device (src/core/codecs/fp16.cc is the CPU codec and the wire format):
// saturate to the format's largest finite value, cast with round-to-nearest-even (ATen's
// casts on CPU and CUDA both round so), send the 16-bit patterns. On CUDA, each encode is
// one fused kernel (src/device/cuda/halves.cu: read g and e, write e and the patterns).
#include <cstdio>

#include "codecs.h"
#include "device/fused_kernels.h"
#include "gradcomp/error.h"

namespace gradcomp::device {

namespace {

class Fp16DeviceCodec final : public DeviceCodec {
 public:
  Fp16DeviceCodec(const Codec& codec, bool bf16)
      : DeviceCodec(codec),
        dtype_(bf16 ? at::kBFloat16 : at::kHalf),
        // The largest finite value: fp16 65504; bf16 0x7F7F = (2 - 2^-7) * 2^127.
        max_finite_(bf16 ? 3.38953139e38 : 65504.0),
        format_(bf16 ? "bf16" : "fp16") {}

  at::Tensor encode_impl(const at::Tensor& g, const StepContext& /*ctx*/) const override {
    if (fused::usable(g)) return fused_encode(g, {}, {});
    return halves(g).view(at::kByte);
  }

  at::Tensor encode_with_residual_impl(const at::Tensor& g, const at::Tensor& e,
                                       const StepContext& ctx) const override {
    if (fused::usable(e)) return fused_encode(e, g, e);
    return DeviceCodec::encode_with_residual_impl(g, e, ctx);
  }

  // p <- p - float(half(p)), from the same halves the payload carries.
  at::Tensor encode_feedback_impl(const at::Tensor& p, const StepContext& /*ctx*/) const override {
    if (fused::usable(p)) return fused_encode(p, {}, p);
    const at::Tensor h = halves(p);
    p.sub_(h.to(at::kFloat));
    return h.view(at::kByte);
  }

  void decode_add_impl(const at::Tensor& payload, const at::Tensor& out,
                       float alpha) const override {
    const std::int64_t n = out.numel();
    const std::string op = codec().name() + " decode";
    expect_payload_size(payload, 2 * n, op, n);
    if (n == 0) return;
    const at::Tensor values = payload.view(dtype_).to(at::kFloat);
    const at::Tensor bad = values.isfinite().logical_not();
    if (bad.any().item<bool>()) {
      const std::int64_t i = bad.nonzero().select(1, 0)[0].item<std::int64_t>();
      const auto pattern =
          static_cast<unsigned>(payload.view(at::kShort)[i].item<std::int16_t>()) & 0xFFFFu;
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%04X", pattern);
      throw CorruptMessage(op + ": non-finite " + format_ + " pattern " + hex + " at index " +
                           std::to_string(i));
    }
    out.add_(values, alpha);
  }

 private:
  // The 16-bit values of x, saturated; InvalidArgument naming the first non-finite input.
  at::Tensor halves(const at::Tensor& x) const {
    if (x.numel() == 0) return at::empty({0}, x.options().dtype(dtype_));
    if (x.isfinite().logical_not().any().item<bool>()) throw_non_finite(x);
    return x.clamp(-max_finite_, max_finite_).to(dtype_);
  }

  // The payload of x = a + b (b defined: the error-feedback step, out is then a) or of a,
  // out = x - float(half(x)) where defined: one kernel, then one sync for its check.
  at::Tensor fused_encode(const at::Tensor& a, const at::Tensor& b, const at::Tensor& out) const {
    const at::Tensor h = at::empty({a.numel()}, a.options().dtype(dtype_));
    if (a.numel() == 0) return h.view(at::kByte);
    const at::Tensor non_finite =
        fused::encode_halves(a, b, static_cast<float>(max_finite_), out, h);
    if (non_finite.item<std::int32_t>() != 0) {
      // x's non-finite entries stay so in out (inf - max is inf; NaN stays NaN).
      throw_non_finite(out.defined() ? out : (b.defined() ? a.add(b) : a));
    }
    return h.view(at::kByte);
  }

  [[noreturn]] void throw_non_finite(const at::Tensor& x) const {
    const std::int64_t i =
        x.isfinite().logical_not().nonzero().select(1, 0)[0].item<std::int64_t>();
    throw InvalidArgument(codec().name() + " encode: non-finite value " +
                          std::to_string(x[i].item<float>()) + " at index " + std::to_string(i));
  }

  at::ScalarType dtype_;
  double max_finite_;
  std::string format_;
};

}  // namespace

std::unique_ptr<DeviceCodec> make_fp16(const Codec& codec, const SpecParams& params) {
  return std::make_unique<Fp16DeviceCodec>(codec, params.text("format") == "bf16");
}

}  // namespace gradcomp::device
