// signsgd and efsign on the device (src/core/codecs/signsgd.cc is the CPU codec and the
// wire format): one sign bit per value, bit 1 for p >= 0 (-0 included, NaN gives 0), in
// the 1bit layout. signsgd decodes to +-1; efsign to +-scale_b, scale_b = ||p_b||_1 / |b|
// per block of B values (block=0: one block), the scales in front of the bits.
//
// efsign's ||p_b||_1 is the CPU's double bit for bit (segment_abs_sums: its blocked order
// as a scan in double on the device); one sync per encode checks that p is finite before
// anything is written (the CPU throws InvalidArgument first), one per decode checks the
// scales and the padding.
#include <cmath>

#include "codecs.h"
#include "detail/bitpack.h"
#include "gradcomp/error.h"

namespace gradcomp::device {

namespace {

at::Tensor packed_bits(const at::Tensor& p, std::int64_t header) {
  return at::empty({header + static_cast<std::int64_t>(
                                 detail::packed1_bytes(static_cast<std::size_t>(p.numel())))},
                   p.options().dtype(at::kByte));
}

class SignSgdDeviceCodec final : public DeviceCodec {
 public:
  explicit SignSgdDeviceCodec(const Codec& codec) : DeviceCodec(codec) {}

  at::Tensor encode_impl(const at::Tensor& g, const StepContext& /*ctx*/) const override {
    return encode_signs(g, {}, 0.0f, /*at_least=*/true, {});
  }

  // p += lut[bit] with sign_lut(-1, 1) = {+1, -1}.
  at::Tensor encode_with_residual_impl(const at::Tensor& g, const at::Tensor& e,
                                       const StepContext& /*ctx*/) const override {
    return encode_signs(e, g, 0.0f, /*at_least=*/true, e);
  }

  at::Tensor encode_feedback_impl(const at::Tensor& p, const StepContext& /*ctx*/) const override {
    return encode_signs(p, {}, 0.0f, /*at_least=*/true, p);
  }

  void decode_add_impl(const at::Tensor& payload, const at::Tensor& out,
                       float alpha) const override {
    decode_sign_bits(payload, out, alpha * 1.0f, alpha * -1.0f, "signsgd decode");
  }
};

class EfSignDeviceCodec final : public DeviceCodec {
 public:
  EfSignDeviceCodec(const Codec& codec, std::int64_t block) : DeviceCodec(codec), block_(block) {}

  at::Tensor encode_impl(const at::Tensor& g, const StepContext& /*ctx*/) const override {
    const std::int64_t nb = blocks(g.numel());
    at::Tensor payload = packed_bits(g, 4 * nb);
    write_scales(g, payload);
    pack1(g.ge(0.0f), payload.narrow(0, 4 * nb, payload.numel() - 4 * nb));
    return payload;
  }

  // p += sign_lut(-1, scale_b) = {+scale_b (bit 0), -scale_b (bit 1)}.
  at::Tensor encode_feedback_impl(const at::Tensor& p, const StepContext& /*ctx*/) const override {
    const std::int64_t nb = blocks(p.numel());
    at::Tensor payload = packed_bits(p, 4 * nb);
    const at::Tensor scales = write_scales(p, payload);
    const at::Tensor bits = p.ge(0.0f);
    pack1(bits, payload.narrow(0, 4 * nb, payload.numel() - 4 * nb));
    add_per_block(p, bits, scales.neg(), scales);
    return payload;
  }

