// Selection kernels: radix select on the bit patterns of |x| (see select.h).
//
// Exact top-k in O(n), two passes over x:
//   1. histogram of the top 10 bits of |x| (exponent and 2 mantissa bits: 4 buckets per
//      octave), four interleaved sub-histograms so that runs of equal buckets do not
//      serialise on one counter; non-finite patterns land in buckets >= 1020;
//   2. walking buckets from the top finds the bucket b holding the k-th largest; one
//      vectorised pass gathers the indices above b (all selected) and b's candidates;
//   then b is refined on bits 20..10 and 9..0 (histograms over the candidates only,
//   compacting them) until the selection rule is exact, and the above list is merged
//   with the selected candidates, ascending. For Gaussian data at ratio 0.001 bucket b
//   holds ~0.2% of n, so everything after pass 2 is noise.
#include "gradcomp/kernels/select.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#ifdef __AVX2__
#include <immintrin.h>
#endif

#include "detail/pending.h"
#include "detail/scratch.h"
#include "gradcomp/error.h"

namespace gradcomp::kernels {

using detail::fill_all;
using detail::Pending;
using detail::scratch;

namespace {

// Radix levels over the 31-bit pattern of |x|: bits 30..21, 20..10, 9..0.
constexpr int kLevels = 3;
constexpr int kShift[kLevels] = {21, 10, 0};
constexpr std::uint32_t kBuckets[kLevels] = {1024, 2048, 1024};
constexpr std::uint32_t kMaxBuckets = 2048;
constexpr std::uint32_t kFirstNonFiniteBucket = kNonFiniteBits >> 21;  // 1020

constexpr std::size_t kNpos = std::numeric_limits<std::size_t>::max();

// A selection rule over u = abs_bits(x): take every u >= hi, and of the elements with
// lo <= u < hi the `need` with the lowest indices.
struct Cut {
  std::uint32_t lo = 0;
  std::uint64_t hi = std::uint64_t{1} << 32;
  std::size_t need = 0;
};

[[noreturn]] void throw_non_finite(std::span<const float> x, std::string_view op) {
  std::size_t i = 0;
  while (i < x.size() && abs_bits(x[i]) < kNonFiniteBits) ++i;
  throw InvalidArgument(std::string(op) + ": non-finite value at index " + std::to_string(i));
}

// The bucket holding the need-th largest (need >= 1, total >= need), scanning from the
// top; *above receives the count in higher buckets.
std::uint32_t pick_bucket(const std::uint32_t* hist, std::uint32_t buckets, std::size_t need,
                          std::size_t* above) {
  std::size_t acc = 0;
  for (std::uint32_t b = buckets; b-- > 0;) {
    if (acc + hist[b] >= need) {
      *above = acc;
      return b;
    }
    acc += hist[b];
  }
  *above = acc;  // unreachable when total >= need
  return 0;
}

// Refines `cut`, whose [lo, hi) holds exactly the m values `vals` (need <= m), from
// radix level `level` on, compacting vals in place. With stop_early the refinement ends
// as soon as a whole bucket is taken (top-k needs only the rule); otherwise it goes on
// until [lo, hi) is a single value, the need-th largest (lo).
Cut refine(std::uint32_t* vals, std::size_t m, Cut cut, int level, bool stop_early) {
  std::uint32_t hist[kMaxBuckets];
  for (; level < kLevels; ++level) {
    if (stop_early && m == cut.need) break;
    const int shift = kShift[level];
    const std::uint32_t mask = kBuckets[level] - 1;
    std::fill_n(hist, kBuckets[level], 0u);
    for (std::size_t j = 0; j < m; ++j) ++hist[(vals[j] >> shift) & mask];
    std::size_t above = 0;
    const std::uint32_t b = pick_bucket(hist, kBuckets[level], cut.need, &above);
    cut.need -= above;
    cut.lo |= b << shift;
    cut.hi = std::uint64_t{cut.lo} + (std::uint64_t{1} << shift);
    if (level + 1 == kLevels || (stop_early && hist[b] == cut.need)) break;
    std::size_t c = 0;
    for (std::size_t j = 0; j < m; ++j) {
      vals[c] = vals[j];
      c += ((vals[j] >> shift) & mask) == b;
    }
    m = c;
  }
  return cut;
}

// Applies `cut` to an ascending index list in place (the values of the list's elements
// all lie below the list's original upper bound); returns the kept count.
std::size_t apply_cut(std::span<const float> x, std::uint32_t* list, std::size_t m,
                      const Cut& cut) {
  std::size_t o = 0, ties = 0;
  for (std::size_t j = 0; j < m; ++j) {
    const std::uint32_t u = abs_bits(x[list[j]]);
    bool take = u >= cut.hi;
    if (!take && u >= cut.lo && ties < cut.need) {
      take = true;
      ++ties;
    }
    list[o] = list[j];
    o += take;
  }
  return o;
}

// Level-0 histogram of abs_bits(x) >> 21 into hist[1024] (x formed in the pass with a
// pending).
void histogram_level0(const float* x, std::size_t n, std::uint32_t* hist, const Pending* pending) {
  // Four sub-histograms (16 KiB, L1-resident): consecutive equal buckets (common: most
  // gradients share a few exponents) would otherwise chain increments on one counter.
  alignas(64) std::uint32_t h[4][1024] = {};
  const auto range = [&](std::size_t begin, std::size_t end) {
    std::size_t i = begin;
    for (; i + 4 <= end; i += 4) {
      ++h[0][abs_bits(x[i]) >> 21];
      ++h[1][abs_bits(x[i + 1]) >> 21];
      ++h[2][abs_bits(x[i + 2]) >> 21];
      ++h[3][abs_bits(x[i + 3]) >> 21];
    }
    for (; i < end; ++i) ++h[0][abs_bits(x[i]) >> 21];
  };
  if (pending != nullptr) {
    pending->blocks(0, n, range);
  } else {
    range(0, n);
  }
  for (std::uint32_t b = 0; b < 1024; ++b) hist[b] = h[0][b] + h[1][b] + h[2][b] + h[3][b];
}

// Calls visit(i, u) for every i (ascending) with u = abs_bits(x[i]) >= lo. Sparse hits
// cost one compare per 8 floats (AVX2 movemask); dense hits degrade gracefully.
template <class Visit>
void for_each_at_least(const float* x, std::size_t n, std::uint32_t lo, Visit&& visit) {
  std::size_t i = 0;
#ifdef __AVX2__
  const __m256i abs_mask = _mm256_set1_epi32(0x7FFFFFFF);
  // u >= lo  <=>  u > lo - 1 as signed int32 (u <= 0x7FFFFFFF; lo == 0 gives -1: all).
  const __m256i lo_m1 = _mm256_set1_epi32(static_cast<int>(lo - 1));
  for (; i + 32 <= n; i += 32) {
    const auto load = [&](std::size_t at) {
      return _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + at)),
                              abs_mask);
    };
    const __m256i c0 = _mm256_cmpgt_epi32(load(i), lo_m1);
    const __m256i c1 = _mm256_cmpgt_epi32(load(i + 8), lo_m1);
    const __m256i c2 = _mm256_cmpgt_epi32(load(i + 16), lo_m1);
    const __m256i c3 = _mm256_cmpgt_epi32(load(i + 24), lo_m1);
    const __m256i any = _mm256_or_si256(_mm256_or_si256(c0, c1), _mm256_or_si256(c2, c3));
    if (_mm256_testz_si256(any, any)) continue;
    std::uint32_t bits =
        static_cast<std::uint32_t>(_mm256_movemask_ps(_mm256_castsi256_ps(c0))) |
        static_cast<std::uint32_t>(_mm256_movemask_ps(_mm256_castsi256_ps(c1))) << 8 |
        static_cast<std::uint32_t>(_mm256_movemask_ps(_mm256_castsi256_ps(c2))) << 16 |
        static_cast<std::uint32_t>(_mm256_movemask_ps(_mm256_castsi256_ps(c3))) << 24;
    while (bits != 0) {
      const std::size_t at = i + static_cast<std::size_t>(std::countr_zero(bits));
      bits &= bits - 1;
      visit(at, abs_bits(x[at]));
    }
  }
