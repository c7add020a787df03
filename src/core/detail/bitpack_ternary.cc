// TernGrad's stochastic ternary codes on the 2-bit layout (bitpack.h): the scalar
// reference and the AVX2 / OpenMP fast path, which draws the same counter-RNG uniforms
// eight lanes at a time.
#include "detail/bitpack.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "detail/bitpack_internal.h"
#include "gradcomp/rng.h"
#include "gradcomp/wire.h"

namespace gradcomp::detail {

using bitpack::encode2_scalar;
using bitpack::for_chunks;
#ifdef __AVX2__
using bitpack::as_int;
using bitpack::pack2_masks;
#endif

namespace {

inline unsigned ternary_code(float g, float s, float bound, const CounterRng& rng, std::size_t i) {
  const float a = std::min(std::fabs(g), bound);
  if (!(rng.uniform(static_cast<std::uint32_t>(i)) < a / s)) return 0u;
  return std::signbit(g) ? 2u : 3u;
}

#ifdef __AVX2__

// CounterRng's lowbias32 hash (gradcomp/rng.h) in eight lanes, so that the fast path's
// draws equal rng.uniform(i) bit for bit.
inline __m256i lowbias32_v(__m256i x) {
  x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
  x = _mm256_mullo_epi32(x, _mm256_set1_epi32(0x7FEB352D));
  x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 15));
  x = _mm256_mullo_epi32(x, _mm256_set1_epi32(static_cast<int>(0x846CA68Bu)));
  return _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
}

#endif  // __AVX2__

// ---- range kernels (begin on a word boundary) -----------------------------------------

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

}  // namespace

void ternary_encode_ref(const float* g, std::size_t n, float s, float bound, const CounterRng& rng,
                        std::byte* out) {
  encode2_scalar(0, n, out, [&](std::size_t i) { return ternary_code(g[i], s, bound, rng, i); });
}

void ternary_encode(const float* g, std::size_t n, float s, float bound, const CounterRng& rng,
                    std::byte* out) {
  for_chunks(n, [&](std::size_t b, std::size_t e) { ternary_range(g, b, e, s, bound, rng, out); });
}

}  // namespace gradcomp::detail
