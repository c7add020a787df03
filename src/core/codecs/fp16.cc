// fp16: cast to a 16-bit float, allreduce, cast back (docs/algorithms/quantization.md; the usual
// "half-precision gradients" baseline, e.g. PyTorch DDP's fp16_compress_hook).
//   encode: x -> fp16 (IEEE binary16) or bf16, round to nearest even; finite values
//   beyond the format's range SATURATE to +-max finite (fp16 65504, bf16 3.39e38): a cast
//   to inf would poison the sum on every rank, while error feedback (if enabled) carries
//   the excess to later steps. inf / NaN inputs are rejected (InvalidArgument).
//   decode_add: out += alpha * float(h).
// Wire payload: n little-endian u16 (2n bytes), finite patterns only (the decoder
//   rejects inf/NaN patterns: the encoder never writes them).
// Linear: ranks may sum the payloads elementwise in the 16-bit format (linear_region);
//   fp16 sums overflow earlier than fp32 ones, which is the reducer's business (scaling).
#include <cstdio>
#include <string>

#include "codecs.h"
#include "gradcomp/error.h"
#include "gradcomp/kernels/half.h"
#include "gradcomp/wire.h"

namespace gradcomp {

namespace {

using kernels::HalfFormat;

class Fp16Codec final : public Codec {
 public:
  Fp16Codec(CodecIdentity id, HalfFormat format)
      : Codec(std::move(id), CodecTraits{.linear = true, .unbiased = false}),
        format_(format),
        op_decode_(name() + " decode") {}

  LinearRegion linear_region(std::size_t n) const override {
    return {kHeaderBytes, n,
            format_ == HalfFormat::kFp16 ? WireDType::kFloat16 : WireDType::kBFloat16};
  }

 protected:
  std::size_t max_payload_bytes(std::size_t n) const override { return 2 * n; }

  std::size_t encode_payload(std::span<const float> in, const StepContext& /*ctx*/,
                             std::span<std::byte> payload,
                             PayloadCrc* /*payload_crc*/) const override {
    const std::size_t bad = kernels::encode_halves(format_, in, payload.data());
    if (bad != in.size()) throw_non_finite(in[bad], bad);
    return 2 * in.size();
  }

  // p <- p - float(half(p)) in the same pass that writes the halves.
  std::size_t encode_payload_feedback(std::span<float> p, const StepContext& /*ctx*/,
                                      std::span<std::byte> payload,
                                      PayloadCrc* /*payload_crc*/) const override {
    const std::size_t bad = kernels::encode_halves_feedback(format_, p, payload.data());
    if (bad != p.size()) throw_non_finite(p[bad], bad);
    return 2 * p.size();
  }

  void decode_payload_add(std::span<const std::byte> payload, std::span<float> out,
                          float alpha) const override {
    const std::size_t n = out.size();
    expect_payload_bytes(payload, 2 * n, op_decode_, n);
    const std::size_t bad = kernels::find_nonfinite_half(format_, payload.data(), n);
    if (bad != n) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%04X", load_le<std::uint16_t>(payload.data() + 2 * bad));
      throw CorruptMessage(op_decode_ + ": non-finite " + fmt_name() + " pattern " + hex +
                           " at index " + std::to_string(bad));
    }
    kernels::decode_add_halves(format_, payload.data(), out, alpha);
  }

 private:
  std::string fmt_name() const { return format_ == HalfFormat::kFp16 ? "fp16" : "bf16"; }

  [[noreturn]] void throw_non_finite(float v, std::size_t i) const {
    throw InvalidArgument(name() + " encode: non-finite value " + std::to_string(v) + " at index " +
                          std::to_string(i));
  }

  HalfFormat format_;
  std::string op_decode_;  // built once: decode allocates nothing
};

}  // namespace

void register_fp16(CodecRegistry& registry) {
  registry.add({.name = "fp16",
                .wire_id = wire_id(WireId::kFp16),
                .summary = "16-bit floats (fp16 or bf16), round to nearest even, saturating",
                .traits = {.linear = true, .unbiased = false},
                .params = {choice_param("format", "fp16", {"fp16", "bf16"},
                                        "fp16: IEEE half (max 65504, 11-bit precision); bf16: "
                                        "fp32's range, 8-bit precision")},
                .examples = {"fp16:format=bf16"},
                .make = [](CodecIdentity id, const Params& p) -> std::unique_ptr<Codec> {
                  return std::make_unique<Fp16Codec>(std::move(id), p.get_choice("format") == "bf16"
                                                                        ? HalfFormat::kBf16
                                                                        : HalfFormat::kFp16);
                }});
}

}  // namespace gradcomp