#endif
  for (; i < n; ++i) {
    const std::uint32_t u = abs_bits(x[i]);
    if (u >= lo) visit(i, u);
  }
}

// The need-th largest of m values (1 <= need <= m), destroying vals.
std::uint32_t kth_of_values(std::uint32_t* vals, std::size_t m, std::size_t need) {
  return refine(vals, m, Cut{0, std::uint64_t{1} << 32, need}, 0, false).lo;
}

// Top-k among an ascending list whose values are `vals` (destroyed); in place.
std::size_t topk_among_values(std::span<const float> x, std::uint32_t* list, std::uint32_t* vals,
                              std::size_t m, std::size_t k) {
  if (k >= m) return m;
  if (k == 0) return 0;
  const Cut cut = refine(vals, m, Cut{0, std::uint64_t{1} << 32, k}, 0, true);
  return apply_cut(x, list, m, cut);
}

// Indices with u >= thr into idx/vals; kNpos as soon as more than cap are found. With a
// pending, x is formed block by block in the same pass, to the end even when the pass
// has stopped collecting (over the cap, or a non-finite value: reported after it).
std::size_t select_capped(std::span<const float> x, std::uint32_t thr, std::uint32_t* idx,
                          std::uint32_t* vals, std::size_t cap, std::string_view op,
                          const Pending* pending = nullptr) {
  std::size_t c = 0;
  bool over = false;
  bool non_finite = false;
  // Exceptions and early exits from inside the visitor: a flag keeps the loop simple;
  // once over, the remaining hits are skipped cheaply.
  const auto range = [&](std::size_t begin, std::size_t end) {
    for_each_at_least(x.data() + begin, end - begin, thr, [&](std::size_t j, std::uint32_t u) {
      if (over || non_finite) return;
      if (u >= kNonFiniteBits) {
        if (pending == nullptr) throw_non_finite(x, op);
        non_finite = true;
        return;
      }
      if (c == cap) {
        over = true;
        return;
      }
      idx[c] = static_cast<std::uint32_t>(begin + j);
      vals[c] = u;
      ++c;
    });
  };
  if (pending != nullptr) {
    pending->blocks(0, x.size(), range);
  } else {
    range(0, x.size());
  }
  if (non_finite) throw_non_finite(x, op);
  return over ? kNpos : c;
}

}  // namespace

