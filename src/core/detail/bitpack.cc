// Bit-packing kernels: scalar references and AVX2 / OpenMP fast paths (see bitpack.h).
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
// for any thread count. Reductions are exact (max) or blocked in a fixed order (sums).
#include "detail/bitpack.h"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstring>
#include <string>

#ifdef __AVX2__
#include <immintrin.h>
#endif

#include "detail/scratch.h"
#include "gradcomp/error.h"
#include "gradcomp/wire.h"

namespace gradcomp::detail {

namespace {

constexpr std::size_t kChunk = std::size_t{1} << 15;        // values per parallel chunk
constexpr std::size_t kParallelMin = std::size_t{1} << 16;  // below this, one thread

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

// ---- per-element definitions (shared by references and fast-path tails) --------------

inline unsigned threshold2_code(float v, float tau) {
  return v >= tau ? 3u : (v <= -tau ? 2u : 0u);
}

template <SignRule kRule>
inline unsigned sign_bit(float v, float t) {
  if constexpr (kRule == SignRule::kGreater) {
    return v > t ? 1u : 0u;
  } else {
    return v >= t ? 1u : 0u;
  }
}

inline unsigned ternary_code(float g, float s, float bound, const CounterRng& rng, std::size_t i) {
  const float a = std::min(std::fabs(g), bound);
  if (!(rng.uniform(static_cast<std::uint32_t>(i)) < a / s)) return 0u;
  return std::signbit(g) ? 2u : 3u;
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

inline __m256i lowbias32_v(__m256i x) {
  x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
  x = _mm256_mullo_epi32(x, _mm256_set1_epi32(0x7FEB352D));
  x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 15));
  x = _mm256_mullo_epi32(x, _mm256_set1_epi32(static_cast<int>(0x846CA68Bu)));
  return _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
}

#endif  // __AVX2__

// ---- range kernels (begin on a word boundary) -----------------------------------------

template <bool kFeedback>
void threshold2_range(const float* in, float* fb, std::size_t begin, std::size_t end, float tau,
                      const Lut2& lut, std::byte* out) {
  std::size_t i = begin;
#ifdef __AVX2__
  const __m256 pos = _mm256_set1_ps(tau);
  const __m256 neg = _mm256_set1_ps(-tau);
  const __m256 l0 = _mm256_set1_ps(lut.v[0]);
  const __m256 l2 = _mm256_set1_ps(lut.v[2]);
  const __m256 l3 = _mm256_set1_ps(lut.v[3]);
  for (; i + 16 <= end; i += 16) {
    const __m256 a = _mm256_loadu_ps(in + i);
    const __m256 b = _mm256_loadu_ps(in + i + 8);
    const __m256 pa = _mm256_cmp_ps(a, pos, _CMP_GE_OQ);
    const __m256 na = _mm256_cmp_ps(a, neg, _CMP_LE_OQ);
    const __m256 pb = _mm256_cmp_ps(b, pos, _CMP_GE_OQ);
    const __m256 nb = _mm256_cmp_ps(b, neg, _CMP_LE_OQ);
    store_le<std::uint32_t>(out + i / 4,
                            pack2_masks(as_int(pa), as_int(pb), as_int(_mm256_or_ps(pa, na)),
                                        as_int(_mm256_or_ps(pb, nb))));
    if constexpr (kFeedback) {
      const __m256 da = _mm256_blendv_ps(_mm256_blendv_ps(l0, l2, na), l3, pa);
      const __m256 db = _mm256_blendv_ps(_mm256_blendv_ps(l0, l2, nb), l3, pb);
      _mm256_storeu_ps(fb + i, _mm256_add_ps(a, da));
      _mm256_storeu_ps(fb + i + 8, _mm256_add_ps(b, db));
    }
  }
#endif
  encode2_scalar(i, end, out, [&](std::size_t k) {
    const unsigned c = threshold2_code(in[k], tau);
    if constexpr (kFeedback) fb[k] = in[k] + lut.v[c];
    return c;
  });
}

void ternary_range(const float* g, std::size_t begin, std::size_t end, float s, float bound,
                   const CounterRng& rng, std::byte* out) {
  std::size_t i = begin;
#ifdef __AVX2__
  const std::uint64_t key = rng.key();
  const __m256i k0 = _mm256_set1_epi32(static_cast<int>(static_cast<std::uint32_t>(key)));
  const __m256i k1 = _mm256_set1_epi32(static_cast<int>(static_cast<std::uint32_t>(key >> 32)));
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256 bound_v = _mm256_set1_ps(bound);
  const __m256 s_v = _mm256_set1_ps(s);
  const __m256 unit = _mm256_set1_ps(0x1.0p-24f);
  // hi = sent (code 1x), lo = sent and positive (code 11), for values i .. i+7.
  auto codes8 = [&](std::size_t at, __m256i& lo, __m256i& hi) {
    const __m256 x = _mm256_loadu_ps(g + at);
    const __m256i ctr =
        _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(static_cast<std::uint32_t>(at))), lane);
    const __m256i bits = lowbias32_v(_mm256_add_epi32(lowbias32_v(_mm256_xor_si256(ctr, k0)), k1));
    const __m256 u = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(bits, 8)), unit);
    const __m256 a = _mm256_min_ps(_mm256_and_ps(x, abs_mask), bound_v);
    hi = as_int(_mm256_cmp_ps(u, _mm256_div_ps(a, s_v), _CMP_LT_OQ));
    lo = _mm256_andnot_si256(_mm256_srai_epi32(as_int(x), 31), hi);
  };
  for (; i + 16 <= end; i += 16) {
    __m256i lo_a, hi_a, lo_b, hi_b;
    codes8(i, lo_a, hi_a);
    codes8(i + 8, lo_b, hi_b);
    store_le<std::uint32_t>(out + i / 4, pack2_masks(lo_a, lo_b, hi_a, hi_b));
  }
