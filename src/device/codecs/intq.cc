// int on the device (src/core/codecs/intq.cc is the CPU codec and the wire format): b-bit
// codes c + q, q = 2^(b-1) - 1, with one float32 absmax scale s per block of d values;
// c = round_half_even(v * (q / s)) in [-q, q], decoded as c * (s / q).
//
// Bit for bit the CPU codec's numbers, each step one ATen operation whose rounding is
// IEEE's on either device: q / s and v * (q / s) in double (at::round rounds half to even,
// as std::nearbyint), s / q a float division by a tensor (CUDA turns a division by a
// scalar into a multiplication by its reciprocal, which rounds differently), and the
// decode's alpha * (c * step) + out one fused multiply-add, as GCC contracts the CPU
// codec's line on x86-64-v3 and as ATen's add with alpha computes it (its CPU vector code
// and CUDA's; tests/device/scatter_device_test.cc's world of 3, alpha 1/3, tells them apart).
// Blocks are cut without padding the input (a block may be far longer than the tensor).
//
// Encoding syncs once for a batch (the finiteness check); decoding once for a batch
// (CheckedDecodeCodec: the scales, the padding, the codes).
#include <string>
#include <utility>
#include <vector>

#include "codecs.h"
#include "detail/bitstream.h"
#include "gradcomp/error.h"
#include "segmented_codec.h"

namespace gradcomp::device {

namespace {

class IntDeviceCodec final : public SegmentedCodec {
 public:
  IntDeviceCodec(const Codec& codec, std::int64_t bits, std::int64_t block)
      : SegmentedCodec(codec), bits_(bits), q_((std::int64_t{1} << (bits - 1)) - 1), d_(block) {}

 protected:
  std::int64_t payload_bytes(std::int64_t n) const override {
    return 4 * blocks(n) + stream_bytes(n);
  }
  std::int64_t report_size() const override { return 3; }

  // [a scale not finite or negative, padding dirty, a code out of range or nonzero in a
  // block of scale 0], the CPU codec's checks in its order.
  at::Tensor reports(const at::Tensor& /*payloads*/, std::span<const std::int64_t> /*offsets*/,
                     std::span<const std::int64_t> /*bytes*/, std::span<const std::int64_t> ns,
                     std::span<const at::Tensor> each) const override {
    return stack_reports(each, ns, [&](const at::Tensor& payload, std::int64_t n) {
      const at::Tensor s = scales(payload, n);
      const at::Tensor bad_scale = s.isfinite().logical_not().logical_or_(s.signbit()).any();
      const at::Tensor bits = unpack_stream_bits(stream(payload, n));
      const at::Tensor dirty = bits.narrow(0, n * bits_, bits.numel() - n * bits_).any();
      const at::Tensor codes = stream_codes(bits, n, bits_);
      const at::Tensor bad_code =
          codes.gt(2 * q_).logical_or_(codes.ne(q_).logical_and_(per_value(s.eq(0), n))).any();
      return at::stack({bad_scale, dirty, bad_code});
    });
  }

  // The error path names what the CPU codec names: the first bad scale, the padding, or
  // the first bad code.
  void check(const at::Tensor& payload, std::int64_t n, const float* report) const override {
    const std::string op = codec().name() + " decode: ";
    if (report[0] != 0.0f) {
      const at::Tensor s = scales(aligned_payload(payload), n).cpu();
      const at::Tensor bad = s.isfinite().logical_not().logical_or_(s.signbit());
      const std::int64_t b = bad.nonzero().select(1, 0)[0].item<std::int64_t>();
      throw CorruptMessage(op + "block " + std::to_string(b) + " has scale " +
                           std::to_string(s[b].item<float>()) + ", expected a finite value >= +0");
    }
    if (report[1] != 0.0f) {
      throw CorruptMessage(op + "nonzero padding bits after " + std::to_string(n) + " codes");
    }
    if (report[2] != 0.0f) {
      const at::Tensor p = aligned_payload(payload);
      const at::Tensor codes =
          stream_codes(unpack_stream_bits(stream(p, n)), n, bits_).to(at::kLong).cpu();
      const at::Tensor zero = per_value(scales(p, n).eq(0), n).cpu();
      const at::Tensor bad = codes.gt(2 * q_).logical_or_(codes.ne(q_).logical_and_(zero));
      const std::int64_t i = bad.nonzero().select(1, 0)[0].item<std::int64_t>();
      const std::int64_t c = codes[i].item<std::int64_t>();
      if (c > 2 * q_) {
        throw CorruptMessage(op + "element " + std::to_string(i) + " has code " +
                             std::to_string(c) + " > " + std::to_string(2 * q_));
      }
      throw CorruptMessage(op + "element " + std::to_string(i) + " is nonzero in block " +
                           std::to_string(i / d_) + " of scale 0");
    }
  }

  void add_checked(const at::Tensor& payload, const at::Tensor& out, float alpha,
                   const float* /*report*/) const override {
    const std::int64_t n = out.numel();
    const at::Tensor p = aligned_payload(payload);
    const at::Tensor codes = stream_codes(unpack_stream_bits(stream(p, n)), n, bits_);
    out.add_(decoded(codes, scales(p, n), n), alpha);
  }