std::size_t count_for_fraction(double fraction, std::size_t n) {
  if (n == 0) return 0;
  const double c = std::ceil(fraction * static_cast<double>(n) * (1.0 - 1e-12));
  if (!(c >= 1.0)) return 1;
  if (c >= static_cast<double>(n)) return n;
  return static_cast<std::size_t>(c);
}

std::size_t select_topk_exact(std::span<const float> x, std::size_t k, std::span<std::uint32_t> out,
                              std::string_view op, const Pending* pending) {
  const std::size_t n = x.size();
  k = std::min(k, n);
  if (k == 0) {
    fill_all(pending, n);
    return 0;
  }
  std::uint32_t hist[1024];
  histogram_level0(x.data(), n, hist, pending);
  for (std::uint32_t b = kFirstNonFiniteBucket; b < 1024; ++b) {
    if (hist[b] != 0) throw_non_finite(x, op);
  }
  if (k == n) {
    for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<std::uint32_t>(i);
    return n;
  }
  std::size_t above = 0;
  const std::uint32_t b = pick_bucket(hist, 1024, k, &above);
  Cut cut{b << 21, std::uint64_t{b + 1} << 21, k - above};
  const std::size_t m = hist[b];

  // Pass 2: indices above the bucket (all taken) and the bucket's candidates.
  std::uint32_t* above_idx = scratch<std::uint32_t>(1, above, n).data();
  std::uint32_t* cand_idx = scratch<std::uint32_t>(2, m, n).data();
  std::uint32_t* cand_u = scratch<std::uint32_t>(3, m, n).data();
  std::size_t a = 0, c = 0;
  const auto hi = static_cast<std::uint32_t>(cut.hi);
  for_each_at_least(x.data(), n, cut.lo, [&](std::size_t i, std::uint32_t u) {
    if (u >= hi) {
      above_idx[a++] = static_cast<std::uint32_t>(i);
    } else {
      cand_idx[c] = static_cast<std::uint32_t>(i);
      cand_u[c++] = u;
    }
  });

  if (m != cut.need) cut = refine(cand_u, m, cut, 1, true);
  const std::size_t taken = apply_cut(x, cand_idx, m, cut);

  // Merge the two ascending lists.
  std::size_t o = 0, ai = 0;
  for (std::size_t j = 0; j < taken; ++j) {
    while (ai < above && above_idx[ai] < cand_idx[j]) out[o++] = above_idx[ai++];
    out[o++] = cand_idx[j];
  }
  while (ai < above) out[o++] = above_idx[ai++];
  return o;
}