#endif
  encode2_scalar(i, end, out, [&](std::size_t k) { return ternary_code(g[k], s, bound, rng, k); });
}

template <bool kFeedback, SignRule kRule>
void sign_range(const float* in, float* fb, std::size_t begin, std::size_t end, float t,
                const Lut1& lut, std::byte* out) {
  std::size_t i = begin;
#ifdef __AVX2__
  constexpr int kPredicate = kRule == SignRule::kGreater ? _CMP_GT_OQ : _CMP_GE_OQ;
  const __m256 t_v = _mm256_set1_ps(t);
  const __m256 l0 = _mm256_set1_ps(lut.v[0]);
  const __m256 l1 = _mm256_set1_ps(lut.v[1]);
  for (; i + 32 <= end; i += 32) {
    __m256 x[4], m[4];
    for (int k = 0; k < 4; ++k) {
      x[k] = _mm256_loadu_ps(in + i + 8 * k);
      m[k] = _mm256_cmp_ps(x[k], t_v, kPredicate);
    }
    store_le<std::uint32_t>(out + i / 8,
                            pack1_masks(as_int(m[0]), as_int(m[1]), as_int(m[2]), as_int(m[3])));
    if constexpr (kFeedback) {
      for (int k = 0; k < 4; ++k) {
        _mm256_storeu_ps(fb + i + 8 * k, _mm256_add_ps(x[k], _mm256_blendv_ps(l0, l1, m[k])));
      }
    }
  }
#endif
  encode1_scalar(i, end, out, [&](std::size_t k) {
    const unsigned b = sign_bit<kRule>(in[k], t);
    if constexpr (kFeedback) fb[k] = in[k] + lut.v[b];
    return b;
  });
}

