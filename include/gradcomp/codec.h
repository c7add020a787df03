// A Codec turns one float gradient (a bucket) into one self-describing byte message
// and back. Codecs are stateless and const: everything a step depends on arrives in
// the StepContext, state lives in a Memory (memory.h). Encode writes into the caller's
// buffer; nothing allocates per call in steady state.
//
// The public entry points are non-virtual: they own the header and the size checks,
// and call the codec's payload hooks (the "non-virtual interface" idiom), so no codec
// writes or trusts a header itself.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "gradcomp/step_context.h"

namespace gradcomp {

struct CodecTraits {
  bool linear = false;        // messages may be summed while compressed (allreduce)
  bool unbiased = false;      // E[decode(encode(x))] = x over the RNG
  bool needs_memory = false;  // biased: run under error feedback unless told otherwise
  bool stochastic = false;    // draws from the counter RNG
};

// Element type of a linear codec's summable region.
enum class WireDType : std::uint8_t { kFloat32, kFloat16, kBFloat16 };

// The part of a linear codec's message that ranks sum elementwise (e.g. random-k's
// values). Everything outside it is identical on every rank for the same step.
struct LinearRegion {
  std::size_t offset = 0;  // bytes from the start of the message
  std::size_t count = 0;   // elements
  WireDType dtype = WireDType::kFloat32;
};

// What the registry hands a codec's constructor: its name, wire id and canonical spec.
struct CodecIdentity {
  std::string name;
  std::uint16_t wire_id = 0;
  std::string spec;  // canonical: "name:key=value,..." with every parameter spelled out
};

class Codec {
 public:
  Codec(CodecIdentity identity, CodecTraits traits);
  virtual ~Codec() = default;
  Codec(const Codec&) = delete;
  Codec& operator=(const Codec&) = delete;

  const std::string& name() const { return identity_.name; }
  std::uint16_t wire_id() const { return identity_.wire_id; }
  const std::string& spec() const { return identity_.spec; }
  std::uint32_t config_tag() const { return config_tag_; }
  const CodecTraits& traits() const { return traits_; }

  // Exact upper bound of encode() for n elements, header included.
  std::size_t max_encoded_bytes(std::size_t n) const;

  // Encodes `in` into `out`, which must hold max_encoded_bytes(in.size()) bytes.
  // Returns the message size. Throws InvalidArgument if out is too small or n > 2^32-1.
  std::size_t encode(std::span<const float> in, const StepContext& ctx,
                     std::span<std::byte> out) const;

  // out += alpha * decode(msg). The message must have been encoded by a codec with the
  // same spec, for out.size() elements. Everything is validated before out is touched:
  // on CorruptMessage, out is unchanged.
  void decode_add(std::span<const std::byte> msg, std::span<float> out, float alpha = 1.0f) const;

  // One error-feedback step, fused where a codec can: on entry p = g + e; writes the
  // message of p into out; on exit p = p - decode(msg). Equals encode() followed by
  // decode_add(msg, p, -1) bit for bit (tests hold every codec to that).
  std::size_t encode_feedback(std::span<float> p, const StepContext& ctx,
                              std::span<std::byte> out) const;

  // Linear codecs only: which bytes of an n-element message ranks may sum.
  virtual LinearRegion linear_region(std::size_t n) const;

 protected:
  // Exact upper bound of the payload (after the header) for n elements.
  virtual std::size_t max_payload_bytes(std::size_t n) const = 0;

  // Writes the payload for `in` (payload.size() >= max_payload_bytes); returns its size.
  virtual std::size_t encode_payload(std::span<const float> in, const StepContext& ctx,
                                     std::span<std::byte> payload) const = 0;

  // out += alpha * decode(payload). The header has been checked (codec, spec, n ==
  // out.size()); the payload's length and contents have not: validate them all before
  // writing to out, and throw CorruptMessage naming the codec.
  virtual void decode_payload_add(std::span<const std::byte> payload, std::span<float> out,
                                  float alpha) const = 0;

  // Fused error-feedback hook; the default is encode_payload then decode_payload_add(-1).
  virtual std::size_t encode_payload_feedback(std::span<float> p, const StepContext& ctx,
                                              std::span<std::byte> payload) const;

  // Optional fusion of the checksum into the payload pass, for codecs whose encode is
  // itself one pass over an output as large as their input (none: a copy, see
  // crc32c_copy): write the payload as encode_payload / encode_payload_feedback do,
  // store its CRC-32C (crc32c.h, from 0) in *payload_crc, computed in the same pass,
  // and return its size; encode() then checksums only the header and combines
  // the two. Returning kNoPayloadCrc instead (the default: encode_payload and a
  // separate checksum pass) is always correct.
  static constexpr std::size_t kNoPayloadCrc = static_cast<std::size_t>(-1);
  virtual std::size_t encode_payload_crc(std::span<const float> in, const StepContext& ctx,
                                         std::span<std::byte> payload,
                                         std::uint32_t* payload_crc) const;
  virtual std::size_t encode_payload_feedback_crc(std::span<float> p, const StepContext& ctx,
                                                  std::span<std::byte> payload,
                                                  std::uint32_t* payload_crc) const;

 private:
  CodecIdentity identity_;
  CodecTraits traits_;
  std::uint32_t config_tag_;
};

}  // namespace gradcomp
