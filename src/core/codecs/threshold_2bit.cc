// 2bit: threshold 2-bit quantization with a residual — MXNet's "2bit" gradient
// compression (after Strom, "Scalable distributed DNN training using commodity GPU cloud
// computing", Interspeech 2015). docs/algorithms/quantization.md, seed 000.
//
//   Algorithm (threshold tau > 0), on p = g + residual:
//     p >= tau: code 11 (decodes to +tau);  p <= -tau: code 10 (-tau);  else 00 (0).
//     Error feedback keeps p - decode in the residual: p -= tau, p += tau or nothing,
//     exactly MXNet's quantize_2bit loop. The codec is stateless; the residual lives in
//     the Memory (needs_memory: "2bit" alone means ef(2bit)).
//
//   Two ways to choose tau:
//     threshold=T > 0 (fixed): tau = T on every message: exactly MXNet's method
//       (MXNet's default is T = 0.5). tau is part of the spec, pinned by the config tag,
//       and not sent.
//     threshold=0 (adaptive, the default): tau = scale * mean_i |p_i| of this message's
//       p (gradient plus residual), computed in double and rounded to fp32, sent in the
//       message. Below 2^20 values the mean is over all of p (the deterministic abs_sum,
//       reductions.h); from 2^20 on it is over a fixed stratified sample of 65,536 values
//       (detail/abs_sample.h), so that the packing pass needs no pass before it. A fixed tau only
//       works near the gradients' scale, which differs by orders of magnitude between models,
//       layers and steps (0.5 is ~1000x this MLP's gradients: nothing is sent until the residual
//       has accumulated ~1000 steps). With tau = scale * mean |p| an entry is sent once it
//       reaches that multiple of the bucket's average magnitude (scale 2, the default:
//       about 11% of the entries of a Gaussian p; scale 1: 42%); entries below it
//       accumulate in the residual as with a fixed tau. Each message carries its own tau,
//       so decoders need no state.
//       scale 2 is the measured best (default job, 3 seeds, under efm: scale 1 -0.78
//       points from dense, 2 -0.49, 3 -0.56; docs/measurements/accuracy.md).
//
//   Wire payload (after the header):
//     fixed:    4*ceil(n/16) bytes of 2-bit codes, four per byte with the first value in
//               the most significant bits (masks 0xC0, 0x30, 0x0C, 0x03): value i is bits
//               7-2(i%4) .. 6-2(i%4) of payload byte i/4.
//     adaptive: offset 0 f32 tau (finite, >= +0; tau = 0 only with all codes 00, the
//               message of an all-zero p), then the codes as above: terngrad's layout.
//   Codes after n are 00; code 01 is invalid. Both are rejected on decode.
//
//   Aggregation: not linear (codes cannot be summed, and adaptive taus differ by rank).
//   Gather, decode each, sum (MXNet's server decodes worker messages and replies dense).
//
// NaN inputs encode as 00 (neither comparison holds) and stay in the residual, as in
// MXNet (fixed tau); with an adaptive tau a non-finite input is rejected (InvalidArgument):
// tau would not be a valid scale.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "codecs.h"
#include "detail/abs_sample.h"
#include "detail/bitpack.h"
#include "detail/pending.h"
#include "detail/reductions.h"
#include "gradcomp/error.h"
#include "gradcomp/wire.h"

namespace gradcomp {

namespace {

constexpr CodecTraits kTraits{.linear = false, .unbiased = false, .needs_memory = true};

class Threshold2BitCodec final : public Codec {
 public:
  // tau > 0: fixed (MXNet); tau == 0: adaptive, tau = scale * mean |p| per message.
  Threshold2BitCodec(CodecIdentity id, float tau, double scale)
      : Codec(std::move(id), kTraits), tau_(tau), scale_(scale) {}

 protected:
  std::size_t max_payload_bytes(std::size_t n) const override {
    return header_bytes() + detail::packed2_bytes(n);
  }