 private:
  EncodedBatch encode_segments(const at::Tensor& a, const at::Tensor& b,
                               std::span<const std::int64_t> sizes, bool write) const override {
    if (b.defined()) a.add_(b);
    // Every segment's finiteness in one transfer, before anything is encoded.
    std::vector<at::Tensor> flags;
    std::int64_t offset = 0;
    for (const std::int64_t n : sizes) {
      flags.push_back(a.narrow(0, offset, n).isfinite().logical_not().any().view({1}));
      offset += n;
    }
    if (!flags.empty()) {
      const at::Tensor host = at::cat(flags).to(at::kCPU);  // the sync
      const bool* non_finite = host.data_ptr<bool>();
      offset = 0;
      for (std::size_t s = 0; s < sizes.size(); ++s) {
        if (non_finite[s]) {
          throw_non_finite(a.narrow(0, offset, sizes[s]));
        }
        offset += sizes[s];
      }
    }
    std::vector<at::Tensor> payloads;
    offset = 0;
    for (const std::int64_t n : sizes) {
      const at::Tensor x = a.narrow(0, offset, n);
      payloads.push_back(encode_one(x, write));
      offset += n;
    }
    return joined(std::move(payloads), a);
  }

  // The payload of a finite x; where write, x <- x - decode(payload).
  at::Tensor encode_one(const at::Tensor& x, bool write) const {
    const std::int64_t n = x.numel();
    at::Tensor payload = at::empty({payload_bytes(n)}, x.options().dtype(at::kByte));
    if (n == 0) return payload;
    const at::Tensor s = block_absmax(x);
    payload.narrow(0, 0, 4 * blocks(n)).view(at::kFloat).copy_(s);
    // q / s in double; a block of scale 0 gets factor 0, so its codes are q (its values
    // are all +-0).
    const at::Tensor sd = s.to(at::kDouble);
    const at::Tensor factor = at::where(sd.eq(0), at::zeros_like(sd),
                                        at::full_like(sd, static_cast<double>(q_)).div_(sd));
    const at::Tensor c = x.to(at::kDouble)
                             .mul_(per_value(factor, n))
                             .round_()
                             .clamp_(static_cast<double>(-q_), static_cast<double>(q_))
                             .add_(static_cast<double>(q_))
                             .to(at::kByte);
    pack_stream(c, bits_, payload.narrow(0, 4 * blocks(n), stream_bytes(n)));
    if (write) x.sub_(decoded(c, s, n));
    return payload;
  }

  // (c - q) * (s / q), value by value, as the CPU's float arithmetic.
  at::Tensor decoded(const at::Tensor& codes, const at::Tensor& s, std::int64_t n) const {
    const at::Tensor step = s.div(at::full_like(s, static_cast<float>(q_)));
    return codes.to(at::kInt).sub_(q_).to(at::kFloat).mul_(per_value(step, n));
  }

  // max |x| over each block (a float per block; NaN for a block holding one).
  at::Tensor block_absmax(const at::Tensor& x) const {
    const std::int64_t n = x.numel();
    const std::int64_t whole = n / d_;
    std::vector<at::Tensor> parts;
    if (whole > 0) parts.push_back(x.narrow(0, 0, whole * d_).view({whole, d_}).abs().amax(1));
    if (whole * d_ < n)
      parts.push_back(x.narrow(0, whole * d_, n - whole * d_).abs().amax({0}, true));
    return parts.size() == 1 ? parts.front() : at::cat(parts);
  }

  // A value per block, one per element: a view for one block (which may be far longer than
  // n), else one copy of the blocks' values, d each, cut to n (less than d more than n).
  at::Tensor per_value(const at::Tensor& per_block, std::int64_t n) const {
    const std::int64_t nb = blocks(n);
    if (nb == 1) return per_block.expand({n});
    return per_block.unsqueeze(1).expand({nb, d_}).reshape({nb * d_}).narrow(0, 0, n);
  }

  at::Tensor scales(const at::Tensor& payload, std::int64_t n) const {
    return payload.narrow(0, 0, 4 * blocks(n)).view(at::kFloat);
  }
  at::Tensor stream(const at::Tensor& payload, std::int64_t n) const {
    return payload.narrow(0, 4 * blocks(n), stream_bytes(n));
  }

  [[noreturn]] void throw_non_finite(const at::Tensor& x) const {
    const std::int64_t i =
        x.isfinite().logical_not().nonzero().select(1, 0)[0].item<std::int64_t>();
    throw InvalidArgument(codec().name() + " encode: block " + std::to_string(i / d_) +
                          " holds a non-finite value");
  }

  std::int64_t blocks(std::int64_t n) const { return (n + d_ - 1) / d_; }
  std::int64_t stream_bytes(std::int64_t n) const {
    return static_cast<std::int64_t>(
        detail::packed_bytes(static_cast<std::size_t>(n), static_cast<unsigned>(bits_)));
  }

  std::int64_t bits_;
  std::int64_t q_;
  std::int64_t d_;
};

}  // namespace

std::unique_ptr<DeviceCodec> make_int(const Codec& codec, const SpecParams& params) {
  return std::make_unique<IntDeviceCodec>(codec, params.integer("bits"), params.integer("block"));
}

}  // namespace gradcomp::device