std::size_t select_topk_among(std::span<const float> x, std::span<std::uint32_t> list,
                              std::size_t k) {
  const std::size_t m = list.size();
  if (k >= m) return m;
  std::uint32_t* vals = scratch<std::uint32_t>(3, m, x.size()).data();
  for (std::size_t j = 0; j < m; ++j) vals[j] = abs_bits(x[list[j]]);
  return topk_among_values(x, list.data(), vals, m, k);
}

std::uint32_t kth_largest_abs_bits(std::span<const float> x, std::size_t k, std::string_view op) {
  const std::size_t n = x.size();
  if (k == 0 || k > n) {
    throw InvalidArgument(std::string(op) + ": k-th largest with k " + std::to_string(k) +
                          " of n " + std::to_string(n));
  }
  std::uint32_t hist[1024];
  histogram_level0(x.data(), n, hist, nullptr);
  for (std::uint32_t b = kFirstNonFiniteBucket; b < 1024; ++b) {
    if (hist[b] != 0) throw_non_finite(x, op);
  }
  std::size_t above = 0;
  const std::uint32_t b = pick_bucket(hist, 1024, k, &above);
  const Cut cut{b << 21, std::uint64_t{b + 1} << 21, k - above};
  const std::size_t m = hist[b];
  std::uint32_t* vals = scratch<std::uint32_t>(3, m, x.size()).data();
  std::size_t c = 0;
  const auto hi = static_cast<std::uint32_t>(cut.hi);
  for_each_at_least(x.data(), n, cut.lo, [&](std::size_t, std::uint32_t u) {
    if (u < hi) vals[c++] = u;
  });
  return refine(vals, m, cut, 1, false).lo;
}

std::size_t select_at_least(std::span<const float> x, std::uint32_t thr_bits,
                            std::span<std::uint32_t> out, std::string_view op) {
  if (thr_bits > kNonFiniteBits) {
    throw InvalidArgument(std::string(op) + ": threshold pattern above +inf");
  }
  std::uint32_t* dst = out.data();
  std::size_t c = 0;
  for_each_at_least(x.data(), x.size(), thr_bits, [&](std::size_t i, std::uint32_t u) {
    if (u >= kNonFiniteBits) throw_non_finite(x, op);
    dst[c++] = static_cast<std::uint32_t>(i);
  });
  return c;
}