  std::size_t encode_payload(std::span<const float> in, const StepContext& /*ctx*/,
                             std::span<std::byte> payload,
                             PayloadCrc* /*payload_crc*/) const override {
    const float tau = message_tau(in, payload);
    require_finite(detail::threshold2_encode(in.data(), in.size(), encode_tau(tau),
                                             payload.data() + header_bytes(),
                                             finite_check(in.size())));
    return header_bytes() + detail::packed2_bytes(in.size());
  }

  void decode_payload_add(std::span<const std::byte> payload, std::span<float> out,
                          float alpha) const override {
    const std::size_t n = out.size();
    expect_payload_bytes(payload, header_bytes() + detail::packed2_bytes(n), "2bit decode", n);
    float tau = tau_;
    if (adaptive()) {
      tau = load_le<float>(payload.data());
      detail::validate_scale(tau, "2bit decode", "threshold tau");
    }
    const bool any_sent =
        detail::validate_packed2(payload.data() + header_bytes(), n, "2bit decode");
    if (tau == 0.0f && any_sent) {
      throw CorruptMessage("2bit decode: threshold tau = 0 with nonzero codes (n " +
                           std::to_string(n) + ")");
    }
    detail::unpack2_add(payload.data() + header_bytes(), n, lut(tau, alpha), out.data());
  }

  // One pass: pack and p += (-1) * decode, i.e. p -= tau for 11, p += tau for 10.
  std::size_t encode_payload_feedback(std::span<float> p, const StepContext& /*ctx*/,
                                      std::span<std::byte> payload,
                                      PayloadCrc* /*payload_crc*/) const override {
    const float tau = message_tau(p, payload);
    require_finite(detail::threshold2_encode_feedback(
        p.data(), p.size(), encode_tau(tau), lut(tau, -1.0f), payload.data() + header_bytes(),
        nullptr, finite_check(p.size())));
    return header_bytes() + detail::packed2_bytes(p.size());
  }

  // ef(2bit) / efm(2bit) in as few passes as tau allows:
  //   fixed tau: ONE pass over g and e: form p = g + e per L1-sized block, pack it and
  //     write e = p - decode(msg), while the block is in L1 (reads g and e, writes e and
  //     the codes: the minimum).
  //   adaptive tau = scale * mean |p|, large messages (>= detail::kAbsSampleMinN values):
  //     the mean of a fixed sample of p (peeked from g and e, ~1/400 of them at 25 M),
  //     then the same single pass, which also checks that p is finite.
  //   adaptive tau, smaller messages: every |p| is needed before the first code, so two
  //     passes: the first forms p in e and sums |p| (the blocked sum of abs_sum, the same
  //     double), the second packs and updates e (reads e only); both stay in cache.
  std::size_t encode_payload_with_residual(const ResidualUpdate& update, std::span<float> e,
                                           const StepContext& /*ctx*/, std::span<std::byte> payload,
                                           PayloadCrc* /*payload_crc*/) const override {
    const detail::Pending pending = detail::residual_pending(update, e);
    if (!adaptive()) {
      detail::threshold2_encode_feedback(e.data(), e.size(), encode_tau(tau_), lut(tau_, -1.0f),
                                         payload.data(), &pending);
      return detail::packed2_bytes(e.size());
    }
    const float tau = message_tau(e, payload, &pending);
    // Only the sampled tau leaves p pending: the exact sum has formed it already.
    const bool sampled = sampled_tau(e.size());
    require_finite(detail::threshold2_encode_feedback(
        e.data(), e.size(), encode_tau(tau), lut(tau, -1.0f), payload.data() + header_bytes(),
        sampled ? &pending : nullptr, finite_check(e.size())));
    return header_bytes() + detail::packed2_bytes(e.size());
  }

 private:
  bool adaptive() const { return tau_ == 0.0f; }
  std::size_t header_bytes() const { return adaptive() ? 4 : 0; }

