#include "detail/bitstream.h"

#include <array>
#include <cstring>
#include <utility>

#include "gradcomp/wire.h"

#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace gradcomp::detail {

namespace {

// ---- portable fast path: a 64-bit accumulator over 32-bit words ------------------
// Starts at a word boundary (`out`/`in` point at the word holding code 0's bit 0).

void pack_generic(const std::uint32_t* codes, std::size_t n, unsigned w, std::byte* out) {
  std::uint64_t acc = 0;  // pending bits, LSB = next stream bit; < 32 + 17 bits used
  unsigned bits = 0;
  for (std::size_t i = 0; i < n; ++i) {
    acc |= std::uint64_t{codes[i]} << bits;
    bits += w;
    if (bits >= 32) {
      store_le<std::uint32_t>(out, static_cast<std::uint32_t>(acc));
      out += 4;
      acc >>= 32;
      bits -= 32;
    }
  }
  if (bits > 0) store_le<std::uint32_t>(out, static_cast<std::uint32_t>(acc));  // zero-padded
}

void unpack_generic(const std::byte* in, std::size_t n, unsigned w, std::uint32_t* codes) {
  const std::uint32_t mask = (std::uint32_t{1} << w) - 1;
  std::uint64_t acc = 0;
  unsigned bits = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (bits < w) {  // reads exactly ceil(n*w/32) words in total
      acc |= std::uint64_t{load_le<std::uint32_t>(in)} << bits;
      in += 4;
      bits += 32;
    }
    codes[i] = static_cast<std::uint32_t>(acc) & mask;
    acc >>= w;
    bits -= w;
  }
}

#if defined(__AVX2__)
// ---- AVX2: 8 codes <-> w bytes per step (w <= 16 packing, w <= 17 unpacking) ----
// Group g (codes 8g..8g+7) is byte aligned at byte w*g. The kernels work on blocks of
// 4 groups (32 codes = w words) so the generic path can take over at a word boundary,
// and stop before a load or store of the last block would leave [0, total).

// Unpacking loads a group's bytes into both 128-bit halves: the same 16 (or 8) bytes
// for W <= 16; for W = 17 (17 bytes per group) the high half starts at byte 8, where
// code 4 begins (bit 68).
template <unsigned W>
constexpr unsigned kHighHalf = W <= 16 ? 0 : 4 * W / 8;
// Bytes a group's load or store may touch from its first byte.
template <unsigned W>
constexpr unsigned kWindow = W <= 8    ? 8
                             : W <= 16 ? 16
                                       : kHighHalf<W> + 16;

// Number of leading 32-code blocks whose group windows stay inside `total` bytes.
template <unsigned W>
std::size_t safe_blocks(std::size_t n, std::size_t total) {
  std::size_t blocks = n / 32;
  // Block b's last group starts at byte 4*W*b + 3*W.
  constexpr std::size_t window = kWindow<W>;  // (named: clang-format misreads "<W> >")
  while (blocks > 0 && 4 * W * (blocks - 1) + 3 * W + window > total) --blocks;
  return blocks;
}

// pshufb control for unpacking: 32-bit lane j (lanes 0-3 in the low 128-bit half,
// 4-7 in the high half) gathers the group's bytes b_j .. b_j+3, b_j = (j*W)/8, from
// its half's copy; bytes past the group read as zero.
template <unsigned W>
constexpr std::array<std::int8_t, 32> unpack_shuffle() {
  std::array<std::int8_t, 32> ctl{};
  for (unsigned j = 0; j < 8; ++j) {
    const unsigned b = j * W / 8;
    const unsigned base = j < 4 ? 0 : kHighHalf<W>;
    for (unsigned k = 0; k < 4; ++k) {
      const unsigned src = b + k;
      ctl[4 * j + k] = src < W ? static_cast<std::int8_t>(src - base) : std::int8_t{-128};
    }
  }
  return ctl;
}

