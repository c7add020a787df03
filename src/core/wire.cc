#include "gradcomp/wire.h"

#include <cstdio>
#include <string>

#include "detail/checksum_switch.h"
#include "gradcomp/codec.h"
#include "gradcomp/crc32c.h"
#include "gradcomp/error.h"

namespace gradcomp {

namespace {

[[noreturn]] void corrupt(std::string_view op, const std::string& what) {
  throw CorruptMessage(std::string(op) + ": " + what);
}

std::string hex32(std::uint32_t v) {
  char buf[11];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

[[noreturn]] void checksum_mismatch(std::string_view op, std::uint32_t carried,
                                    std::uint32_t computed) {
  corrupt(op, "checksum mismatch (header says CRC32C " + hex32(carried) + ", the message's is " +
                  hex32(computed) + "): corrupted in transit or storage");
}

}  // namespace

namespace {

// Header fields, every check; the checksum field is left to the caller.
void write_header_fields(std::span<std::byte> out, std::uint16_t codec_id, std::uint32_t config_tag,
                         std::size_t elements, std::size_t payload_bytes) {
  if (out.size() < kHeaderBytes) {
    throw InvalidArgument("write_header: buffer of " + std::to_string(out.size()) +
                          " bytes < header " + std::to_string(kHeaderBytes));
  }
  if (elements > kMaxElements || payload_bytes > 0xFFFFFFFFu) {
    throw InvalidArgument("write_header: " + std::to_string(elements) + " elements / " +
                          std::to_string(payload_bytes) + " payload bytes exceed 2^32-1");
  }
  std::byte* p = out.data();
  store_le<std::uint32_t>(p + 0, kWireMagic);
  store_le<std::uint8_t>(p + 4, kWireVersion);
  store_le<std::uint8_t>(p + 5, 0);
  store_le<std::uint16_t>(p + 6, codec_id);
  store_le<std::uint32_t>(p + 8, config_tag);
  store_le<std::uint32_t>(p + 12, static_cast<std::uint32_t>(elements));
  store_le<std::uint32_t>(p + 16, static_cast<std::uint32_t>(payload_bytes));
  if (out.size() - kHeaderBytes < payload_bytes) {
    throw InvalidArgument("write_header: payload of " + std::to_string(payload_bytes) +
                          " bytes > the " + std::to_string(out.size() - kHeaderBytes) +
                          " bytes after the header");
  }
}

thread_local int checksum_off_depth = 0;

}  // namespace

namespace detail {

ScopedChecksumOff::ScopedChecksumOff() { ++checksum_off_depth; }
ScopedChecksumOff::~ScopedChecksumOff() { --checksum_off_depth; }
bool checksum_disabled() { return checksum_off_depth > 0; }

}  // namespace detail

void write_header(std::span<std::byte> out, std::uint16_t codec_id, std::uint32_t config_tag,
                  std::size_t elements, std::size_t payload_bytes) {
  write_header_fields(out, codec_id, config_tag, elements, payload_bytes);
  if (detail::checksum_disabled()) {
    store_le<std::uint32_t>(out.data() + kCrcOffset, 0);
    return;
  }
  reseal_message(out.first(kHeaderBytes + payload_bytes));
}

void write_header_payload_crc(std::span<std::byte> out, std::uint16_t codec_id,
                              std::uint32_t config_tag, std::size_t elements,
                              std::size_t payload_bytes, std::uint32_t payload_crc) {
  write_header_fields(out, codec_id, config_tag, elements, payload_bytes);
  const std::uint32_t header_crc = crc32c(std::span<const std::byte>(out.data(), kCrcOffset));
  store_le<std::uint32_t>(out.data() + kCrcOffset,
                          crc32c_combine(header_crc, payload_crc, payload_bytes));
}

std::uint32_t message_crc(std::span<const std::byte> msg) {
  return crc32c(msg.subspan(kHeaderBytes), crc32c(msg.first(kCrcOffset)));
}

void reseal_message(std::span<std::byte> msg) {
  if (msg.size() < kHeaderBytes) {
    throw InvalidArgument("reseal_message: " + std::to_string(msg.size()) + " bytes < header " +
                          std::to_string(kHeaderBytes));
  }
  store_le<std::uint32_t>(msg.data() + kCrcOffset, message_crc(msg));
}

WireHeader read_header(std::span<const std::byte> msg, std::string_view op) {
  if (msg.size() < kHeaderBytes) {
    corrupt(op, "message of " + std::to_string(msg.size()) + " bytes < header " +
                    std::to_string(kHeaderBytes));
  }
  const std::byte* p = msg.data();
  if (load_le<std::uint32_t>(p) != kWireMagic) corrupt(op, "bad magic (not a gradcomp message)");
  const auto version = load_le<std::uint8_t>(p + 4);
  if (version != kWireVersion) {
    corrupt(op, "wire version " + std::to_string(version) + " != supported " +
                    std::to_string(kWireVersion));
  }
  WireHeader h;
  h.codec_id = load_le<std::uint16_t>(p + 6);
  h.config_tag = load_le<std::uint32_t>(p + 8);
  h.elements = load_le<std::uint32_t>(p + 12);
  h.payload_bytes = load_le<std::uint32_t>(p + 16);
  h.crc32c = load_le<std::uint32_t>(p + kCrcOffset);
  if (h.payload_bytes != msg.size() - kHeaderBytes) {
    corrupt(op, "header says " + std::to_string(h.payload_bytes) + " payload bytes, message has " +
                    std::to_string(msg.size() - kHeaderBytes));
  }
  // Before any field is interpreted: a flipped bit in the codec id or n reads as
  // corruption, not as a message from another codec.
  const std::uint32_t computed = message_crc(msg);
  if (computed != h.crc32c) checksum_mismatch(op, h.crc32c, computed);
  const auto flags = load_le<std::uint8_t>(p + 5);
  if (flags != 0) corrupt(op, "reserved flags " + std::to_string(flags) + " != 0");
  return h;
}

std::span<const std::byte> open_payload(std::span<const std::byte> msg, const Codec& codec,
                                        std::size_t n) {
  // The op name is only built on failure: this runs for every message in the training
  // loop, which must not allocate.
  auto fail = [&codec](const std::string& what) { corrupt(codec.name() + " decode", what); };
  if (msg.size() < kHeaderBytes) {
    read_header(msg, codec.name() + " decode");  // throws with the framing error
  }
  const std::byte* p = msg.data();
  const bool framing_ok = load_le<std::uint32_t>(p) == kWireMagic &&
                          load_le<std::uint8_t>(p + 4) == kWireVersion &&
                          load_le<std::uint8_t>(p + 5) == 0 &&
                          load_le<std::uint32_t>(p + 16) == msg.size() - kHeaderBytes;
  if (!framing_ok || message_crc(msg) != load_le<std::uint32_t>(p + kCrcOffset)) {
    read_header(msg, codec.name() + " decode");  // throws naming the field
  }
  const auto codec_id = load_le<std::uint16_t>(p + 6);
  const auto config_tag = load_le<std::uint32_t>(p + 8);
  const auto elements = load_le<std::uint32_t>(p + 12);
  if (codec_id != codec.wire_id()) {
    fail("message from codec id " + std::to_string(codec_id) + ", expected " +
         std::to_string(codec.wire_id()));
  }
  if (config_tag != codec.config_tag()) {
    fail("message encoded with other parameters than '" + codec.spec() + "'");
  }
  if (elements != n) {
    fail("message has " + std::to_string(elements) + " elements, destination " + std::to_string(n));
  }
  return msg.subspan(kHeaderBytes);
}

void expect_payload_bytes(std::span<const std::byte> payload, std::size_t expected,
                          std::string_view op, std::size_t n) {
  if (payload.size() != expected) {
    corrupt(op, "payload of " + std::to_string(payload.size()) + " bytes, expected " +
                    std::to_string(expected) + " for n " + std::to_string(n));
  }
}

}  // namespace gradcomp
