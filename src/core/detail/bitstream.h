// Fixed-width code packing for widths 2..17 bits (QSGD's sign+level codes; any
// codec that sends small integers per element).
//
// Layout: code i occupies bits [i*w, (i+1)*w) of a little-endian bit stream, LSB
// first: bit b of the stream is bit (b % 8) of byte b / 8. The stream is padded with
// zero bits to a whole number of 32-bit words, so n codes take packed_bytes(n, w) =
// 4 * ceil(n*w / 32) bytes. A run of codes that starts at a multiple of 32 starts on
// a word boundary (32 codes = w words), so a long stream can be packed or unpacked in
// independent 32-aligned chunks (one per thread, or one per L1-sized block).
//
// Each operation has a fast path (AVX2: 8 codes <-> w bytes per step; elsewhere a
// 64-bit accumulator) and a bit-by-bit scalar reference that the tests compare with
// bit for bit. The fast paths never read or write outside [0, packed_bytes(n, w)).
#pragma once

#include <cstddef>
#include <cstdint>

namespace gradcomp::detail {

inline constexpr unsigned kMinCodeBits = 2;
inline constexpr unsigned kMaxCodeBits = 17;

// Bytes that n codes of w bits occupy, padding included (a multiple of 4).
// n * w must not overflow: true for any n < 2^59.
constexpr std::size_t packed_bytes(std::size_t n, unsigned w) { return (n * w + 31) / 32 * 4; }

// Writes codes[0, n) (each < 2^w, w in [2, 17]) to out[0, packed_bytes(n, w)),
// zero-filling the padding bits.
void pack_codes(const std::uint32_t* codes, std::size_t n, unsigned w, std::byte* out);
void pack_codes_ref(const std::uint32_t* codes, std::size_t n, unsigned w, std::byte* out);

// Reads n codes of w bits from in[0, packed_bytes(n, w)) into codes[0, n).
void unpack_codes(const std::byte* in, std::size_t n, unsigned w, std::uint32_t* codes);
void unpack_codes_ref(const std::byte* in, std::size_t n, unsigned w, std::uint32_t* codes);

// True if the padding bits [n*w, 8 * packed_bytes(n, w)) of a stream are all zero
// (a decoder rejects messages with garbage there: one valid encoding per message).
bool padding_is_zero(const std::byte* in, std::size_t n, unsigned w);

}  // namespace gradcomp::detail
