// CRC-32C (Castagnoli; reflected polynomial 0x82F63B78, initial value and final XOR
// 0xFFFFFFFF), the checksum of iSCSI, ext4 and SCTP. gradcomp messages carry one over
// their header and payload (wire.h).
//
// crc32c() picks, once, at run time, the fastest implementation the CPU running the
// program offers (the build baseline, x86-64-v3, assumes none of them):
//   vpclmul512  VPCLMULQDQ on 512-bit vectors (AVX-512F/VL/BW): carry-less-multiply
//               folding of 256 bytes per round, the last 16 bytes and the tail through
//               SSE4.2's crc32 instruction;
//   vpclmul256  the same on 256-bit vectors (AVX2 + VPCLMULQDQ, e.g. Zen 3);
//   sse4.2      the crc32 instruction on three interleaved streams;
//   portable    slicing-by-8 tables.
// A fifth, pclmul (the folding on 128-bit PCLMULQDQ), is not chosen automatically: it
// measured half as fast as sse4.2 on Zen 4. Inputs shorter than a folding round take
// the sse4.2 path. Every path gives the same value for every input (tests force each
// one on and compare it with the portable one).
// GRADCOMP_CRC32C=<path> in the environment selects a path (portable, sse4.2, pclmul,
// vpclmul256, vpclmul512) for benchmarks and tests; if the CPU lacks it, the best
// automatic one below it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace gradcomp {

// The CRC-32C of `data`, continuing from `crc` (the value returned for the bytes
// before it; 0 to start): crc32c(b, crc32c(a)) == crc32c(a followed by b).
std::uint32_t crc32c(std::span<const std::byte> data, std::uint32_t crc = 0);

// The portable implementation, always (tests compare the others with it).
std::uint32_t crc32c_portable(std::span<const std::byte> data, std::uint32_t crc = 0);

// The CRC-32C of a followed by b from crc32c(a), crc32c(b) and b's length
// (crc32c_combine(crc32c(a), crc32c(b), b.size()) == crc32c(a followed by b)), in
// O(log len_b): lets a codec checksum its payload while writing it, before the header.
std::uint32_t crc32c_combine(std::uint32_t crc_a, std::uint32_t crc_b, std::uint64_t len_b);

// Copies src to dst (src.size() bytes; the two must not overlap) and returns the
// CRC-32C of those bytes continuing from crc: memcpy then crc32c(), in one pass where
// the active path folds (each vector read is stored and folded), in cache-sized chunks
// otherwise. The none codec's encode.
std::uint32_t crc32c_copy(std::byte* dst, std::span<const std::byte> src, std::uint32_t crc = 0);

// Whether crc32c() runs on a CPU instruction (any path but the portable one).
bool crc32c_uses_hardware();

// The implementations, slowest first.
enum class Crc32cPath { kPortable, kSse42, kPclmul, kVpclmul256, kVpclmul512 };
inline constexpr Crc32cPath kAllCrc32cPaths[] = {Crc32cPath::kPortable, Crc32cPath::kSse42,
                                                 Crc32cPath::kPclmul, Crc32cPath::kVpclmul256,
                                                 Crc32cPath::kVpclmul512};

// "portable", "sse4.2", "pclmul", "vpclmul256", "vpclmul512" (GRADCOMP_CRC32C's values).
const char* crc32c_path_name(Crc32cPath path);
// Whether this CPU (and OS: vector state saved) can run `path`.
bool crc32c_path_available(Crc32cPath path);
// The path crc32c() uses (the automatic choice, or GRADCOMP_CRC32C's).
Crc32cPath crc32c_active_path();
// crc32c() on a given path (tests and benchmarks); InvalidArgument if the CPU lacks it.
std::uint32_t crc32c_on_path(Crc32cPath path, std::span<const std::byte> data,
                             std::uint32_t crc = 0);

// crc32c_copy() on a given path (tests); InvalidArgument if the CPU lacks it.
std::uint32_t crc32c_copy_on_path(Crc32cPath path, std::byte* dst, std::span<const std::byte> src,
                                  std::uint32_t crc = 0);

// Describes the active path, e.g. "vpclmul512 (VPCLMULQDQ folding, 512-bit)".
const char* crc32c_implementation();

}  // namespace gradcomp
