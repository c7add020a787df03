// 1bit: MXNet 1.x's 1-bit quantization with a residual (the 1-bit SGD family of Seide et
// al., Interspeech 2014, in MXNet's fixed-step form). docs/algorithms/quantization.md.
//
//   Algorithm (threshold tau, any finite value, default 0), on p = g + residual:
//     p > tau: bit 1, decodes to +1;  else bit 0, decodes to -1.
//     Error feedback keeps p - decode: p -= 1 or p += 1, as MXNet's quantize_1bit loop.
//     The codec is stateless; the residual lives in the Memory (needs_memory).
//
//   Wire payload (after the 20-byte header): 4*ceil(n/32) bytes, eight values per byte,
//   the first value in the most significant bit (value i is bit 7 - i%8 of byte i/8);
//   padding bits after n are 0 and checked on decode. Tau is not sent (the decoded
//   values are +-1 whatever tau is); the config tag pins the spec anyway.
//
//   Aggregation: not linear. Gather, decode each, sum.
//
// NaN inputs encode as bit 0 (-1).
#include <string>

#include "codecs.h"
#include "detail/bitpack.h"
#include "detail/pending.h"
#include "gradcomp/wire.h"

namespace gradcomp {

namespace {

constexpr CodecTraits kTraits{.linear = false, .unbiased = false, .needs_memory = true};

class OneBitCodec final : public Codec {
 public:
  OneBitCodec(CodecIdentity id, float tau) : Codec(std::move(id), kTraits), tau_(tau) {}

 protected:
  std::size_t max_payload_bytes(std::size_t n) const override { return detail::packed1_bytes(n); }

  // With checksums on, the checksum is folded into the packing, piece by piece
  // (detail::sign_encode_crc and sign_encode_feedback_crc, in all three hooks): a separate
  // pass over the message cost ~4 percent of this one-pass encode.
  std::size_t encode_payload(std::span<const float> in, const StepContext& /*ctx*/,
                             std::span<std::byte> payload, PayloadCrc* payload_crc) const override {
    if (payload_crc != nullptr) {
      *payload_crc = detail::sign_encode_crc(in.data(), in.size(), tau_, detail::SignRule::kGreater,
                                             payload.data());
    } else {
      detail::sign_encode(in.data(), in.size(), tau_, detail::SignRule::kGreater, payload.data());
    }
    return detail::packed1_bytes(in.size());
  }

  void decode_payload_add(std::span<const std::byte> payload, std::span<float> out,
                          float alpha) const override {
    const std::size_t n = out.size();
    expect_payload_bytes(payload, detail::packed1_bytes(n), "1bit decode", n);
    detail::validate_packed1(payload.data(), n, "1bit decode");
    detail::unpack1_add(payload.data(), n, lut(alpha), out.data());
  }

  std::size_t encode_payload_feedback(std::span<float> p, const StepContext& /*ctx*/,
                                      std::span<std::byte> payload,
                                      PayloadCrc* payload_crc) const override {
    if (payload_crc != nullptr) {
      *payload_crc = detail::sign_encode_feedback_crc(
          p.data(), p.size(), tau_, detail::SignRule::kGreater, lut(-1.0f), payload.data());
    } else {
      detail::sign_encode_feedback(p.data(), p.size(), tau_, detail::SignRule::kGreater, lut(-1.0f),
                                   payload.data());
    }
    return detail::packed1_bytes(p.size());
  }

  // One pass over g and e: p formed per L1-sized block, packed, e = p - decode.
  std::size_t encode_payload_with_residual(const ResidualUpdate& update, std::span<float> e,
                                           const StepContext& /*ctx*/, std::span<std::byte> payload,
                                           PayloadCrc* payload_crc) const override {
    const detail::Pending pending = detail::residual_pending(update, e);
    if (payload_crc != nullptr) {
      *payload_crc =
          detail::sign_encode_feedback_crc(e.data(), e.size(), tau_, detail::SignRule::kGreater,
                                           lut(-1.0f), payload.data(), &pending);
    } else {
      detail::sign_encode_feedback(e.data(), e.size(), tau_, detail::SignRule::kGreater, lut(-1.0f),
                                   payload.data(), &pending);
    }
    return detail::packed1_bytes(e.size());
  }

 private:
  static detail::Lut1 lut(float alpha) { return {{alpha * -1.0f, alpha * 1.0f}}; }

  float tau_;
};

}  // namespace

void register_onebit(CodecRegistry& registry) {
  registry.add(
      {.name = "1bit",
       .wire_id = wire_id(WireId::k1bit),
       .summary = "MXNet 1-bit quantization: +1 where p > threshold, else -1, with residual",
       .traits = kTraits,
       .params = {float_param("threshold", 0.0, -1e30, 1e30,
                              "tau: bit 1 (+1) where p > tau, else bit 0 (-1)")},
       .examples = {"1bit:threshold=0.1", "1bit:threshold=-0.5"},
       .make = [](CodecIdentity id, const Params& params) -> std::unique_ptr<Codec> {
         return std::make_unique<OneBitCodec>(std::move(id),
                                              static_cast<float>(params.get_float("threshold")));
       }});
}

}  // namespace gradcomp
