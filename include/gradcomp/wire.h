// The wire format shared by every codec. A message is a fixed 24-byte header
// followed by the codec's payload. All fields are little-endian.
//
//   offset size field
//        0    4 magic          "GCMP" (0x47 0x43 0x4D 0x50)
//        4    1 version        kWireVersion
//        5    1 flags          must be 0 (reserved)
//        6    2 codec_id       which codec wrote it (CodecInfo::wire_id; WireId below)
//        8    4 config_tag     hash of the codec's canonical spec: a message encoded
//                              with other parameters (levels, threshold...) is rejected
//       12    4 elements       n, the length of the encoded gradient
//       16    4 payload_bytes  bytes that follow the header; equals the message size - 24
//       20    4 crc32c         CRC-32C (crc32c.h) of bytes [0, 20) followed by the payload
//                              [24, 24 + payload_bytes): any corruption in transit or
//                              storage is rejected before a field is trusted
//
// The config tag goes beyond the minimum (magic, version, id, n, length): two ranks
// built from different spec strings would otherwise decode each other's messages
// into silent garbage. Payloads start 4-byte aligned relative to the message start.
//
// Nothing in a message is trusted until validated: read_header() checks the framing
// and the checksum, open_payload() checks them and the header against the codec and the
// destination, and each codec then checks its payload's length and contents before
// writing anything. (Version 1 had no checksum and a 20-byte header.)
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>

namespace gradcomp {

static_assert(std::endian::native == std::endian::little,
              "gradcomp's wire format and kernels assume a little-endian host");

inline constexpr std::uint32_t kWireMagic = 0x504D4347;  // bytes "GCMP"
inline constexpr std::uint8_t kWireVersion = 2;
inline constexpr std::size_t kHeaderBytes = 24;

// The built-in codecs' codec_id. Fixed for good: a message names the codec that wrote it,
// and a decoder refuses any other, so an id is never reused or renumbered. This is the one
// list (each codec's registration names its entry); a new codec appends the next number.
enum class WireId : std::uint16_t {
  kNone = 1,
  kFp16 = 2,
  kTopk = 3,
  kRandomk = 4,
  kThreshold = 5,
  kMask = 6,
  k2bit = 7,
  k1bit = 8,
  kQsgd = 9,
  kTerngrad = 10,
  kSignsgd = 11,
  kEfsign = 12,
  kSketch = 13,
  kAtomo = 14,
  kChunkTopk = 15,
  kInt = 16,
};
inline constexpr WireId kBuiltinWireIds[] = {
    WireId::kNone,      WireId::kFp16,     WireId::kTopk,      WireId::kRandomk,
    WireId::kThreshold, WireId::kMask,     WireId::k2bit,      WireId::k1bit,
    WireId::kQsgd,      WireId::kTerngrad, WireId::kSignsgd,   WireId::kEfsign,
    WireId::kSketch,    WireId::kAtomo,    WireId::kChunkTopk, WireId::kInt};
constexpr std::uint16_t wire_id(WireId id) { return static_cast<std::uint16_t>(id); }
// The ids run 1, 2, ... with no gap or repeat: two codecs cannot share one, and the next
// codec's id is plain.
consteval bool builtin_wire_ids_are_dense() {
  std::uint16_t expected = 1;
  for (const WireId id : kBuiltinWireIds) {
    if (wire_id(id) != expected++) return false;
  }
  return true;
}
static_assert(builtin_wire_ids_are_dense(), "WireId: every built-in id once, numbered 1..N");

// Where the checksum sits in the header.
inline constexpr std::size_t kCrcOffset = 20;
// Element counts and payload lengths are uint32 on the wire.
inline constexpr std::size_t kMaxElements = 0xFFFFFFFFu;

struct WireHeader {
  std::uint16_t codec_id = 0;
  std::uint32_t config_tag = 0;
  std::uint32_t elements = 0;
  std::uint32_t payload_bytes = 0;
  std::uint32_t crc32c = 0;
};

class Codec;

// Little-endian loads and stores at any alignment.
template <class T>
inline T load_le(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <class T>
inline void store_le(std::byte* p, T v) {
  std::memcpy(p, &v, sizeof v);
}

// Writes the header for the payload already in out[24, 24 + payload_bytes) into
// out[0, 24), checksum included: write the payload first.
void write_header(std::span<std::byte> out, std::uint16_t codec_id, std::uint32_t config_tag,
                  std::size_t elements, std::size_t payload_bytes);

// The same, for a payload whose CRC-32C (from 0) the caller computed while writing it:
// only the header is checksummed here, then combined with it (crc32c_combine).
void write_header_payload_crc(std::span<std::byte> out, std::uint16_t codec_id,
                              std::uint32_t config_tag, std::size_t elements,
                              std::size_t payload_bytes, std::uint32_t payload_crc);

// The checksum a message of msg.size() >= kHeaderBytes bytes should carry.
std::uint32_t message_crc(std::span<const std::byte> msg);

// Recomputes the checksum of a message changed in place on purpose (the allreduce
// reducer's summed region; tests that build hostile payloads behind a valid checksum).
void reseal_message(std::span<std::byte> msg);

// Validates framing and integrity: size >= header, magic, version, payload_bytes equal
// to what follows, the checksum, reserved flags. Throws CorruptMessage naming `op`.
WireHeader read_header(std::span<const std::byte> msg, std::string_view op);

// Validates the header against `codec` and a destination of n elements; returns the
// payload. Throws CorruptMessage (wrong codec, other parameters, wrong n, framing).
std::span<const std::byte> open_payload(std::span<const std::byte> msg, const Codec& codec,
                                        std::size_t n);

// Checks that a payload has exactly `expected` bytes; throws CorruptMessage otherwise.
void expect_payload_bytes(std::span<const std::byte> payload, std::size_t expected,
                          std::string_view op, std::size_t n);

// 32-bit FNV-1a, used for config tags (stable across builds and platforms).
constexpr std::uint32_t fnv1a32(std::string_view s) {
  std::uint32_t h = 0x811C9DC5u;
  for (char c : s) {
    h ^= static_cast<std::uint8_t>(c);
    h *= 0x01000193u;
  }
  return h;
}

}  // namespace gradcomp