template <unsigned W>
std::size_t unpack_avx2(const std::byte* in, std::size_t n, std::uint32_t* codes) {
  static_assert(W <= 17);
  static constexpr auto kCtl = unpack_shuffle<W>();
  const std::size_t blocks = safe_blocks<W>(n, packed_bytes(n, W));
  const __m256i ctl = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kCtl.data()));
  const __m256i shift =
      _mm256_setr_epi32(0, W % 8, 2 * W % 8, 3 * W % 8, 4 * W % 8, 5 * W % 8, 6 * W % 8, 7 * W % 8);
  const __m256i mask = _mm256_set1_epi32((1 << W) - 1);
  for (std::size_t g = 0; g < 4 * blocks; ++g) {
    const std::byte* src = in + W * g;
    __m256i bytes;
    if constexpr (W <= 8) {
      bytes = _mm256_set1_epi64x(static_cast<long long>(load_le<std::uint64_t>(src)));
    } else if constexpr (W <= 16) {
      bytes = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src)));
    } else {
      bytes = _mm256_inserti128_si256(
          _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src))),
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + kHighHalf<W>)), 1);
    }
    __m256i c = _mm256_shuffle_epi8(bytes, ctl);
    c = _mm256_and_si256(_mm256_srlv_epi32(c, shift), mask);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes + 8 * g), c);
  }
  return 32 * blocks;
}

// Packing merges codes pairwise: 8 x W -> 4 x 2W (64-bit lanes) -> 2 x 4W (one per
// 128-bit half) -> one 8W-bit value, stored with one 8- or 16-byte store whose bytes
// past W are zero (the next group's store overwrites them).
template <unsigned W>
void pack_group_avx2(const std::uint32_t* codes, std::byte* dst) {
  const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes));
  const __m256i lo = _mm256_blend_epi32(c, _mm256_setzero_si256(), 0xAA);  // even codes
  const __m256i hi = _mm256_srli_epi64(c, 32);                             // odd codes
  const __m256i y = _mm256_or_si256(lo, _mm256_slli_epi64(hi, W));
  const __m256i z = _mm256_or_si256(y, _mm256_slli_epi64(_mm256_srli_si256(y, 8), 2 * W));
  const __m128i zl = _mm256_castsi256_si128(z);
  const __m128i zh = _mm256_extracti128_si256(z, 1);
  // (a shift count of 64 gives 0, as W = 16 needs)
  const __m128i low = _mm_or_si128(zl, _mm_slli_epi64(zh, 4 * W));
  if constexpr (W <= 8) {
    store_le<std::uint64_t>(dst, static_cast<std::uint64_t>(_mm_cvtsi128_si64(low)));
  } else {
    const __m128i high = _mm_srli_epi64(zh, 64 - 4 * W);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), _mm_unpacklo_epi64(low, high));
  }
}

// W <= 8: 16 codes per step. Narrow to 16 bits, merge pairs with one vpmaddwd
// (c0 + c1 * 2^W), merge 64-bit lanes, then the two 128-bit halves hold codes 0-7
// and 8-15 as two 8W-bit values, stored at bytes 0 and W (8-byte stores; the
// second overwrites the first's zero bytes past W).
template <unsigned W>
void pack_pair_avx2(const std::uint32_t* codes, std::byte* dst) {
  const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes));
  const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + 8));
  // u16 lanes: a0-3 b0-3 | a4-7 b4-7 (vpackusdw works per 128-bit half)
  const __m256i p = _mm256_packus_epi32(a, b);
  const __m256i q = _mm256_madd_epi16(p, _mm256_set1_epi32(1 | (1 << W) << 16));  // 2W bits
  // u64 lanes: lo + hi << 2W. For W <= 8, hi << 2W = q >> (32 - 2W): lo (< 2^2W)
  // shifts out entirely.
  const __m256i y = _mm256_or_si256(_mm256_blend_epi32(q, _mm256_setzero_si256(), 0xAA),
                                    _mm256_srli_epi64(q, 32 - 2 * W));
  // u64 lanes (4W bits): a0-3, b0-3 | a4-7, b4-7
  const __m128i r = _mm_or_si128(_mm256_castsi256_si128(y),
                                 _mm_slli_epi64(_mm256_extracti128_si256(y, 1), 4 * W));
  store_le<std::uint64_t>(dst, static_cast<std::uint64_t>(_mm_cvtsi128_si64(r)));
  store_le<std::uint64_t>(dst + W, static_cast<std::uint64_t>(_mm_extract_epi64(r, 1)));
}