void unpack2_range(const std::byte* in, std::size_t begin, std::size_t end, const Lut2& lut,
                   float* out) {
  std::size_t i = begin;
#ifdef __AVX2__
  const __m256 table = _mm256_setr_ps(lut.v[0], lut.v[1], lut.v[2], lut.v[3], lut.v[0], lut.v[1],
                                      lut.v[2], lut.v[3]);
  // Value j of a word sits at bits 8*(j/4) + 6 - 2*(j%4).
  const __m256i shift_a = _mm256_setr_epi32(6, 4, 2, 0, 14, 12, 10, 8);
  const __m256i shift_b = _mm256_setr_epi32(22, 20, 18, 16, 30, 28, 26, 24);
  const __m256i three = _mm256_set1_epi32(3);
  for (; i + 16 <= end; i += 16) {
    const __m256i w = _mm256_set1_epi32(load_le<std::int32_t>(in + i / 4));
    const __m256 va =
        _mm256_permutevar8x32_ps(table, _mm256_and_si256(_mm256_srlv_epi32(w, shift_a), three));
    const __m256 vb =
        _mm256_permutevar8x32_ps(table, _mm256_and_si256(_mm256_srlv_epi32(w, shift_b), three));
    _mm256_storeu_ps(out + i, _mm256_add_ps(_mm256_loadu_ps(out + i), va));
    _mm256_storeu_ps(out + i + 8, _mm256_add_ps(_mm256_loadu_ps(out + i + 8), vb));
  }
#endif
  for (; i < end; ++i) out[i] = out[i] + lut.v[code2_at(in, i)];
}

void unpack1_range(const std::byte* in, std::size_t begin, std::size_t end, const Lut1& lut,
                   float* out) {
  std::size_t i = begin;
#ifdef __AVX2__
  const __m256 l0 = _mm256_set1_ps(lut.v[0]);
  const __m256 l1 = _mm256_set1_ps(lut.v[1]);
  // Value 8b + j is word bit 8b + 7 - j: shifting left by 24 - 8b + j moves it to the
  // sign bit, which blendvps reads.
  const __m256i shift[4] = {_mm256_setr_epi32(24, 25, 26, 27, 28, 29, 30, 31),
                            _mm256_setr_epi32(16, 17, 18, 19, 20, 21, 22, 23),
                            _mm256_setr_epi32(8, 9, 10, 11, 12, 13, 14, 15),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)};
  for (; i + 32 <= end; i += 32) {
    const __m256i w = _mm256_set1_epi32(load_le<std::int32_t>(in + i / 8));
    for (int k = 0; k < 4; ++k) {
      const __m256 sel = _mm256_castsi256_ps(_mm256_sllv_epi32(w, shift[k]));
      float* o = out + i + 8 * k;
      _mm256_storeu_ps(o, _mm256_add_ps(_mm256_loadu_ps(o), _mm256_blendv_ps(l0, l1, sel)));
    }
  }
#endif
  for (; i < end; ++i) out[i] = out[i] + lut.v[bit1_at(in, i)];
}

std::uint32_t abs_max_range(const float* x, std::size_t begin, std::size_t end) {
  std::size_t i = begin;
  std::uint32_t m = 0;
#ifdef __AVX2__
  const __m256i mask = _mm256_set1_epi32(0x7FFFFFFF);
  __m256i acc[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(),
                    _mm256_setzero_si256()};
  for (; i + 32 <= end; i += 32) {
    for (int k = 0; k < 4; ++k) {
      const __m256i v = _mm256_loadu_si256(
          reinterpret_cast<const __m256i*>(x + i + 8 * static_cast<std::size_t>(k)));
      acc[k] = _mm256_max_epu32(acc[k], _mm256_and_si256(v, mask));
    }
  }
  alignas(32) std::uint32_t lanes[8];
  _mm256_store_si256(
      reinterpret_cast<__m256i*>(lanes),
      _mm256_max_epu32(_mm256_max_epu32(acc[0], acc[1]), _mm256_max_epu32(acc[2], acc[3])));
  for (std::uint32_t v : lanes) m = std::max(m, v);
#endif
  for (; i < end; ++i) m = std::max(m, std::bit_cast<std::uint32_t>(x[i]) & 0x7FFFFFFFu);
  return m;
}

// ---- deterministic blocked sums -------------------------------------------------------

// The fixed combination of 16 lanes: ((l[k] + l[k+8]) + (l[k+4] + l[k+12])) for k < 4,
// then (s0 + s2) + (s1 + s3) — what a 4-vector-of-4-doubles reduction does.
double combine16(const double* l) {
  double s[4];
  for (int k = 0; k < 4; ++k) s[k] = (l[k] + l[k + 8]) + (l[k + 4] + l[k + 12]);
  return (s[0] + s[2]) + (s[1] + s[3]);
}

