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
// One tensor at a time, blocks are cut without padding the input (a block may be far longer
// than the tensor). A batch on CUDA (batches_on) pads each segment with zeros to whole
// blocks and runs each step once for all of them: about 50 ATen calls a tensor become a
// few dozen a batch, plus views (docs/measurements/gpu.md).
//
// Encoding syncs once for a batch (the finiteness check); decoding once for a batch
// (CheckedDecodeCodec: the scales, the padding, the codes).
#include <algorithm>
#include <numeric>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "block_layout.h"
#include "codecs.h"
#include "detail/bitstream.h"
#include "gradcomp/error.h"
#include "segmented_codec.h"

namespace gradcomp::device {

namespace {

class IntDeviceCodec final : public SegmentedCodec {
 public:
  IntDeviceCodec(const Codec& codec, std::int64_t bits, std::int64_t block)
      : SegmentedCodec(codec),
        bits_(bits),
        q_((std::int64_t{1} << (bits - 1)) - 1),
        d_(block),
        batch_override_(batch_override()) {}

 protected:
  std::int64_t payload_bytes(std::int64_t n) const override {
    return 4 * blocks(n) + stream_bytes(n);
  }
  std::int64_t report_size() const override { return 3; }

  // [a scale not finite or negative, padding dirty, a code out of range or nonzero in a
  // block of scale 0], the CPU codec's checks in its order.
  at::Tensor reports(const at::Tensor& payloads, std::span<const std::int64_t> /*offsets*/,
                     std::span<const std::int64_t> /*bytes*/, std::span<const std::int64_t> ns,
                     std::span<const at::Tensor> each) const override {
    const BlockLayout layout(ns, d_, bits_);
    if (batches_blocks(layout, payloads.device())) return block_reports(each, layout);
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

  void add_batch(std::span<const at::Tensor> payload, std::span<const std::int64_t> ns,
                 std::span<const at::Tensor> outs, float alpha,
                 const float* reports) const override {
    const BlockLayout layout(ns, d_, bits_);
    if (!batches_blocks(layout, outs.front().device())) {
      SegmentedCodec::add_batch(payload, ns, outs, alpha, reports);
      return;
    }
    // Every rank's payloads decoded at once, as whole blocks; rank r's are the r-th of
    // `ranks` runs of equal layout (every rank sends each segment's size), summed into one
    // accumulator in rank order, then each segment's values copied out.
    const std::int64_t ranks = static_cast<std::int64_t>(payload.size() / outs.size());
    const Blocks b = read_blocks(payload, layout);
    const at::Tensor step = b.scales.div(at::full_like(b.scales, static_cast<float>(q_)));
    const at::Tensor decoded =
        b.codes.to(at::kInt).sub_(q_).to(at::kFloat).mul_(step.unsqueeze(1)).view({-1});
    const std::int64_t per_rank = layout.blocks() / ranks * d_;
    const at::Tensor sum = at::zeros({per_rank}, outs.front().options());
    for (std::int64_t r = 0; r < ranks; ++r)
      sum.add_(decoded.narrow(0, r * per_rank, per_rank), alpha);
    for (std::size_t s = 0; s < outs.size(); ++s) {
      if (outs[s].numel() == 0) continue;
      outs[s].copy_(sum.narrow(0, layout.segments()[s].block * d_, outs[s].numel()));
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
    const BlockLayout layout(sizes, d_, bits_);
    if (batches_blocks(layout, a.device())) return encode_blocks(a, layout, write);
    // One segment, the CPU, or blocks so long that padding every segment to whole blocks
    // would more than double the batch: each segment by itself.
    std::vector<at::Tensor> payloads;
    offset = 0;
    for (const std::int64_t n : sizes) {
      const at::Tensor x = a.narrow(0, offset, n);
      payloads.push_back(encode_one(x, write));
      offset += n;
    }
    return joined(std::move(payloads), a);
  }

  // Every segment at once, each padded with zeros to whole blocks: one [blocks, d] matrix
  // whose rows are the batch's blocks in order, so that every step below is one
  // operation for the whole batch (a launch each on a GPU, where one segment at a time
  // made about 50). The padding's zeros change no scale (max |x| >= 0) and their codes are
  // dropped before packing. The same operations on the same values as encode_one: the
  // same bytes.
  EncodedBatch encode_blocks(const at::Tensor& a, const BlockLayout& layout, bool write) const {
    const std::int64_t nb = layout.blocks();
    const at::Tensor zeros =
        at::zeros({std::max<std::int64_t>(layout.max_padding(), 1)}, a.options());
    std::vector<at::Tensor> parts;
    for (const BlockLayout::Segment& g : layout.segments()) {
      if (g.n > 0) parts.push_back(a.narrow(0, g.offset, g.n));
      if (g.padding > 0) parts.push_back(zeros.narrow(0, 0, g.padding));
    }
    EncodedBatch out;
    for (const BlockLayout::Segment& g : layout.segments()) out.bytes.push_back(payload_bytes(g.n));
    if (nb == 0) {
      out.payloads = at::empty({0}, a.options().dtype(at::kByte));
      return out;
    }
    const at::Tensor x = at::cat(parts).view({nb, d_});
    const at::Tensor s = x.abs().amax(1);
    const at::Tensor sd = s.to(at::kDouble);
    const at::Tensor factor = at::where(sd.eq(0), at::zeros_like(sd),
                                        at::full_like(sd, static_cast<double>(q_)).div_(sd));
    const at::Tensor c = x.to(at::kDouble)
                             .mul_(factor.unsqueeze(1))
                             .round_()
                             .clamp_(static_cast<double>(-q_), static_cast<double>(q_))
                             .add_(static_cast<double>(q_))
                             .to(at::kByte)
                             .view({-1});
    if (write) {
      // x - decode, then back into a without the padding.
      const at::Tensor step = s.div(at::full_like(s, static_cast<float>(q_)));
      const at::Tensor residual =
          x.sub_(c.view({nb, d_}).to(at::kInt).sub_(q_).to(at::kFloat).mul_(step.unsqueeze(1)))
              .view({-1});
      std::vector<at::Tensor> values;
      for (const BlockLayout::Segment& g : layout.segments()) {
        if (g.n > 0) values.push_back(residual.narrow(0, g.block * d_, g.n));
      }
      at::Tensor target = a;
      at::cat_out(target, values);
    }
    // Each segment's code bits, then zero bits to its stream's whole words; packed at once.
    const at::Tensor bits = code_stream_bits(c, bits_);
    const at::Tensor zero_bits =
        at::zeros({std::max<std::int64_t>(layout.max_stream_padding_bits(), 1)}, bits.options());
    std::vector<at::Tensor> stream_parts;
    std::int64_t stream_total = 0;
    for (const BlockLayout::Segment& g : layout.segments()) {
      if (g.n == 0) continue;
      stream_parts.push_back(bits.narrow(0, g.block * d_ * bits_, g.n * bits_));
      const std::int64_t pad = 8 * g.stream_bytes - g.n * bits_;
      if (pad > 0) stream_parts.push_back(zero_bits.narrow(0, 0, pad));
      stream_total += g.stream_bytes;
    }
    const at::Tensor streams = at::empty({stream_total}, a.options().dtype(at::kByte));
    pack_stream_bits(at::cat(stream_parts), streams);
    // The payloads: each segment's scales, then its stream.
    const at::Tensor scale_bytes = s.view(at::kByte);
    std::vector<at::Tensor> payload_parts;
    std::int64_t stream_at = 0;
    for (const BlockLayout::Segment& g : layout.segments()) {
      if (g.n == 0) continue;
      payload_parts.push_back(scale_bytes.narrow(0, 4 * g.block, 4 * g.blocks));
      payload_parts.push_back(streams.narrow(0, stream_at, g.stream_bytes));
      stream_at += g.stream_bytes;
    }
    out.payloads = at::cat(payload_parts);
    return out;
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

  // Whether a batch's messages (or segments) are handled at once, as whole blocks: more
  // than one, with values, on a device that batches (batches_on: CUDA), and padding every
  // one to whole blocks at most doubles them.
  bool batches_blocks(const BlockLayout& layout, const at::Device& device) const {
    return layout.segments().size() > 1 && layout.values() > 0 &&
           layout.padding() <= layout.values() && batches_on(device, batch_override_);
  }

  // Every message of a batch as whole blocks (layout over their sizes, in order).
  struct Blocks {
    at::Tensor scales;       // float [blocks]
    at::Tensor codes;        // uint8 [blocks, d]: a block's codes after its message's are q
    at::Tensor stream_bits;  // every stream's bits, in order, padding included
  };
  Blocks read_blocks(std::span<const at::Tensor> each, const BlockLayout& layout) const {
    std::vector<at::Tensor> scale_parts;
    std::vector<at::Tensor> stream_parts;
    for (std::size_t i = 0; i < each.size(); ++i) {
      const BlockLayout::Segment& g = layout.segments()[i];
      if (g.n == 0) continue;
      scale_parts.push_back(each[i].narrow(0, 0, 4 * g.blocks).view(at::kFloat));
      stream_parts.push_back(each[i].narrow(0, 4 * g.blocks, g.stream_bytes));
    }
    Blocks b;
    b.scales = at::cat(scale_parts);
    b.stream_bits = unpack_stream_bits(at::cat(stream_parts));
    std::vector<at::Tensor> code_bits;
    std::int64_t at = 0;
    for (const BlockLayout::Segment& g : layout.segments()) {
      if (g.n == 0) continue;
      code_bits.push_back(b.stream_bits.narrow(0, at, g.n * bits_));
      at += 8 * g.stream_bytes;
    }
    const at::Tensor codes = stream_codes(at::cat(code_bits), layout.values(), bits_);
    const at::Tensor codes_of_zero =
        at::full({std::max<std::int64_t>(layout.max_padding(), 1)}, q_, codes.options());
    std::vector<at::Tensor> parts;
    at = 0;
    for (const BlockLayout::Segment& g : layout.segments()) {
      if (g.n > 0) parts.push_back(codes.narrow(0, at, g.n));
      at += g.n;
      if (g.padding > 0) parts.push_back(codes_of_zero.narrow(0, 0, g.padding));
    }
    b.codes = at::cat(parts).view({layout.blocks(), d_});
    return b;
  }

  // reports() for every message at once: each check's flags per block (or per padding
  // bit), summed per message with one indexed add each.
  at::Tensor block_reports(std::span<const at::Tensor> each, const BlockLayout& layout) const {
    const Blocks b = read_blocks(each, layout);
    const auto messages = static_cast<std::int64_t>(each.size());
    const at::Device device = b.scales.device();
    std::vector<std::int64_t> blocks_of;
    std::vector<std::int64_t> padding_bits_of;
    std::vector<at::Tensor> padding_bits;
    std::int64_t at = 0;
    for (const BlockLayout::Segment& g : layout.segments()) {
      blocks_of.push_back(g.blocks);
      const std::int64_t pad = g.n == 0 ? 0 : 8 * g.stream_bytes - g.n * bits_;
      padding_bits_of.push_back(pad);
      if (pad > 0) padding_bits.push_back(b.stream_bits.narrow(0, at + g.n * bits_, pad));
      if (g.n > 0) at += 8 * g.stream_bytes;
    }
    // Each block's message, each padding bit's: repeat_interleave(repeats, output_size), the
    // size given so that a GPU needs no sync to know it.
    const at::Tensor block_message = at::repeat_interleave(
        longs_to_device(blocks_of, device), std::optional<std::int64_t>(layout.blocks()));
    const at::Tensor bad_scale =
        b.scales.isfinite().logical_not().logical_or_(b.scales.signbit()).to(at::kFloat);
    const at::Tensor bad_code =
        b.codes.gt(2 * q_)
            .logical_or_(b.codes.ne(q_).logical_and_(b.scales.eq(0).unsqueeze(1)))
            .any(1)
            .to(at::kFloat);
    const at::TensorOptions floats = b.scales.options();
    const at::Tensor per_scale =
        at::zeros({messages}, floats).index_add_(0, block_message, bad_scale);
    const at::Tensor per_code =
        at::zeros({messages}, floats).index_add_(0, block_message, bad_code);
    at::Tensor dirty = at::zeros({messages}, floats);
    if (!padding_bits.empty()) {
      const std::int64_t total =
          std::accumulate(padding_bits_of.begin(), padding_bits_of.end(), std::int64_t{0});
      const at::Tensor bit_message = at::repeat_interleave(longs_to_device(padding_bits_of, device),
                                                           std::optional<std::int64_t>(total));
      dirty.index_add_(0, bit_message, at::cat(padding_bits).to(at::kFloat));
    }
    return at::stack({per_scale, dirty, per_code}, 1);
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
  std::optional<bool> batch_override_;  // GRADCOMP_DEVICE_BATCH when the codec was built
};

}  // namespace

std::unique_ptr<DeviceCodec> make_int(const Codec& codec, const SpecParams& params) {
  return std::make_unique<IntDeviceCodec>(codec, params.integer("bits"), params.integer("block"));
}

}  // namespace gradcomp::device
