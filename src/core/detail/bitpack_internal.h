// Helpers shared by the packing kernels (bitpack_2bit.cc, bitpack_1bit.cc,
// bitpack_ternary.cc) and private to them: the OpenMP chunking, the scalar writers of
// the two layouts (the references, and the fast paths' tails) and the AVX2 mask packers.
//
// SIMD packing. x86 movemask collects lane sign bits LSB-first (lane k -> bit k), while
// the wire layouts are MSB-first inside each byte. The fast encoders therefore narrow
// the 32-bit compare masks to bytes (packs_epi32 + packs_epi16, which interleave the
// 128-bit lanes), put the bytes back in value order with one vpermd, reverse the order
// inside each output byte's group with one pshufb, and take a single movemask_epi8:
// 32 bits = one packed word (16 two-bit codes, or 32 sign bits) per movemask.
// The fast decoders broadcast one packed word to all lanes and shift each lane's code
// into place with a variable shift (vpsrlvd / vpsllvd): 2-bit codes index a 4-entry
// table with vpermps, sign bits select with blendvps.
//
// Parallelism: large inputs are cut into chunks of kChunk values (a multiple of 32, so
// chunks start on a packed word in both layouts and write disjoint words); every value's
// code depends only on that value (and its counter-RNG draw), so the result is identical
// for any thread count.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#ifdef __AVX2__
#include <immintrin.h>
#endif

#include "detail/bitpack.h"

namespace gradcomp::detail::bitpack {

inline constexpr std::size_t kChunk = std::size_t{1} << 15;        // values per parallel chunk
inline constexpr std::size_t kParallelMin = std::size_t{1} << 16;  // below this, one thread

// Calls f(begin, end) over [0, n) in word-aligned chunks, in parallel for large n.
template <class F>
void for_chunks(std::size_t n, const F& f) {
#ifdef GRADCOMP_OPENMP
  if (n > kParallelMin) {
    const auto chunks = static_cast<std::ptrdiff_t>((n + kChunk - 1) / kChunk);
#pragma omp parallel for schedule(static)
    for (std::ptrdiff_t c = 0; c < chunks; ++c) {
      const std::size_t b = static_cast<std::size_t>(c) * kChunk;
      f(b, std::min(n, b + kChunk));
    }
    return;
  }
#endif
  f(std::size_t{0}, n);
}

// Writes the 2-bit codes code(i) of [begin, end) (begin % 16 == 0) into bytes
// [begin/4, packed2_bytes(end)), zero padding included.
template <class CodeFn>
void encode2_scalar(std::size_t begin, std::size_t end, std::byte* out, const CodeFn& code) {
  const std::size_t first = begin / 4;
  const std::size_t last = packed2_bytes(end);
  if (last > first) std::memset(out + first, 0, last - first);
  for (std::size_t i = begin; i < end; ++i) {
    out[i / 4] |= static_cast<std::byte>(code(i) << (6 - 2 * (i % 4)));
  }
}

// Same for 1-bit codes (begin % 32 == 0), bytes [begin/8, packed1_bytes(end)).
template <class BitFn>
void encode1_scalar(std::size_t begin, std::size_t end, std::byte* out, const BitFn& bit) {
  const std::size_t first = begin / 8;
  const std::size_t last = packed1_bytes(end);
  if (last > first) std::memset(out + first, 0, last - first);
  for (std::size_t i = begin; i < end; ++i) {
    out[i / 8] |= static_cast<std::byte>(bit(i) << (7 - i % 8));
  }
}

#ifdef __AVX2__

// One 2-bit-layout word from the compare masks (all-ones lanes) of 16 values:
// lo/hi = low/high code bit, a = values 0..7, b = values 8..15.
inline std::uint32_t pack2_masks(__m256i lo_a, __m256i lo_b, __m256i hi_a, __m256i hi_b) {
  // Per 128-bit lane after the two packs, as dwords: [L0-3 L8-11 H0-3 H8-11 | L4-7 L12-15
  // H4-7 H12-15]; vpermd makes lane 0 = [L0-3 H0-3 L4-7 H4-7], lane 1 = values 8..15.
  const __m256i l16 = _mm256_packs_epi32(lo_a, lo_b);
  const __m256i h16 = _mm256_packs_epi32(hi_a, hi_b);
  const __m256i bytes = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(l16, h16),
                                                    _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7));
  // Output bit p of a byte (LSB-first for movemask) is value 3 - p/2 of that byte's four,
  // its high bit when p is odd: source byte = 8*group + 4*(p odd) + 3 - p/2.
  const __m256i order = _mm256_setr_epi8(3, 7, 2, 6, 1, 5, 0, 4, 11, 15, 10, 14, 9, 13, 8, 12,  //
                                         3, 7, 2, 6, 1, 5, 0, 4, 11, 15, 10, 14, 9, 13, 8, 12);
  return static_cast<std::uint32_t>(_mm256_movemask_epi8(_mm256_shuffle_epi8(bytes, order)));
}

// One 1-bit-layout word from the compare masks of 32 values (m0 = values 0..7, ...).
inline std::uint32_t pack1_masks(__m256i m0, __m256i m1, __m256i m2, __m256i m3) {
  // After the packs, dwords hold values [0-3 8-11 16-19 24-27 | 4-7 12-15 20-23 28-31];
  // vpermd restores value order, pshufb reverses each group of 8 (MSB-first bytes).
  const __m256i bytes = _mm256_permutevar8x32_epi32(
      _mm256_packs_epi16(_mm256_packs_epi32(m0, m1), _mm256_packs_epi32(m2, m3)),
      _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  const __m256i reverse = _mm256_setr_epi8(7, 6, 5, 4, 3, 2, 1, 0, 15, 14, 13, 12, 11, 10, 9, 8, 7,
                                           6, 5, 4, 3, 2, 1, 0, 15, 14, 13, 12, 11, 10, 9, 8);
  return static_cast<std::uint32_t>(_mm256_movemask_epi8(_mm256_shuffle_epi8(bytes, reverse)));
}

inline __m256i as_int(__m256 v) { return _mm256_castps_si256(v); }

#endif  // __AVX2__

}  // namespace gradcomp::detail::bitpack