// Sum of |x| over one block [begin, end), begin a multiple of 16 relative to the block.
template <bool kFast>
double abs_sum_block(const float* x, std::size_t begin, std::size_t end) {
  alignas(32) double lanes[16] = {};
  std::size_t i = begin;
#ifdef __AVX2__
  if constexpr (kFast) {
    const __m256 mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    __m256d acc[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(),
                      _mm256_setzero_pd()};
    for (; i + 16 <= end; i += 16) {
      const __m256 a = _mm256_and_ps(_mm256_loadu_ps(x + i), mask);
      const __m256 b = _mm256_and_ps(_mm256_loadu_ps(x + i + 8), mask);
      acc[0] = _mm256_add_pd(acc[0], _mm256_cvtps_pd(_mm256_castps256_ps128(a)));
      acc[1] = _mm256_add_pd(acc[1], _mm256_cvtps_pd(_mm256_extractf128_ps(a, 1)));
      acc[2] = _mm256_add_pd(acc[2], _mm256_cvtps_pd(_mm256_castps256_ps128(b)));
      acc[3] = _mm256_add_pd(acc[3], _mm256_cvtps_pd(_mm256_extractf128_ps(b, 1)));
    }
    for (int k = 0; k < 4; ++k) _mm256_store_pd(lanes + 4 * k, acc[k]);
  }
#endif
  for (; i < end; ++i) lanes[(i - begin) % 16] += static_cast<double>(std::fabs(x[i]));
  return combine16(lanes);
}

template <bool kFast>
Moments moments_block(const float* x, std::size_t begin, std::size_t end) {
  alignas(32) double sum[16] = {};
  alignas(32) double sq[16] = {};
  std::uint32_t max_bits = 0;
  std::size_t i = begin;
#ifdef __AVX2__
  if constexpr (kFast) {
    const __m256i abs_mask = _mm256_set1_epi32(0x7FFFFFFF);
    __m256i mx = _mm256_setzero_si256();
    __m256d s[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(),
                    _mm256_setzero_pd()};
    __m256d q[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(),
                    _mm256_setzero_pd()};
    for (; i + 16 <= end; i += 16) {
      const __m256 a = _mm256_loadu_ps(x + i);
      const __m256 b = _mm256_loadu_ps(x + i + 8);
      mx = _mm256_max_epu32(mx, _mm256_and_si256(as_int(a), abs_mask));
      mx = _mm256_max_epu32(mx, _mm256_and_si256(as_int(b), abs_mask));
      const __m256d d[4] = {
          _mm256_cvtps_pd(_mm256_castps256_ps128(a)), _mm256_cvtps_pd(_mm256_extractf128_ps(a, 1)),
          _mm256_cvtps_pd(_mm256_castps256_ps128(b)), _mm256_cvtps_pd(_mm256_extractf128_ps(b, 1))};
      for (int k = 0; k < 4; ++k) {
        s[k] = _mm256_add_pd(s[k], d[k]);
        // The square of a float is exact in double, so fused or not gives the same sum.
        q[k] = _mm256_add_pd(q[k], _mm256_mul_pd(d[k], d[k]));
      }
    }
    for (int k = 0; k < 4; ++k) {
      _mm256_store_pd(sum + 4 * k, s[k]);
      _mm256_store_pd(sq + 4 * k, q[k]);
    }
    alignas(32) std::uint32_t lanes[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), mx);
    for (std::uint32_t v : lanes) max_bits = std::max(max_bits, v);
  }
#endif
  for (; i < end; ++i) {
    const double d = x[i];
    sum[(i - begin) % 16] += d;
    sq[(i - begin) % 16] += d * d;
    max_bits = std::max(max_bits, std::bit_cast<std::uint32_t>(x[i]) & 0x7FFFFFFFu);
  }
  return {combine16(sum), combine16(sq), max_bits};
}

