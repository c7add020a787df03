// none: the uncompressed fp32 baseline.
//   encode: copy the n floats; decode_add: out += alpha * x.
//   Wire payload: n little-endian float32 (4n bytes).
//   Linear: ranks may sum payloads with an fp32 allreduce.
#include <cstring>

#include "codecs.h"
#include "gradcomp/crc32c.h"
#include "gradcomp/wire.h"

namespace gradcomp {

namespace {

class NoneCodec final : public Codec {
 public:
  explicit NoneCodec(CodecIdentity id)
      : Codec(std::move(id), CodecTraits{.linear = true, .unbiased = true}) {}

  LinearRegion linear_region(std::size_t n) const override {
    return {kHeaderBytes, n, WireDType::kFloat32};
  }

 protected:
  std::size_t max_payload_bytes(std::size_t n) const override { return 4 * n; }

  // With checksums on, the copy and its checksum in one pass (crc32c_copy).
  std::size_t encode_payload(std::span<const float> in, const StepContext& /*ctx*/,
                             std::span<std::byte> payload, PayloadCrc* payload_crc) const override {
    if (payload_crc != nullptr) {
      *payload_crc = crc32c_copy(payload.data(), std::as_bytes(in));
    } else if (!in.empty()) {
      std::memcpy(payload.data(), in.data(), 4 * in.size());
    }
    return 4 * in.size();
  }

  void decode_payload_add(std::span<const std::byte> payload, std::span<float> out,
                          float alpha) const override {
    expect_payload_bytes(payload, 4 * out.size(), "none decode", out.size());
    const std::byte* src = payload.data();
    float* dst = out.data();
    const std::size_t n = out.size();
    for (std::size_t i = 0; i < n; ++i) dst[i] += alpha * load_le<float>(src + 4 * i);
  }

  // e = p - p = 0: nothing is held back.
  std::size_t encode_payload_feedback(std::span<float> p, const StepContext& ctx,
                                      std::span<std::byte> payload,
                                      PayloadCrc* payload_crc) const override {
    const std::size_t bytes = encode_payload(p, ctx, payload, payload_crc);
    for (float& v : p) v -= v;  // p - decode(p), exactly as the generic form computes it
    return bytes;
  }
};

}  // namespace

void register_none(CodecRegistry& registry) {
  registry.add({.name = "none",
                .wire_id = wire_id(WireId::kNone),
                .summary = "uncompressed fp32 (the dense baseline)",
                .traits = {.linear = true, .unbiased = true},
                .params = {},
                .examples = {},
                .make = [](CodecIdentity id, const Params&) -> std::unique_ptr<Codec> {
                  return std::make_unique<NoneCodec>(std::move(id));
                }});
}

}  // namespace gradcomp
