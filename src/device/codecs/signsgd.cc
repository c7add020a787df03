// signsgd and efsign on the device (src/core/codecs/signsgd.cc is the CPU codec and the
// wire format): one sign bit per value, bit 1 for p >= 0 (-0 included, NaN gives 0), in
// the 1bit layout. signsgd decodes to +-1 (1bit's decode: sign_bits.h); efsign to
// +-scale_b, scale_b = ||p_b||_1 / |b| per block of B values (block=0: one block), the
// scales in front of the bits.
//
// efsign's ||p_b||_1 is the CPU's double bit for bit (segment_abs_sums: its blocked order
// as a scan in double on the device). One sync per encode checks that p is finite before
// anything is written (the CPU throws InvalidArgument first), one per decode checks the
// scales and the padding; a batch of tensors or payloads shares that one sync.
#include <cmath>

#include "codecs.h"
#include "detail/bitpack.h"
#include "gradcomp/error.h"
#include "segmented_codec.h"
#include "sign_bits.h"

namespace gradcomp::device {

namespace {

at::Tensor packed_bits(const at::Tensor& p, std::int64_t header) {
  return at::empty({header + static_cast<std::int64_t>(
                                 detail::packed1_bytes(static_cast<std::size_t>(p.numel())))},
                   p.options().dtype(at::kByte));
}

class SignSgdDeviceCodec final : public SignBitsCodec {
 public:
  explicit SignSgdDeviceCodec(const Codec& codec) : SignBitsCodec(codec) {}

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
};

class EfSignDeviceCodec final : public SegmentedCodec {
 public:
  EfSignDeviceCodec(const Codec& codec, std::int64_t block)
      : SegmentedCodec(codec), block_(block) {}

 protected:
  std::int64_t payload_bytes(std::int64_t n) const override {
    return 4 * blocks(n) + static_cast<std::int64_t>(detail::packed1_bytes(n));
  }

  std::int64_t report_size() const override { return 2; }

  // [any scale not finite or with its sign bit set, any padding bit set].
  at::Tensor reports(const at::Tensor& payloads, std::span<const std::int64_t> offsets,
                     std::span<const std::int64_t> bytes, std::span<const std::int64_t> ns,
                     std::span<const at::Tensor> each) const override {
    const at::Tensor bad_scales =
        stack_reports(each, ns, [&](const at::Tensor& payload, std::int64_t n) {
          return bad_scale(scales_of(payload, n)).any();
        });
    return at::stack({bad_scales, padding_dirty(payloads, offsets, bytes, ns, 1)}, 1);
  }

  void check(const at::Tensor& payload, std::int64_t n, const float* report) const override {
    const std::string op = "efsign decode";
    if (report[0] != 0.0f) {
      // The error path only: the first bad scale, validated on the host for the CPU's words.
      const at::Tensor scales = scales_of(payload, n);
      const std::int64_t b = bad_scale(scales).nonzero().select(1, 0)[0].item<std::int64_t>();
      detail::validate_scale(scales[b].item<float>(), op, "scale");
    }
    if (report[1] != 0.0f) {
      throw CorruptMessage(op + ": nonzero padding bits after the last element (n " +
                           std::to_string(n) + ")");
    }
  }

  // sign_lut(alpha, scale) = {alpha * -scale, alpha * scale}, each one float product.
  void add_checked(const at::Tensor& payload, const at::Tensor& out, float alpha,
                   const float* /*report*/) const override {
    const std::int64_t n = out.numel();
    const std::int64_t header = 4 * blocks(n);
    const at::Tensor scales = scales_of(payload, n);
    const at::Tensor bits = unpack1(payload.narrow(0, header, payload.numel() - header));
    add_per_block(out, bits.narrow(0, 0, n).to(at::kBool), scales.mul(alpha),
                  scales.neg().mul(alpha));
  }

