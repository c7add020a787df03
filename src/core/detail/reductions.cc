// Reductions over float gradients (reductions.h): the exact abs-max, and the
// deterministic blocked sums of |x|, x and x^2, each a scalar reference and an AVX2 /
// OpenMP fast path. The max is exact in any order; the sums are blocked in a fixed
// order, so every path gives the same double whatever the SIMD width or thread count.
#include "detail/reductions.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>

#ifdef __AVX2__
#include <immintrin.h>
#endif

#include "detail/pending.h"
#include "detail/scratch.h"

namespace gradcomp::detail {

namespace {

// The packing kernels' thresholds (bitpack_internal.h): the max runs in chunks of
// kChunk values, and below kParallelMin values everything runs on one thread. Only the
// OpenMP build reads them ([[maybe_unused]] for clang's warning in the others).
[[maybe_unused]] constexpr std::size_t kChunk = std::size_t{1} << 15;        // values per chunk
[[maybe_unused]] constexpr std::size_t kParallelMin = std::size_t{1} << 16;  // one thread below

#ifdef __AVX2__
inline __m256i as_int(__m256 v) { return _mm256_castps_si256(v); }
#endif  // __AVX2__

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

// Sum of |x| over one block [begin, end), begin a multiple of 16 relative to the block.
// With a pending, the block is filled in kFillBlock pieces (multiples of 16), each summed
// right after it is filled; the lanes and their order are those of the unfilled sum.
template <bool kFast>
double abs_sum_block(const float* x, std::size_t begin, std::size_t end,
                     const Pending* pending = nullptr) {
  alignas(32) double lanes[16] = {};
  std::size_t i = begin;
#ifdef __AVX2__
  if constexpr (kFast) {
    const __m256 mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    __m256d acc[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(),
                      _mm256_setzero_pd()};
    const auto sum16 = [&](std::size_t piece_end) {
      for (; i + 16 <= piece_end; i += 16) {
        const __m256 a = _mm256_and_ps(_mm256_loadu_ps(x + i), mask);
        const __m256 b = _mm256_and_ps(_mm256_loadu_ps(x + i + 8), mask);
        acc[0] = _mm256_add_pd(acc[0], _mm256_cvtps_pd(_mm256_castps256_ps128(a)));
        acc[1] = _mm256_add_pd(acc[1], _mm256_cvtps_pd(_mm256_extractf128_ps(a, 1)));
        acc[2] = _mm256_add_pd(acc[2], _mm256_cvtps_pd(_mm256_castps256_ps128(b)));
        acc[3] = _mm256_add_pd(acc[3], _mm256_cvtps_pd(_mm256_extractf128_ps(b, 1)));
      }
    };
    if (pending == nullptr) {
      sum16(end);
    } else {
      pending->blocks(begin, end, [&](std::size_t, std::size_t pe) { sum16(pe); });
    }
    for (int k = 0; k < 4; ++k) _mm256_store_pd(lanes + 4 * k, acc[k]);
    for (; i < end; ++i) lanes[(i - begin) % 16] += static_cast<double>(std::fabs(x[i]));
    return combine16(lanes);
  }
#endif
  const auto sum1 = [&](std::size_t piece_end) {
    for (; i < piece_end; ++i) lanes[(i - begin) % 16] += static_cast<double>(std::fabs(x[i]));
  };
  if (pending == nullptr) {
    sum1(end);
  } else {
    pending->blocks(begin, end, [&](std::size_t, std::size_t pe) { sum1(pe); });
  }
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
double abs_sum_impl(const float* x, std::size_t n, const Pending* pending = nullptr) {
  return blocked_sum<kFast, double>(
      x, n,
      [pending](const float* xs, std::size_t b, std::size_t e) {
        return abs_sum_block<kFast>(xs, b, e, pending);
      },
      [](double a, double b) { return a + b; });
}

template <bool kFast>
Moments moments_impl(const float* x, std::size_t n) {
  return blocked_sum<kFast, Moments>(x, n, moments_block<kFast>, [](Moments a, Moments b) {
    return Moments{a.sum + b.sum, a.sum_sq + b.sum_sq, std::max(a.abs_max_bits, b.abs_max_bits)};
  });
}

}  // namespace

double combine16(const double* l) {
  double s[4];
  for (int k = 0; k < 4; ++k) s[k] = (l[k] + l[k + 8]) + (l[k + 4] + l[k + 12]);
  return (s[0] + s[2]) + (s[1] + s[3]);
}

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
double abs_sum(const float* x, std::size_t n, const Pending* pending) {
  return abs_sum_impl<true>(x, n, pending);
}
Moments moments_ref(const float* x, std::size_t n) { return moments_impl<false>(x, n); }
Moments moments(const float* x, std::size_t n) { return moments_impl<true>(x, n); }

}  // namespace gradcomp::detail
