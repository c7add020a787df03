// signsgd and efsign: sign compression.
//
// signsgd — signSGD with majority vote (Bernstein et al., "signSGD: Compressed
//   Optimisation for Non-Convex Problems", ICML 2018; "signSGD with Majority Vote is
//   Communication Efficient and Fault Tolerant", ICLR 2019). SPEC §7.
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
//   Gradient Compression Schemes", ICML 2019). SPEC §7.
//   Algorithm: on p = g + e (the Memory adds e; the learning rate stays outside the codec),
//     delta = (||p||_1 / n) * sign(p), e <- p - delta. sign(0) := +1 as above.
//     ||p||_1 is summed in double with a fixed blocked order (detail::abs_sum), so it
//     does not depend on SIMD width or thread count.
//   Wire payload:
//     offset 0   f32  scale = ||p||_1 / n (finite, >= +0; 0 for n = 0)
//     offset 4   4*ceil(n/32) bytes of sign bits in the 1bit layout: 1 -> +scale, 0 -> -scale.
//   Aggregation: not linear (per-worker scales); gather, decode each, sum.
#include <cmath>
#include <string>

#include "codecs.h"
#include "detail/bitpack.h"
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

  std::size_t encode_payload(std::span<const float> in, const StepContext& /*ctx*/,
                             std::span<std::byte> payload) const override {
    detail::sign_encode(in.data(), in.size(), 0.0f, detail::SignRule::kGreaterEqual,
                        payload.data());
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
                                      std::span<std::byte> payload) const override {
    detail::sign_encode_feedback(p.data(), p.size(), 0.0f, detail::SignRule::kGreaterEqual,
                                 sign_lut(-1.0f, 1.0f), payload.data());
    return detail::packed1_bytes(p.size());
  }
};

class EfSignCodec final : public Codec {
 public:
  explicit EfSignCodec(CodecIdentity id) : Codec(std::move(id), kEfSignTraits) {}

 protected:
  std::size_t max_payload_bytes(std::size_t n) const override {
    return 4 + detail::packed1_bytes(n);
  }

  std::size_t encode_payload(std::span<const float> in, const StepContext& /*ctx*/,
                             std::span<std::byte> payload) const override {
    const float scale = mean_abs(in);
    store_le<float>(payload.data(), scale);
    detail::sign_encode(in.data(), in.size(), 0.0f, detail::SignRule::kGreaterEqual,
                        payload.data() + 4);
    return 4 + detail::packed1_bytes(in.size());
  }

  void decode_payload_add(std::span<const std::byte> payload, std::span<float> out,
                          float alpha) const override {
    const std::size_t n = out.size();
    expect_payload_bytes(payload, 4 + detail::packed1_bytes(n), "efsign decode", n);
    const float scale = load_le<float>(payload.data());
    detail::validate_scale(scale, "efsign decode", "scale");
    detail::validate_packed1(payload.data() + 4, n, "efsign decode");
    detail::unpack1_add(payload.data() + 4, n, sign_lut(alpha, scale), out.data());
  }

  // One extra pass for ||p||_1, then pack and p -= +-scale in one pass.
  std::size_t encode_payload_feedback(std::span<float> p, const StepContext& /*ctx*/,
                                      std::span<std::byte> payload) const override {
    const float scale = mean_abs(p);
    store_le<float>(payload.data(), scale);
    detail::sign_encode_feedback(p.data(), p.size(), 0.0f, detail::SignRule::kGreaterEqual,
                                 sign_lut(-1.0f, scale), payload.data() + 4);
    return 4 + detail::packed1_bytes(p.size());
  }

 private:
  // ||p||_1 / n; throws InvalidArgument before anything is written if p is not finite.
  static float mean_abs(std::span<const float> p) {
    if (p.empty()) return 0.0f;
    const double l1 = detail::abs_sum(p.data(), p.size());
    if (!std::isfinite(l1)) {
      throw InvalidArgument("efsign encode: non-finite input (||p||_1 = " + std::to_string(l1) +
                            ")");
    }
    // l1 / n <= max|p_i| <= FLT_MAX: the cast cannot overflow.
    return static_cast<float>(l1 / static_cast<double>(p.size()));
  }
};

}  // namespace

void register_signsgd(CodecRegistry& registry) {
  registry.add({.name = "signsgd",
                .wire_id = 11,
                .summary = "signSGD (majority vote): one sign bit per element, +-1; no memory",
                .traits = kSignTraits,
                .params = {},
                .examples = {},
                .make = [](CodecIdentity id, const Params&) -> std::unique_ptr<Codec> {
                  return std::make_unique<SignSgdCodec>(std::move(id));
                }});
  registry.add({.name = "efsign",
                .wire_id = 12,
                .summary = "EF-signSGD: (||p||_1/n) * sign(p), with error feedback",
                .traits = kEfSignTraits,
                .params = {},
                .examples = {},
                .make = [](CodecIdentity id, const Params&) -> std::unique_ptr<Codec> {
                  return std::make_unique<EfSignCodec>(std::move(id));
                }});
}

}  // namespace gradcomp