 private:
  // Scales: one for the whole tensor (block 0, also for n = 0), else ceil(n/B).
  std::int64_t blocks(std::int64_t n) const {
    return block_ == 0 || n == 0 ? 1 : (n + block_ - 1) / block_;
  }
  std::int64_t segment(std::int64_t n) const { return block_ == 0 ? n : block_; }

  at::Tensor scales_of(const at::Tensor& payload, std::int64_t n) const {
    return payload.narrow(0, 0, 4 * blocks(n)).view(at::kFloat);
  }
  static at::Tensor bad_scale(const at::Tensor& scales) {
    return scales.isfinite().logical_not().logical_or_(scales.signbit());
  }

  // Every segment's ||p_b||_1 first, then one sync: InvalidArgument, nothing written, for
  // the first segment that is not finite (a block's sum of |x| in double is finite exactly
  // when its values are).
  EncodedBatch encode_segments(const at::Tensor& flat, const at::Tensor& addend,
                               std::span<const std::int64_t> sizes, bool feedback) const override {
    if (addend.defined()) flat.add_(addend);
    std::vector<at::Tensor> l1(sizes.size());
    std::vector<at::Tensor> totals;
    std::int64_t offset = 0;
    for (std::size_t s = 0; s < sizes.size(); ++s) {
      if (sizes[s] > 0) {
        l1[s] = segment_abs_sums(flat.narrow(0, offset, sizes[s]), segment(sizes[s]));
        totals.push_back(l1[s].sum().view({1}));
      }
      offset += sizes[s];
    }
    if (!totals.empty()) {
      const at::Tensor host = at::cat(totals).to(at::kCPU);  // the sync
      const double* total = host.data_ptr<double>();
      for (std::int64_t i = 0; i < host.numel(); ++i) {
        if (!std::isfinite(total[i])) {
          throw InvalidArgument(
              "efsign encode: non-finite input (||p||_1 = " + std::to_string(total[i]) + ")");
        }
      }
    }
    std::vector<at::Tensor> payloads;
    offset = 0;
    for (std::size_t s = 0; s < sizes.size(); ++s) {
      const std::int64_t n = sizes[s];
      const at::Tensor p = flat.narrow(0, offset, n);
      const std::int64_t header = 4 * blocks(n);
      at::Tensor payload = packed_bits(p, header);
      const at::Tensor scales = payload.narrow(0, 0, header).view(at::kFloat);
      if (n == 0) {
        scales.fill_(0.0f);
      } else {
        // scale_b = float(||p_b||_1 / |b|), |b| = B but the last block's n - (nb - 1) B.
        at::Tensor len = at::full_like(l1[s], static_cast<double>(segment(n)));
        len[-1] = static_cast<double>(n - (l1[s].numel() - 1) * segment(n));
        scales.copy_(l1[s].div(len));
      }
      const at::Tensor bits = p.ge(0.0f);
      pack1(bits, payload.narrow(0, header, payload.numel() - header));
      // p += sign_lut(-1, scale_b) = {+scale_b (bit 0), -scale_b (bit 1)}.
      if (feedback) add_per_block(p, bits, scales.neg(), scales);
      payloads.push_back(payload);
      offset += n;
    }
    return joined(std::move(payloads), flat);
  }

  // x += where(bit, one_b, zero_b) over the blocks: x, bits of n values, one/zero [nb].
  void add_per_block(const at::Tensor& x, const at::Tensor& bits, const at::Tensor& one,
                     const at::Tensor& zero) const {
    const std::int64_t n = x.numel();
    if (n == 0) return;
    const std::int64_t nb = blocks(n);
    const std::int64_t seg = segment(n);
    const std::int64_t whole = n / seg;  // full blocks
    if (whole > 0) {
      x.narrow(0, 0, whole * seg)
          .view({whole, seg})
          .add_(at::where(bits.narrow(0, 0, whole * seg).view({whole, seg}),
                          one.narrow(0, 0, whole).unsqueeze(1),
                          zero.narrow(0, 0, whole).unsqueeze(1)));
    }
    if (whole < nb) {
      const std::int64_t begin = whole * seg;
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