template <unsigned W>
std::size_t pack_avx2(const std::uint32_t* codes, std::size_t n, std::byte* out) {
  const std::size_t blocks = safe_blocks<W>(n, packed_bytes(n, W));
  if constexpr (W <= 8) {
    // Step t writes bytes [2W*t, 2W*t + W + 8): the same bound as 8-code groups.
    for (std::size_t t = 0; t < 2 * blocks; ++t) pack_pair_avx2<W>(codes + 16 * t, out + 2 * W * t);
  } else {
    for (std::size_t g = 0; g < 4 * blocks; ++g) pack_group_avx2<W>(codes + 8 * g, out + W * g);
  }
  return 32 * blocks;
}

using PackFn = std::size_t (*)(const std::uint32_t*, std::size_t, std::byte*);
using UnpackFn = std::size_t (*)(const std::byte*, std::size_t, std::uint32_t*);

// Indexed by width; null where the generic path does it.
template <unsigned... Ws>
constexpr std::array<PackFn, kMaxCodeBits + 1> make_pack_table(
    std::integer_sequence<unsigned, Ws...>) {
  std::array<PackFn, kMaxCodeBits + 1> t{};
  ((t[Ws] = &pack_avx2<Ws>), ...);
  return t;
}
template <unsigned... Ws>
constexpr std::array<UnpackFn, kMaxCodeBits + 1> make_unpack_table(
    std::integer_sequence<unsigned, Ws...>) {
  std::array<UnpackFn, kMaxCodeBits + 1> t{};
  ((t[Ws] = &unpack_avx2<Ws>), ...);
  return t;
}
// Packing 17-bit codes stays on the generic path (8 codes = 136 bits: the merge tree
// overflows 64-bit lanes); unpacking has the two-load variant above.
constexpr auto kPackTable = make_pack_table(
    std::integer_sequence<unsigned, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16>{});
constexpr auto kUnpackTable = make_unpack_table(
    std::integer_sequence<unsigned, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17>{});
#endif  // __AVX2__

}  // namespace

void pack_codes(const std::uint32_t* codes, std::size_t n, unsigned w, std::byte* out) {
  std::size_t done = 0;
#if defined(__AVX2__)
  if (w <= 16) done = kPackTable[w](codes, n, out);
#endif
  // `done` is a multiple of 32: the rest starts on a word boundary.
  pack_generic(codes + done, n - done, w, out + done / 32 * w * 4);
}

void unpack_codes(const std::byte* in, std::size_t n, unsigned w, std::uint32_t* codes) {
  std::size_t done = 0;
#if defined(__AVX2__)
  if (w <= 17) done = kUnpackTable[w](in, n, codes);
#endif
  unpack_generic(in + done / 32 * w * 4, n - done, w, codes + done);
}

// ---- references: one bit at a time -----------------------------------------------

void pack_codes_ref(const std::uint32_t* codes, std::size_t n, unsigned w, std::byte* out) {
  const std::size_t total = packed_bytes(n, w);
  for (std::size_t b = 0; b < total; ++b) out[b] = std::byte{0};
  for (std::size_t i = 0; i < n; ++i) {
    for (unsigned k = 0; k < w; ++k) {
      if ((codes[i] >> k) & 1u) {
        const std::size_t bit = i * w + k;
        out[bit / 8] |= std::byte{static_cast<std::uint8_t>(1u << (bit % 8))};
      }
    }
  }
}

void unpack_codes_ref(const std::byte* in, std::size_t n, unsigned w, std::uint32_t* codes) {
  for (std::size_t i = 0; i < n; ++i) {
    std::uint32_t c = 0;
    for (unsigned k = 0; k < w; ++k) {
      const std::size_t bit = i * w + k;
      c |= static_cast<std::uint32_t>((std::to_integer<unsigned>(in[bit / 8]) >> (bit % 8)) & 1u)
           << k;
    }
    codes[i] = c;
  }
}

bool padding_is_zero(const std::byte* in, std::size_t n, unsigned w) {
  const std::size_t total_bits = 8 * packed_bytes(n, w);
  for (std::size_t bit = n * w; bit < total_bits; ++bit) {  // fewer than 32 bits
    if ((std::to_integer<unsigned>(in[bit / 8]) >> (bit % 8)) & 1u) return false;
  }
  return true;
}

}  // namespace gradcomp::detail