  void decode_add_impl(const at::Tensor& payload, const at::Tensor& out,
                       float alpha) const override {
    const std::int64_t n = out.numel();
    const std::int64_t nb = blocks(n);
    const std::string op = "efsign decode";
    expect_payload_size(payload, 4 * nb + static_cast<std::int64_t>(detail::packed1_bytes(n)), op,
                        n);
    const at::Tensor scales = payload.narrow(0, 0, 4 * nb).view(at::kFloat);
    const at::Tensor bits = unpack1(payload.narrow(0, 4 * nb, payload.numel() - 4 * nb));
    // One sync: any bad scale (not finite, or sign bit set), any padding bit.
    const at::Tensor bad_scale = scales.isfinite().logical_not().logical_or_(scales.signbit());
    const at::Tensor flags =
        at::stack({bad_scale.any(), bits.narrow(0, n, bits.numel() - n).any().to(at::kBool)})
            .to(at::kCPU);
    if (flags[0].item<bool>()) {
      // The error path only: the first bad scale, validated on the host for the CPU's words.
      const std::int64_t b = bad_scale.nonzero().select(1, 0)[0].item<std::int64_t>();
      detail::validate_scale(scales[b].item<float>(), op, "scale");
    }
    if (flags[1].item<bool>()) {
      throw CorruptMessage(op + ": nonzero padding bits after the last element (n " +
                           std::to_string(n) + ")");
    }
    if (n == 0) return;
    // sign_lut(alpha, scale) = {alpha * -scale, alpha * scale}, each one float product.
    add_per_block(out, bits.narrow(0, 0, n).to(at::kBool), scales.mul(alpha),
                  scales.neg().mul(alpha));
  }

 private:
  // Scales: one for the whole tensor (block 0, also for n = 0), else ceil(n/B).
  std::int64_t blocks(std::int64_t n) const {
    return block_ == 0 || n == 0 ? 1 : (n + block_ - 1) / block_;
  }

  // scale_b = float(||p_b||_1 / |b|) into the payload's first 4 nb bytes; InvalidArgument,
  // nothing written, if p is not finite. Returns the scales (float, p's device).
  at::Tensor write_scales(const at::Tensor& p, const at::Tensor& payload) const {
    const std::int64_t n = p.numel();
    const at::Tensor out = payload.narrow(0, 0, 4 * blocks(n)).view(at::kFloat);
    if (n == 0) return out.fill_(0.0f);
    const std::int64_t segment = block_ == 0 ? n : block_;
    const at::Tensor l1 = segment_abs_sums(p, segment);  // double, one per block
    // A block's sum is finite exactly when all of p is (|x| summed in double cannot overflow).
    const at::Tensor total = l1.sum();
    const double check = total.item<double>();
    if (!std::isfinite(check)) {
      throw InvalidArgument("efsign encode: non-finite input (||p||_1 = " + std::to_string(check) +
                            ")");
    }
    // |b| per block: segment, the last n - (nb - 1) * segment.
    at::Tensor len = at::full_like(l1, static_cast<double>(segment));
    len[-1] = static_cast<double>(n - (l1.numel() - 1) * segment);
    out.copy_(l1.div(len));
    return out;
  }

  // x += where(bit, one_b, zero_b) over the blocks: x, bits of n values, one/zero [nb].
  void add_per_block(const at::Tensor& x, const at::Tensor& bits, const at::Tensor& one,
                     const at::Tensor& zero) const {
    const std::int64_t n = x.numel();
    if (n == 0) return;
    const std::int64_t nb = blocks(n);
    const std::int64_t segment = block_ == 0 ? n : block_;
    const std::int64_t whole = n / segment;  // full blocks
    if (whole > 0) {
      x.narrow(0, 0, whole * segment)
          .view({whole, segment})
          .add_(at::where(bits.narrow(0, 0, whole * segment).view({whole, segment}),
                          one.narrow(0, 0, whole).unsqueeze(1),
                          zero.narrow(0, 0, whole).unsqueeze(1)));
    }
    if (whole < nb) {
      const std::int64_t begin = whole * segment;
      x.narrow(0, begin, n - begin)
          .add_(at::where(bits.narrow(0, begin, n - begin), one.narrow(0, whole, 1),
                          zero.narrow(0, whole, 1)));
    }
  }

  std::int64_t block_;
};

}  // namespace

std::unique_ptr<DeviceCodec> make_signsgd(const Codec& codec, const SpecParams& /*params*/) {
  return std::make_unique<SignSgdDeviceCodec>(codec);
}

std::unique_ptr<DeviceCodec> make_efsign(const Codec& codec, const SpecParams& params) {
  return std::make_unique<EfSignDeviceCodec>(codec, params.integer("block"));
}

}  // namespace gradcomp::device
