// signsgd and efsign: sign compression.
//
// signsgd — signSGD with majority vote (Bernstein et al., "signSGD: Compressed
//   Optimisation for Non-Convex Problems", ICML 2018; "signSGD with Majority Vote is
//   Communication Efficient and Fault Tolerant", ICLR 2019). docs/algorithms/sign.md.
//   Algorithm: each worker sends sign(p_i) (p: its gradient or momentum), one bit each;
//     sign(0) := +1 (bit 1 for p >= 0, including -0.0; NaN gives bit 0). decode: +-1.
//     The vote V = sign(sum_w sign_w) is the reducer's job (e.g. an int8 allreduce of
//     the decoded +-1); this codec only carries the bits. Runs without error feedback,
//     as the paper's majority vote does.
//   Wire payload: 4*ceil(n/32) bytes, the 1bit layout (first value in the MSB of its
//     byte, value i = bit 7 - i%8 of byte i/8), padding bits 0.
//   Aggregation: not linear as bits; gather and decode (sum of +-1 = the vote's tally).
//
// efsign — EF-signSGD (Karimireddy et al., "Error Feedback Fixes SignSGD and other
//   Gradient Compression Schemes", ICML 2019). docs/algorithms/sign.md.
//   Algorithm: on p = g + e (the Memory adds e; the learning rate stays outside the codec),
//     delta = (||p||_1 / n) * sign(p), e <- p - delta. sign(0) := +1 as above.
//     ||p||_1 is summed in double with a fixed blocked order (detail::abs_sum), so it
//     does not depend on SIMD width or thread count.
//   block = B > 0 (a multiple of 32): one scale per block of B elements instead of one per
//     tensor -- the blockwise scaled sign of Zheng et al., "Communication-Efficient
//     Distributed Blockwise Momentum SGD with Error-Feedback" (NeurIPS 2019), which keeps
//     a few large entries from shrinking the scale of a whole layer. block = 0 (default)
//     is the paper's one float per tensor.
//   Wire payload, with nb = 1 (block 0) or ceil(n/B) scales:
//     offset 0      nb x f32  scale_b = ||p_b||_1 / |b| (finite, >= +0; 0 for n = 0)
//     offset 4*nb   4*ceil(n/32) bytes of sign bits in the 1bit layout: 1 -> +scale_b,
//                   0 -> -scale_b (block b's bits start at byte b*B/8: B is a multiple of 32)
//   Aggregation: not linear (per-worker scales); gather, decode each, sum.
#include <algorithm>
#include <cmath>
#include <string>

#include "codecs.h"
#include "detail/bitpack.h"
#include "detail/pending.h"
#include "detail/reductions.h"
#include "gradcomp/error.h"
#include "gradcomp/wire.h"

namespace gradcomp {

namespace {

constexpr CodecTraits kSignTraits{.linear = false, .unbiased = false, .needs_memory = false};
constexpr CodecTraits kEfSignTraits{.linear = false, .unbiased = false, .needs_memory = true};

// bit 1 <-> +v, bit 0 <-> -v, scaled by alpha.
detail::Lut1 sign_lut(float alpha, float v) { return {{alpha * -v, alpha * v}}; }

class SignSgdCodec final : public Codec {
 public:
  explicit SignSgdCodec(CodecIdentity id) : Codec(std::move(id), kSignTraits) {}

 protected:
  std::size_t max_payload_bytes(std::size_t n) const override { return detail::packed1_bytes(n); }

  // With checksums on, the checksum is folded into the packing, piece by piece
  // (detail::sign_encode_crc and sign_encode_feedback_crc, in all three hooks): a separate
  // pass over the message cost ~4 percent of this one-pass encode.
  std::size_t encode_payload(std::span<const float> in, const StepContext& /*ctx*/,
                             std::span<std::byte> payload, PayloadCrc* payload_crc) const override {
    if (payload_crc != nullptr) {
      *payload_crc = detail::sign_encode_crc(in.data(), in.size(), 0.0f,
                                             detail::SignRule::kGreaterEqual, payload.data());
    } else {
      detail::sign_encode(in.data(), in.size(), 0.0f, detail::SignRule::kGreaterEqual,
                          payload.data());
    }
    return detail::packed1_bytes(in.size());
  }

