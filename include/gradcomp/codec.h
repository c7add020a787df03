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
#include <optional>
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

// One step's addition to an error-feedback residual e, for Codec::encode_with_residual:
//   error feedback (ef):           p = e + g
//   momentum correction (efm):     u <- m*u + g ;  p = e + u
//                       Nesterov:  u <- m*(u + g) ;  p = e + u + g
// A fused codec forms p range by range, inside the pass that reads it (apply), or looks at
// p without forming it (peek: what apply would write, bit for bit). The spans must outlive
// the call that uses the update; u is written by apply.
class ResidualUpdate {
 public:
  explicit ResidualUpdate(std::span<const float> g) : g_(g) {}
  ResidualUpdate(std::span<const float> g, std::span<float> u, float m, bool nesterov)
      : g_(g), u_(u), m_(m), momentum_(true), nesterov_(nesterov) {}

  std::size_t size() const { return g_.size(); }

  // e[begin, end) <- p[begin, end), u updated there. Calls on disjoint ranges may run on
  // different threads; each element must be applied exactly once.
  void apply(float* e, std::size_t begin, std::size_t end) const;
  // dst[0, end - begin) <- p[begin, end), changing nothing (e and u not yet applied there).
  void peek(const float* e, std::size_t begin, std::size_t end, float* dst) const;

 private:
  std::span<const float> g_;
  std::span<float> u_;
  float m_ = 0.0f;
  bool momentum_ = false;
  bool nesterov_ = false;
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

  // The size to plan with for an n-element bucket at this step (header included): what
  // a reducer weighs against the dense allreduce (Memory::step_planned_encoded_bytes).
  // max_encoded_bytes(n) for codecs whose size is fixed by n; a codec whose size depends
  // on random draws says what it expects instead, since its worst case can be far
  // larger than any message it sends (ATOMO keeps `budget` atoms on average, but may in
  // principle keep them all: planning with that bound sent ATOMO dense every step).
  std::size_t planned_encoded_bytes(std::size_t n, const StepContext& ctx) const;

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

  // The whole error-feedback step on the residual e: forms p = e + (what `update` adds;
  // u too for momentum correction), writes the message of p into out and leaves
  // e = p - decode(msg). Equals update.apply over all of e followed by encode_feedback(e)
  // bit for bit, messages, residual and exceptions' state alike (tests hold every codec to
  // that); codecs that override encode_payload_with_residual do it in fewer passes over
  // memory: one pass over g and e for 1bit, signsgd, 2bit with a fixed threshold and top-k's
  // sampled selection; two for 2bit's adaptive threshold and exact top-k (one fewer than
  // before; docs/algorithms/error-feedback.md).
  // update.size() must equal e.size().
  std::size_t encode_with_residual(const ResidualUpdate& update, std::span<float> e,
                                   const StepContext& ctx, std::span<std::byte> out) const;

  // Linear codecs only: which bytes of an n-element message ranks may sum.
  virtual LinearRegion linear_region(std::size_t n) const;

 protected:
  // Exact upper bound of the payload (after the header) for n elements.
  virtual std::size_t max_payload_bytes(std::size_t n) const = 0;

  // The payload size to plan with (planned_encoded_bytes); at most max_payload_bytes(n).
  virtual std::size_t planned_payload_bytes(std::size_t n, const StepContext& /*ctx*/) const {
    return max_payload_bytes(n);
  }

  // A checksum fused into the payload pass. Every message's header ends with the CRC-32C
  // of the header and payload (wire.h); for codecs whose encode is itself one cheap pass
  // (none: a copy, see crc32c_copy; signsgd and 1bit: the message checksummed piece by
  // piece as it is written), a separate pass over the message afterwards would show. So
  // each encode hook below takes `payload_crc`: null while checksums are off
  // (detail::ScopedChecksumOff: compute none); otherwise empty on entry, and a hook that
  // computes the CRC-32C (crc32c.h, from 0) of exactly the payload bytes it returns, in
  // the pass that writes them, may store it there; the entry point then checksums only
  // the header and combines the two. Leaving it empty (every codec that does not fuse
  // ignores the argument) is always correct: the entry point checksums the payload
  // itself. One parameter rather than a "_crc" twin of each hook, so that a codec writes
  // each encode once and codec.cc frames all three entry points alike.
  using PayloadCrc = std::optional<std::uint32_t>;

  // Writes the payload for `in` (payload.size() >= max_payload_bytes); returns its size.
  virtual std::size_t encode_payload(std::span<const float> in, const StepContext& ctx,
                                     std::span<std::byte> payload,
                                     PayloadCrc* payload_crc) const = 0;

  // out += alpha * decode(payload). The header has been checked (codec, spec, n ==
  // out.size()); the payload's length and contents have not: validate them all before
  // writing to out, and throw CorruptMessage naming the codec.
  virtual void decode_payload_add(std::span<const std::byte> payload, std::span<float> out,
                                  float alpha) const = 0;

  // Fused error-feedback hook; the default is encode_payload then decode_payload_add(-1),
  // passing payload_crc on (decoding leaves the payload as encode_payload wrote it).
  virtual std::size_t encode_payload_feedback(std::span<float> p, const StepContext& ctx,
                                              std::span<std::byte> payload,
                                              PayloadCrc* payload_crc) const;

  // Fused residual hook (encode_with_residual): e holds the residual, update says what this
  // step adds. The default applies update to all of e, then encode_payload_feedback(e): a
  // codec overrides it when it can form p inside its own pass. Whatever it does, on return
  // (normal or by exception) every element of e must have been applied exactly once.
  virtual std::size_t encode_payload_with_residual(const ResidualUpdate& update, std::span<float> e,
                                                   const StepContext& ctx,
                                                   std::span<std::byte> payload,
                                                   PayloadCrc* payload_crc) const;

 private:
  CodecIdentity identity_;
  CodecTraits traits_;
  std::uint32_t config_tag_;
};

}  // namespace gradcomp