std::size_t select_topk_sampled(std::span<const float> x, std::size_t k, double sample,
                                const CounterRng& rng, std::span<std::uint32_t> out,
                                std::string_view op, const Pending* pending) {
  const std::size_t n = x.size();
  k = std::min(k, n);
  if (k == 0) {
    fill_all(pending, n);
    return 0;
  }
  if (k == n) return select_topk_exact(x, k, out, op, pending);  // everything; no threshold

  // Sampling whole 64-byte lines (16 floats) instead of single elements: a random
  // element costs a full cache-line fetch anyway, so a line gives 16 samples for the
  // price of one miss. Lines are stratified (one uniform draw in each of `lines` equal
  // strata), so the fetches go forward through memory, many in flight at once, and the
  // sample covers the whole tensor even when gradients vary slowly along it (which
  // would make 16 neighbours less informative than 16 scattered values). The threshold
  // is only an estimate: the 0.8k / 1.3k checks below correct a bad one.
  constexpr std::size_t kLine = 16;
  const std::size_t min_samples = (2 * n + k - 1) / k;  // ceil(2 / density)
  const std::size_t want = std::max(count_for_fraction(sample, n), min_samples);
  const std::size_t lines_total = n / kLine;
  const std::size_t lines = (want + kLine - 1) / kLine;
  if (lines >= lines_total) return select_topk_exact(x, k, out, op, pending);
  const std::size_t samples = lines * kLine;

  std::uint32_t thr = 0;
  {
    std::uint32_t* su = scratch<std::uint32_t>(3, samples).data();
    float peeked[kLine];
    for (std::size_t j = 0; j < lines; ++j) {
      const std::size_t begin = j * lines_total / lines;
      const std::size_t end = (j + 1) * lines_total / lines;
      const std::size_t line =
          begin + rng.below(static_cast<std::uint32_t>(j), static_cast<std::uint32_t>(end - begin));
      const float* src = x.data() + line * kLine;
      if (pending != nullptr) {
        pending->peek(line * kLine, (line + 1) * kLine, peeked);
        src = peeked;
      }
      for (std::size_t t = 0; t < kLine; ++t) su[j * kLine + t] = abs_bits(src[t]);
    }
    // top-(density * samples) of the sample; k * samples < 2^64 as both are < 2^32.
    const std::size_t ks = std::clamp<std::size_t>((k * samples + n - 1) / n, 1, samples);
    // A non-finite sample is clamped so that the selection pass meets (and reports) it.
    thr = std::min(kth_of_values(su, samples, ks), kNonFiniteBits);
  }

  // Selected indices and their |x| patterns. Beyond `cap` entries the exact top-k of the
  // selection is the exact top-k of x (the selection is every |x| >= thr, a superset of
  // the top k), so the pass stops early and the exact kernel takes over: same result.
  const std::size_t cap = std::min(n, std::max<std::size_t>(8 * k, 4096));
  std::uint32_t* idx = scratch<std::uint32_t>(1, cap).data();
  std::uint32_t* vals = scratch<std::uint32_t>(2, cap).data();
  constexpr int kMaxRetries = 10;
  for (int attempt = 0;; ++attempt) {
    // The first pass forms x (pending); later ones (DGC's retries) read it.
    std::size_t c = select_capped(x, thr, idx, vals, cap, op, attempt == 0 ? pending : nullptr);
    if (c == kNpos) return select_topk_exact(x, k, out, op);
    if (10 * c > 13 * k) {
      c = topk_among_values(x, idx, vals, c, k);  // hierarchical re-selection
    } else if (10 * c < 8 * k) {
      // Too few: lower the threshold by 0.8 (DGC's rule). After the last retry, exact top-k
      // rather than accepting a short message.
      if (attempt == kMaxRetries) return select_topk_exact(x, k, out, op);
      thr = std::bit_cast<std::uint32_t>(std::bit_cast<float>(thr) * 0.8f);
      continue;
    }
    std::copy_n(idx, c, out.data());
    return c;
  }
}

}  // namespace gradcomp::kernels