  void decode_payload_add(std::span<const std::byte> payload, std::span<float> out,
                          float alpha) const override {
    const std::size_t n = out.size();
    expect_payload_bytes(payload, detail::packed1_bytes(n), "signsgd decode", n);
    detail::validate_packed1(payload.data(), n, "signsgd decode");
    detail::unpack1_add(payload.data(), n, sign_lut(alpha, 1.0f), out.data());
  }

  std::size_t encode_payload_feedback(std::span<float> p, const StepContext& /*ctx*/,
                                      std::span<std::byte> payload,
                                      PayloadCrc* payload_crc) const override {
    if (payload_crc != nullptr) {
      *payload_crc = detail::sign_encode_feedback_crc(p.data(), p.size(), 0.0f,
                                                      detail::SignRule::kGreaterEqual,
                                                      sign_lut(-1.0f, 1.0f), payload.data());
    } else {
      detail::sign_encode_feedback(p.data(), p.size(), 0.0f, detail::SignRule::kGreaterEqual,
                                   sign_lut(-1.0f, 1.0f), payload.data());
    }
    return detail::packed1_bytes(p.size());
  }

  // One pass over g and e: p formed per L1-sized block, packed, e = p - decode.
  std::size_t encode_payload_with_residual(const ResidualUpdate& update, std::span<float> e,
                                           const StepContext& /*ctx*/, std::span<std::byte> payload,
                                           PayloadCrc* payload_crc) const override {
    const detail::Pending pending = detail::residual_pending(update, e);
    if (payload_crc != nullptr) {
      *payload_crc = detail::sign_encode_feedback_crc(
          e.data(), e.size(), 0.0f, detail::SignRule::kGreaterEqual, sign_lut(-1.0f, 1.0f),
          payload.data(), &pending);
    } else {
      detail::sign_encode_feedback(e.data(), e.size(), 0.0f, detail::SignRule::kGreaterEqual,
                                   sign_lut(-1.0f, 1.0f), payload.data(), &pending);
    }
    return detail::packed1_bytes(e.size());
  }
};

class EfSignCodec final : public Codec {
 public:
  EfSignCodec(CodecIdentity id, std::size_t block)
      : Codec(std::move(id), kEfSignTraits), block_(block) {}

 protected:
  std::size_t max_payload_bytes(std::size_t n) const override {
    return 4 * blocks(n) + detail::packed1_bytes(n);
  }

  std::size_t encode_payload(std::span<const float> in, const StepContext& /*ctx*/,
                             std::span<std::byte> payload,
                             PayloadCrc* /*payload_crc*/) const override {
    const std::size_t n = in.size();
    const std::size_t nb = blocks(n);
    write_scales(in, payload.data());  // validates before any bit is written
    std::byte* bits = payload.data() + 4 * nb;
    for (std::size_t b = 0; b < nb; ++b) {
      const auto [begin, len] = block_range(b, n);
      detail::sign_encode(in.data() + begin, len, 0.0f, detail::SignRule::kGreaterEqual,
                          bits + begin / 8);
    }
    return 4 * nb + detail::packed1_bytes(n);
  }

  void decode_payload_add(std::span<const std::byte> payload, std::span<float> out,
                          float alpha) const override {
    const std::size_t n = out.size();
    const std::size_t nb = blocks(n);
    expect_payload_bytes(payload, 4 * nb + detail::packed1_bytes(n), "efsign decode", n);
    for (std::size_t b = 0; b < nb; ++b) {
      detail::validate_scale(load_le<float>(payload.data() + 4 * b), "efsign decode", "scale");
    }
    const std::byte* bits = payload.data() + 4 * nb;
    detail::validate_packed1(bits, n, "efsign decode");
    for (std::size_t b = 0; b < nb; ++b) {
      const auto [begin, len] = block_range(b, n);
      const float scale = load_le<float>(payload.data() + 4 * b);
      detail::unpack1_add(bits + begin / 8, len, sign_lut(alpha, scale), out.data() + begin);
    }
  }