// Blocks of kSumBlock values, partials in block order; parallel when kFast and large.
template <bool kFast, class T, class BlockFn, class Add>
T blocked_sum(const float* x, std::size_t n, const BlockFn& block, const Add& add) {
  const std::size_t blocks = (n + kSumBlock - 1) / kSumBlock;
  T total{};
#ifdef GRADCOMP_OPENMP
  if (kFast && n > kParallelMin) {
    const std::span<T> part = scratch<T>(kSumScratchSlot, blocks);
    T* p = part.data();
#pragma omp parallel for schedule(static)
    for (std::ptrdiff_t b = 0; b < static_cast<std::ptrdiff_t>(blocks); ++b) {
      const std::size_t begin = static_cast<std::size_t>(b) * kSumBlock;
      p[b] = block(x, begin, std::min(n, begin + kSumBlock));
    }
    for (std::size_t b = 0; b < blocks; ++b) total = add(total, p[b]);
    return total;
  }
#endif
  for (std::size_t b = 0; b < blocks; ++b) {
    const std::size_t begin = b * kSumBlock;
    total = add(total, block(x, begin, std::min(n, begin + kSumBlock)));
  }
  return total;
}

template <bool kFast>
double abs_sum_impl(const float* x, std::size_t n) {
  return blocked_sum<kFast, double>(x, n, abs_sum_block<kFast>,
                                    [](double a, double b) { return a + b; });
}

template <bool kFast>
Moments moments_impl(const float* x, std::size_t n) {
  return blocked_sum<kFast, Moments>(x, n, moments_block<kFast>, [](Moments a, Moments b) {
    return Moments{a.sum + b.sum, a.sum_sq + b.sum_sq, std::max(a.abs_max_bits, b.abs_max_bits)};
  });
}

std::string format_float(float v) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

}  // namespace

// ---- format helpers ---------------------------------------------------------------------

void pack2_ref(const std::uint8_t* codes, std::size_t n, std::byte* out) {
  encode2_scalar(0, n, out, [&](std::size_t i) { return codes[i] & 3u; });
}

void pack1_ref(const std::uint8_t* bits, std::size_t n, std::byte* out) {
  encode1_scalar(0, n, out, [&](std::size_t i) { return bits[i] & 1u; });
}

// ---- 2-bit threshold ----------------------------------------------------------------------

void threshold2_encode_ref(const float* p, std::size_t n, float tau, std::byte* out) {
  encode2_scalar(0, n, out, [&](std::size_t i) { return threshold2_code(p[i], tau); });
}

void threshold2_encode(const float* p, std::size_t n, float tau, std::byte* out) {
  const Lut2 unused{};
  for_chunks(n, [&](std::size_t b, std::size_t e) {
    threshold2_range<false>(p, nullptr, b, e, tau, unused, out);
  });
}

void threshold2_encode_feedback_ref(float* p, std::size_t n, float tau, const Lut2& lut,
                                    std::byte* out) {
  encode2_scalar(0, n, out, [&](std::size_t i) {
    const unsigned c = threshold2_code(p[i], tau);
    p[i] = p[i] + lut.v[c];
    return c;
  });
}

void threshold2_encode_feedback(float* p, std::size_t n, float tau, const Lut2& lut,
                                std::byte* out) {
  for_chunks(
      n, [&](std::size_t b, std::size_t e) { threshold2_range<true>(p, p, b, e, tau, lut, out); });
}

// ---- ternary ------------------------------------------------------------------------------

void ternary_encode_ref(const float* g, std::size_t n, float s, float bound, const CounterRng& rng,
                        std::byte* out) {
  encode2_scalar(0, n, out, [&](std::size_t i) { return ternary_code(g[i], s, bound, rng, i); });
}

void ternary_encode(const float* g, std::size_t n, float s, float bound, const CounterRng& rng,
                    std::byte* out) {
  for_chunks(n, [&](std::size_t b, std::size_t e) { ternary_range(g, b, e, s, bound, rng, out); });
}

// ---- sign bits ----------------------------------------------------------------------------