  // Whether tau is the mean of a sample of p (a large message under the adaptive tau).
  bool sampled_tau(std::size_t n) const { return adaptive() && n >= detail::kAbsSampleMinN; }
  // The sampled tau has not seen most of p: the packing pass checks it is finite.
  detail::FiniteCheck finite_check(std::size_t n) const {
    return sampled_tau(n) ? detail::FiniteCheck::kYes : detail::FiniteCheck::kNo;
  }
  [[noreturn]] static void throw_non_finite() {
    throw InvalidArgument(
        "2bit encode: non-finite input (inf or NaN); the adaptive threshold needs a finite "
        "gradient");
  }
  static void require_finite(bool finite) {
    if (!finite) throw_non_finite();
  }

  // This message's tau: the fixed one, or scale * mean |p| (written to the payload), the
  // mean over all of p below detail::kAbsSampleMinN values, over the stratified sample of
  // detail/abs_sample.h above. With a pending, the exact sum forms p inside its pass (all
  // of it, even when this throws); the sample only peeks (p is formed, all of it, before
  // a non-finite sample throws).
  float message_tau(std::span<const float> p, std::span<std::byte> payload,
                    const detail::Pending* pending = nullptr) const {
    if (!adaptive()) return tau_;
    float tau = 0.0f;
    if (!p.empty()) {
      const bool sampled = sampled_tau(p.size());
      const double sum = sampled ? detail::sampled_abs_sum(p.data(), p.size(), pending)
                                 : detail::abs_sum(p.data(), p.size(), pending);
      if (!std::isfinite(sum)) {
        if (sampled) detail::fill_all(pending, p.size());
        throw_non_finite();
      }
      const double count =
          sampled ? static_cast<double>(detail::kAbsSampleCount) : static_cast<double>(p.size());
      tau = static_cast<float>(scale_ * sum / count);
      // A product beyond fp32's range, or one rounded to a denormal zero, sends nothing.
      if (!std::isfinite(tau)) tau = std::numeric_limits<float>::max();
    }
    store_le<float>(payload.data(), tau);
    return tau;
  }

  // The kernels' threshold: tau = 0 (all-zero p) sends nothing, so compare with +inf.
  static float encode_tau(float tau) {
    return tau > 0.0f ? tau : std::numeric_limits<float>::infinity();
  }

  // alpha * decoded value per code (00, 01 unused, 10, 11).
  static detail::Lut2 lut(float tau, float alpha) {
    return {{alpha * 0.0f, 0.0f, alpha * -tau, alpha * tau}};
  }

  float tau_;
  double scale_;
};

}  // namespace

void register_threshold_2bit(CodecRegistry& registry) {
  registry.add(
      {.name = "2bit",
       .wire_id = wire_id(WireId::k2bit),
       .summary = "threshold 2-bit quantization: +-tau or 0, 16x, with residual; tau = "
                  "scale * mean|p| per message (default) or fixed (threshold=T: MXNet's 2bit)",
       .traits = kTraits,
       .params = {float_param("threshold", 0.0, 0.0, 1e30,
                              "fixed tau: send +tau where p >= tau, -tau where p <= -tau, "
                              "exactly MXNet's 2bit (MXNet's default: 0.5); 0 = adaptive: tau = "
                              "scale * mean |p| of each message (of a fixed sample from 2^20 "
                              "values), sent in it"),
                  float_param("scale", 2.0, 0.0, 1e6,
                              "adaptive (threshold=0): tau = scale * mean |p|; ignored with a "
                              "fixed threshold",
                              true)},
       .examples = {"2bit:scale=1", "2bit:threshold=0.5", "2bit:threshold=0.001"},
       .make = [](CodecIdentity id, const Params& params) -> std::unique_ptr<Codec> {
         // A fixed threshold below fp32's range stays fixed (the smallest denormal).
         const double t = params.get_float("threshold");
         const float tau =
             t > 0.0 ? std::max(static_cast<float>(t), std::numeric_limits<float>::denorm_min())
                     : 0.0f;
         return std::make_unique<Threshold2BitCodec>(std::move(id), tau, params.get_float("scale"));
       },
       // MXNet's fixed threshold far above the gradients sends next to nothing: warned once.
       .fixed_threshold = [](const Params& params) { return params.get_float("threshold"); }});
}

}  // namespace gradcomp
