// terngrad: TernGrad (Wen et al., "TernGrad: Ternary Gradients to Reduce Communication
// in Distributed Deep Learning", NeurIPS 2017). docs/algorithms/quantization.md.
//
//   Algorithm: s = max_i |g_i|; b_i ~ Bernoulli(|g_i| / s), drawn as
//     rng.uniform(i) < |g_i| / s with the per-rank counter RNG of (seed, step, rank, bucket);
//     send s and sign(g_i) * b_i. E[s * sign(g_i) * b_i] = g_i: unbiased.
//   Optional gradient clipping (param clip = c > 0, the paper's c = 2.5): first clip g
//     elementwise at c * std(g), so s = min(max|g|, c * std(g)) and clipped values are
//     always sent. Clipping biases the estimate (traits.unbiased is false then).
//
//   Wire payload (after the 20-byte header):
//     offset 0   f32  s (finite, >= +0; s = 0 only with all codes 00)
//     offset 4   4*ceil(n/16) bytes of 2-bit codes in the 2bit layout (first value in the
//                most significant bits of its byte): 11 -> +s, 10 -> -s, 00 -> 0;
//                code 01 and nonzero padding are invalid.
//   A zero gradient encodes as s = 0 and all codes 00.
//
//   Aggregation: not linear (each worker has its own s). Gather, decode each, sum. With a
//   scaler shared by all workers (an allreduce-max first) the ternary digits would become
//   summable: that is a reducer's job.
//
// Encode passes: one for max|g| (plus one for mean/variance when clipping), one to draw
// and pack; all vectorised (reductions.h, bitpack.h). Non-finite inputs are rejected
// (InvalidArgument): s would not be a valid scale.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "codecs.h"
#include "detail/bitpack.h"
#include "detail/reductions.h"
#include "gradcomp/error.h"
#include "gradcomp/rng.h"
#include "gradcomp/wire.h"

namespace gradcomp {

namespace {

constexpr CodecTraits traits_for(double clip) {
  return {.linear = false, .unbiased = clip == 0.0, .needs_memory = false, .stochastic = true};
}

class TernGradCodec final : public Codec {
 public:
  TernGradCodec(CodecIdentity id, double clip)
      : Codec(std::move(id), traits_for(clip)), clip_(clip) {}

 protected:
  std::size_t max_payload_bytes(std::size_t n) const override {
    return 4 + detail::packed2_bytes(n);
  }

  std::size_t encode_payload(std::span<const float> in, const StepContext& ctx,
                             std::span<std::byte> payload,
                             PayloadCrc* /*payload_crc*/) const override {
    const std::size_t n = in.size();
    // One reading pass for max|g| (and, when clipping, the mean and variance with it).
    detail::Moments m;
    if (clip_ > 0.0) {
      m = detail::moments(in.data(), n);
    } else {
      m.abs_max_bits = detail::abs_max_bits(in.data(), n);
    }
    const std::uint32_t max_bits = m.abs_max_bits;
    if (max_bits >= 0x7F800000u) {
      throw InvalidArgument(std::string("terngrad encode: non-finite gradient value (max |g| = ") +
                            (max_bits == 0x7F800000u ? "inf" : "nan") + ")");
    }
    float s = std::bit_cast<float>(max_bits);
    float bound = std::numeric_limits<float>::infinity();
    if (clip_ > 0.0 && n > 0) {
      const double mean = m.sum / static_cast<double>(n);
      const double var = std::max(0.0, m.sum_sq / static_cast<double>(n) - mean * mean);
      const double c = clip_ * std::sqrt(var);
      // Clipping only matters below max|g|; there the float cast cannot overflow.
      if (c < static_cast<double>(s)) {
        bound = static_cast<float>(c);
        s = bound;
      }
    }
    store_le<float>(payload.data(), s);
    std::byte* codes = payload.data() + 4;
    if (s > 0.0f) {
      detail::ternary_encode(in.data(), n, s, bound, CounterRng::for_step(ctx, RngScope::kPerRank),
                             codes);
    } else if (n > 0) {  // all |g_i| (clipped) are 0: nothing to send
      std::memset(codes, 0, detail::packed2_bytes(n));
    }
    return 4 + detail::packed2_bytes(n);
  }

  void decode_payload_add(std::span<const std::byte> payload, std::span<float> out,
                          float alpha) const override {
    const std::size_t n = out.size();
    expect_payload_bytes(payload, 4 + detail::packed2_bytes(n), "terngrad decode", n);
    const float s = load_le<float>(payload.data());
    detail::validate_scale(s, "terngrad decode", "scale s");
    const bool any_sent = detail::validate_packed2(payload.data() + 4, n, "terngrad decode");
    if (s == 0.0f && any_sent) {
      throw CorruptMessage("terngrad decode: scale s = 0 with nonzero codes (n " +
                           std::to_string(n) + ")");
    }
    const detail::Lut2 lut{{alpha * 0.0f, 0.0f, alpha * -s, alpha * s}};
    detail::unpack2_add(payload.data() + 4, n, lut, out.data());
  }

 private:
  double clip_;
};

}  // namespace

void register_terngrad(CodecRegistry& registry) {
  registry.add({.name = "terngrad",
                .wire_id = wire_id(WireId::kTerngrad),
                .summary = "TernGrad: stochastic ternary {-s, 0, +s}, s = max|g|; unbiased",
                .traits = traits_for(0.0),
                .params = {float_param("clip", 0.0, 0.0, 1000.0,
                                       "clip g at clip*std(g) first (the paper: 2.5); 0 = off "
                                       "(unbiased)")},
                .examples = {"terngrad:clip=2.5", "terngrad:clip=1"},
                .make = [](CodecIdentity id, const Params& params) -> std::unique_ptr<Codec> {
                  return std::make_unique<TernGradCodec>(std::move(id), params.get_float("clip"));
                }});
}

}  // namespace gradcomp
