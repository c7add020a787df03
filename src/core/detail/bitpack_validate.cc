// Validation of untrusted packed payloads (bitpack.h): the scans of a 2-bit payload
// (invalid codes 01, nonzero padding), the 1-bit padding check, and the CorruptMessage
// errors the decoders throw, which name the element and n.
#include "detail/bitpack.h"

#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "gradcomp/error.h"
#include "gradcomp/wire.h"

namespace gradcomp::detail {

namespace {

std::string format_float(float v) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

}  // namespace

Packed2Scan scan_packed2_ref(const std::byte* in, std::size_t n) {
  Packed2Scan r;
  for (std::size_t i = 0; i < n; ++i) {
    const unsigned c = code2_at(in, i);
    if (c == 1 && r.first_invalid == kNoIndex) r.first_invalid = i;
    if (c != 0) r.any_nonzero = true;
  }
  for (std::size_t i = n; i < 4 * packed2_bytes(n); ++i) {
    if (code2_at(in, i) != 0) r.padding_clean = false;
  }
  return r;
}

Packed2Scan scan_packed2(const std::byte* in, std::size_t n) {
  Packed2Scan r;
  const std::size_t full = n / 4;  // bytes whose four codes all belong to elements < n
  const std::size_t bytes = packed2_bytes(n);
  // Padding: the low bits of a partial last byte, then whole zero bytes.
  std::uint8_t pad = 0;
  std::size_t pad_from = full;
  std::uint8_t partial = 0;
  if (n % 4 != 0) {
    const unsigned keep_bits = 2 * static_cast<unsigned>(n % 4);
    const auto low = static_cast<std::uint8_t>((1u << (8 - keep_bits)) - 1);
    pad = std::to_integer<std::uint8_t>(in[full]) & low;
    partial = std::to_integer<std::uint8_t>(in[full]) & static_cast<std::uint8_t>(~low);
    pad_from = full + 1;
  }
  for (std::size_t b = pad_from; b < bytes; ++b) pad |= std::to_integer<std::uint8_t>(in[b]);
  r.padding_clean = pad == 0;

  // A code 01 has its low bit set and its high bit clear: ~(x >> 1) & x & 0x55..55.
  constexpr std::uint64_t kLow = 0x5555555555555555ull;
  std::uint64_t bad = 0;
  std::uint64_t any = 0;
  std::size_t b = 0;
  for (; b + 8 <= full; b += 8) {
    const auto x = load_le<std::uint64_t>(in + b);
    bad |= ~(x >> 1) & x & kLow;
    any |= x;
  }
  for (; b < full; ++b) {
    const std::uint64_t x = std::to_integer<std::uint8_t>(in[b]);
    bad |= ~(x >> 1) & x & kLow;
    any |= x;
  }
  bad |= ~(std::uint64_t{partial} >> 1) & partial & kLow;
  any |= partial;
  r.any_nonzero = any != 0;
  if (bad != 0) {  // rare (corrupt input): find the element for the error message
    for (std::size_t i = 0; i < n; ++i) {
      if (code2_at(in, i) == 1) {
        r.first_invalid = i;
        break;
      }
    }
  }
  return r;
}

bool packed1_padding_clean(const std::byte* in, std::size_t n) {
  std::uint8_t pad = 0;
  std::size_t from = n / 8;
  if (n % 8 != 0) {
    pad = std::to_integer<std::uint8_t>(in[from]) &
          static_cast<std::uint8_t>((1u << (8 - n % 8)) - 1);
    ++from;
  }
  for (std::size_t b = from; b < packed1_bytes(n); ++b) pad |= std::to_integer<std::uint8_t>(in[b]);
  return pad == 0;
}

bool validate_packed2(const std::byte* in, std::size_t n, std::string_view op) {
  const Packed2Scan s = scan_packed2(in, n);
  if (!s.padding_clean) {
    throw CorruptMessage(std::string(op) + ": nonzero padding bits after the last element (n " +
                         std::to_string(n) + ")");
  }
  if (s.first_invalid != kNoIndex) {
    throw CorruptMessage(std::string(op) + ": invalid code 01 at element " +
                         std::to_string(s.first_invalid) + " (n " + std::to_string(n) + ")");
  }
  return s.any_nonzero;
}

void validate_packed1(const std::byte* in, std::size_t n, std::string_view op) {
  if (!packed1_padding_clean(in, n)) {
    throw CorruptMessage(std::string(op) + ": nonzero padding bits after the last element (n " +
                         std::to_string(n) + ")");
  }
}

void validate_scale(float s, std::string_view op, std::string_view what) {
  if (!std::isfinite(s)) {
    throw CorruptMessage(std::string(op) + ": " + std::string(what) + " " + format_float(s) +
                         " is not finite");
  }
  if (std::signbit(s)) {
    throw CorruptMessage(std::string(op) + ": " + std::string(what) + " " + format_float(s) +
                         " < 0");
  }
}

}  // namespace gradcomp::detail