  // One extra pass for the scales, then pack and p -= +-scale in one pass.
  std::size_t encode_payload_feedback(std::span<float> p, const StepContext& /*ctx*/,
                                      std::span<std::byte> payload,
                                      PayloadCrc* /*payload_crc*/) const override {
    const std::size_t n = p.size();
    const std::size_t nb = blocks(n);
    write_scales(p, payload.data());
    std::byte* bits = payload.data() + 4 * nb;
    for (std::size_t b = 0; b < nb; ++b) {
      const auto [begin, len] = block_range(b, n);
      const float scale = load_le<float>(payload.data() + 4 * b);
      detail::sign_encode_feedback(p.data() + begin, len, 0.0f, detail::SignRule::kGreaterEqual,
                                   sign_lut(-1.0f, scale), bits + begin / 8);
    }
    return 4 * nb + detail::packed1_bytes(n);
  }

 private:
  struct Range {
    std::size_t begin;
    std::size_t len;
  };

  // Scales: one for the whole tensor (block 0, also for n = 0), else ceil(n/B).
  std::size_t blocks(std::size_t n) const {
    return block_ == 0 || n == 0 ? 1 : (n + block_ - 1) / block_;
  }
  Range block_range(std::size_t b, std::size_t n) const {
    if (block_ == 0) return {0, n};
    const std::size_t begin = b * block_;
    return {begin, std::min(block_, n - begin)};
  }

  // scale_b = ||p_b||_1 / |b| for every block; throws InvalidArgument before anything
  // is written if p is not finite.
  void write_scales(std::span<const float> p, std::byte* out) const {
    const std::size_t n = p.size();
    const std::size_t nb = blocks(n);
    if (n == 0) {
      store_le<float>(out, 0.0f);
      return;
    }
    const double l1 = detail::abs_sum(p.data(), n);
    if (!std::isfinite(l1)) {
      throw InvalidArgument("efsign encode: non-finite input (||p||_1 = " + std::to_string(l1) +
                            ")");
    }
    for (std::size_t b = 0; b < nb; ++b) {
      const auto [begin, len] = block_range(b, n);
      const double block_l1 = nb == 1 ? l1 : detail::abs_sum(p.data() + begin, len);
      // l1 / len <= max|p_i| <= FLT_MAX: the cast cannot overflow.
      store_le<float>(out + 4 * b, static_cast<float>(block_l1 / static_cast<double>(len)));
    }
  }

  std::size_t block_;
};

}  // namespace

void register_signsgd(CodecRegistry& registry) {
  registry.add({.name = "signsgd",
                .wire_id = wire_id(WireId::kSignsgd),
                .summary = "signSGD (majority vote): one sign bit per element, +-1; no memory",
                .traits = kSignTraits,
                .params = {},
                .examples = {},
                .make = [](CodecIdentity id, const Params&) -> std::unique_ptr<Codec> {
                  return std::make_unique<SignSgdCodec>(std::move(id));
                }});
  registry.add({.name = "efsign",
                .wire_id = wire_id(WireId::kEfsign),
                .summary = "EF-signSGD: (||p||_1/n) * sign(p), with error feedback",
                .traits = kEfSignTraits,
                .params = {int_param("block", 0, 0, 1 << 30,
                                     "elements per scale, a multiple of 32 (Zheng et al. 2019); "
                                     "0: one scale per tensor (the paper)")},
                .examples = {"efsign:block=32", "efsign:block=4096"},
                .make = [](CodecIdentity id, const Params& p) -> std::unique_ptr<Codec> {
                  const auto block = static_cast<std::size_t>(p.get_int("block"));
                  if (block % 32 != 0) {
                    throw InvalidArgument("efsign: block=" + std::to_string(block) +
                                          " must be a multiple of 32 (or 0)");
                  }
                  return std::make_unique<EfSignCodec>(std::move(id), block);
                }});
}

}  // namespace gradcomp