void sign_encode_ref(const float* p, std::size_t n, float t, SignRule rule, std::byte* out) {
  encode1_scalar(0, n, out, [&](std::size_t i) {
    return rule == SignRule::kGreater ? sign_bit<SignRule::kGreater>(p[i], t)
                                      : sign_bit<SignRule::kGreaterEqual>(p[i], t);
  });
}

void sign_encode(const float* p, std::size_t n, float t, SignRule rule, std::byte* out) {
  const Lut1 unused{};
  for_chunks(n, [&](std::size_t b, std::size_t e) {
    if (rule == SignRule::kGreater) {
      sign_range<false, SignRule::kGreater>(p, nullptr, b, e, t, unused, out);
    } else {
      sign_range<false, SignRule::kGreaterEqual>(p, nullptr, b, e, t, unused, out);
    }
  });
}

void sign_encode_feedback_ref(float* p, std::size_t n, float t, SignRule rule, const Lut1& lut,
                              std::byte* out) {
  encode1_scalar(0, n, out, [&](std::size_t i) {
    const unsigned b = rule == SignRule::kGreater ? sign_bit<SignRule::kGreater>(p[i], t)
                                                  : sign_bit<SignRule::kGreaterEqual>(p[i], t);
    p[i] = p[i] + lut.v[b];
    return b;
  });
}

void sign_encode_feedback(float* p, std::size_t n, float t, SignRule rule, const Lut1& lut,
                          std::byte* out) {
  for_chunks(n, [&](std::size_t b, std::size_t e) {
    if (rule == SignRule::kGreater) {
      sign_range<true, SignRule::kGreater>(p, p, b, e, t, lut, out);
    } else {
      sign_range<true, SignRule::kGreaterEqual>(p, p, b, e, t, lut, out);
    }
  });
}

// ---- decoding -----------------------------------------------------------------------------

void unpack2_add_ref(const std::byte* in, std::size_t n, const Lut2& lut, float* out) {
  for (std::size_t i = 0; i < n; ++i) out[i] = out[i] + lut.v[code2_at(in, i)];
}

void unpack2_add(const std::byte* in, std::size_t n, const Lut2& lut, float* out) {
  for_chunks(n, [&](std::size_t b, std::size_t e) { unpack2_range(in, b, e, lut, out); });
}

void unpack1_add_ref(const std::byte* in, std::size_t n, const Lut1& lut, float* out) {
  for (std::size_t i = 0; i < n; ++i) out[i] = out[i] + lut.v[bit1_at(in, i)];
}

void unpack1_add(const std::byte* in, std::size_t n, const Lut1& lut, float* out) {
  for_chunks(n, [&](std::size_t b, std::size_t e) { unpack1_range(in, b, e, lut, out); });
}

// ---- validation ---------------------------------------------------------------------------

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

// ---- reductions ---------------------------------------------------------------------------

std::uint32_t abs_max_bits_ref(const float* x, std::size_t n) {
  std::uint32_t m = 0;
  for (std::size_t i = 0; i < n; ++i) {
    m = std::max(m, std::bit_cast<std::uint32_t>(x[i]) & 0x7FFFFFFFu);
  }
  return m;
}

std::uint32_t abs_max_bits(const float* x, std::size_t n) {
#ifdef GRADCOMP_OPENMP
  if (n > kParallelMin) {
    std::uint32_t m = 0;
    const auto chunks = static_cast<std::ptrdiff_t>((n + kChunk - 1) / kChunk);
#pragma omp parallel for schedule(static) reduction(max : m)
    for (std::ptrdiff_t c = 0; c < chunks; ++c) {
      const std::size_t b = static_cast<std::size_t>(c) * kChunk;
      m = std::max(m, abs_max_range(x, b, std::min(n, b + kChunk)));
    }
    return m;
  }
#endif
  return abs_max_range(x, 0, n);
}

double abs_sum_ref(const float* x, std::size_t n) { return abs_sum_impl<false>(x, n); }
double abs_sum(const float* x, std::size_t n) { return abs_sum_impl<true>(x, n); }
Moments moments_ref(const float* x, std::size_t n) { return moments_impl<false>(x, n); }
Moments moments(const float* x, std::size_t n) { return moments_impl<true>(x, n); }

}  // namespace gradcomp::detail
