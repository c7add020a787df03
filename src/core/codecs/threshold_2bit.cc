// 2bit: threshold 2-bit quantization with a residual — MXNet's "2bit" gradient
// compression (after Strom, "Scalable distributed DNN training using commodity GPU cloud
// computing", Interspeech 2015). docs/algorithms/quantization.md, seed 000.
//
//   Algorithm (threshold tau > 0, default 0.5), on p = g + residual:
//     p >= tau: code 11 (decodes to +tau);  p <= -tau: code 10 (-tau);  else 00 (0).
//     Error feedback keeps p - decode in the residual: p -= tau, p += tau or nothing,
//     exactly MXNet's quantize_2bit loop. The codec is stateless; the residual lives in
//     the Memory (needs_memory: "2bit" alone means ef(2bit)).
//
//   Wire payload (after the 20-byte header): 4*ceil(n/16) bytes of 2-bit codes, four per
//   byte with the first value in the most significant bits (masks 0xC0, 0x30, 0x0C, 0x03):
//   value i is bits 7-2(i%4) .. 6-2(i%4) of payload byte i/4. Codes after n are 00; code 01
//   is invalid. Both are rejected on decode. Tau itself is not sent: it is part of the
//   spec, which the header's config tag pins.
//
//   Aggregation: not linear (codes cannot be summed). Gather, decode each, sum (MXNet's
//   server decodes worker messages and replies dense).
//
// NaN inputs encode as 00 (neither comparison holds) and stay in the residual, as in MXNet.
#include <limits>
#include <string>

#include "codecs.h"
#include "detail/bitpack.h"
#include "gradcomp/wire.h"

namespace gradcomp {

namespace {

constexpr CodecTraits kTraits{.linear = false, .unbiased = false, .needs_memory = true};

class Threshold2BitCodec final : public Codec {
 public:
  Threshold2BitCodec(CodecIdentity id, float tau) : Codec(std::move(id), kTraits), tau_(tau) {}

 protected:
  std::size_t max_payload_bytes(std::size_t n) const override { return detail::packed2_bytes(n); }

  std::size_t encode_payload(std::span<const float> in, const StepContext& /*ctx*/,
                             std::span<std::byte> payload) const override {
    detail::threshold2_encode(in.data(), in.size(), tau_, payload.data());
    return detail::packed2_bytes(in.size());
  }

  void decode_payload_add(std::span<const std::byte> payload, std::span<float> out,
                          float alpha) const override {
    const std::size_t n = out.size();
    expect_payload_bytes(payload, detail::packed2_bytes(n), "2bit decode", n);
    detail::validate_packed2(payload.data(), n, "2bit decode");
    detail::unpack2_add(payload.data(), n, lut(alpha), out.data());
  }

  // One pass: pack and p += (-1) * decode, i.e. p -= tau for 11, p += tau for 10.
  std::size_t encode_payload_feedback(std::span<float> p, const StepContext& /*ctx*/,
                                      std::span<std::byte> payload) const override {
    detail::threshold2_encode_feedback(p.data(), p.size(), tau_, lut(-1.0f), payload.data());
    return detail::packed2_bytes(p.size());
  }

 private:
  // alpha * decoded value per code (00, 01 unused, 10, 11).
  detail::Lut2 lut(float alpha) const {
    return {{alpha * 0.0f, 0.0f, alpha * -tau_, alpha * tau_}};
  }

  float tau_;
};

}  // namespace

void register_threshold_2bit(CodecRegistry& registry) {
  registry.add(
      {.name = "2bit",
       .wire_id = 7,
       .summary = "MXNet threshold 2-bit quantization: +-threshold or 0, 16x, with residual",
       .traits = kTraits,
       .params = {float_param("threshold", 0.5, 1e-30, 1e30,
                              "tau: send +tau where p >= tau, -tau where p <= -tau")},
       .examples = {"2bit:threshold=1", "2bit:threshold=0.25", "2bit:threshold=0.001"},
       .make = [](CodecIdentity id, const Params& params) -> std::unique_ptr<Codec> {
         return std::make_unique<Threshold2BitCodec>(
             std::move(id), static_cast<float>(params.get_float("threshold")));
       }});
}

}  // namespace gradcomp
