// Count sketch kernels (see count_sketch.h).
//
// Speed notes (25M coordinates, 5 rows, one thread). Building is a scatter of r*n
// additions into the table: it runs two rows at a time (x is read ceil(r/2) times, and
// the two rows' independent read-modify-writes keep more misses in flight; the two rows,
// 1 MB at the default c = n/200, stay in L2 on a 1 MB-L2 core while x streams through),
// and within them in chunks of kBuildChunk coordinates: a vectorised pass computes the
// chunk's columns and signed values (the multiply-add-shift hash is three 32x32
// multiplies, the sign an xor), then a scalar loop adds them into the rows. That loop
// is bound by the cells' L1 misses: ~1 ns per addition with a 500 KB row, ~0.6 ns when
// the row fits in L1, so no reordering of a single-threaded scalar scatter gets far
// below r*n ns (docs/measurements/codec-speed.md). AVX-512 gather/scatter with conflict
// detection is slower than this loop on Zen 4 (same page). Estimating gathers r cells
// per coordinate chunk by chunk, then takes the median with a min/max sorting network that
// vectorises across the chunk.
#include "gradcomp/kernels/count_sketch.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <string>

#ifdef __AVX2__
#include <immintrin.h>
#endif

#include "gradcomp/error.h"
#include "gradcomp/kernels/select.h"
#include "gradcomp/rng.h"

namespace gradcomp::kernels {

using detail::splitmix64;

namespace {

constexpr std::size_t kChunk = 1024;       // coordinates per inner pass
constexpr std::size_t kBuildChunk = 4096;  // the same, building
// Below this, one thread ([[maybe_unused]]: only OpenMP pragmas read it in some builds).
[[maybe_unused]] constexpr std::size_t kParallelMin = std::size_t{1} << 17;

// v with its sign bit flipped where `mask` (0 or 0x80000000) says: s * v, exactly.
float flip(float v, std::uint32_t mask) {
  return std::bit_cast<float>(std::bit_cast<std::uint32_t>(v) ^ mask);
}

// The reference median of r values (sorts v in place). +0 canonicalises a -0 result,
// so that every correct sort of equal values gives the same bits.
float median_ref(float* v, std::uint32_t r) {
  std::sort(v, v + r);
  const float m = (r & 1u) ? v[r / 2] : 0.5f * v[r / 2 - 1] + 0.5f * v[r / 2];
  return m + 0.0f;
}

// The median of each column t of v[0..R) (R arrays of m floats) into out: odd-even
// transposition sort (R passes of compare-exchanges) of the R values, held in
// registers for eight columns at a time (AVX2 vminps/vmaxps), then the middle value
// (even R: the mean of the middle two). Matches median_ref bit for bit: min and max of
// finite values return one of their inputs, so the sorted values are the same numbers
// (up to the sign of zeros, which the final +0 removes).
template <std::uint32_t R, class V, class Min, class Max>
inline void sort_network(V* a, Min&& vmin, Max&& vmax) {
#pragma GCC unroll 16
  for (std::uint32_t pass = 0; pass < R; ++pass) {
#pragma GCC unroll 16
    for (std::uint32_t i = pass & 1u; i + 1 < R; i += 2) {
      const V lo = vmin(a[i], a[i + 1]);
      const V hi = vmax(a[i], a[i + 1]);
      a[i] = lo;
      a[i + 1] = hi;
    }
  }
}

template <std::uint32_t R>
void median_columns(float (*v)[kChunk], std::size_t m, float* out) {
  std::size_t t = 0;
#ifdef __AVX2__
  // x < y ? x : y and x < y ? y : x: _mm256_min_ps(y, x) returns x on ties, as the
  // scalar form below does.
  const auto vmin = [](__m256 x, __m256 y) { return _mm256_min_ps(y, x); };
  const auto vmax = [](__m256 x, __m256 y) { return _mm256_max_ps(y, x); };
  const __m256 half = _mm256_set1_ps(0.5f);
  const __m256 zero = _mm256_setzero_ps();
  for (; t + 8 <= m; t += 8) {
    __m256 a[R];
    for (std::uint32_t j = 0; j < R; ++j) a[j] = _mm256_load_ps(v[j] + t);
    sort_network<R>(a, vmin, vmax);
    __m256 med;
    if constexpr (R % 2 == 1) {
      med = a[R / 2];
    } else {
      med = _mm256_add_ps(_mm256_mul_ps(half, a[R / 2 - 1]), _mm256_mul_ps(half, a[R / 2]));
    }
    _mm256_storeu_ps(out + t, _mm256_add_ps(med, zero));
  }
#endif
  const auto smin = [](float x, float y) { return y < x ? y : x; };
  const auto smax = [](float x, float y) { return y < x ? x : y; };
  for (; t < m; ++t) {
    float a[R];
    for (std::uint32_t j = 0; j < R; ++j) a[j] = v[j][t];
    sort_network<R>(a, smin, smax);
    if constexpr (R % 2 == 1) {
      out[t] = a[R / 2] + 0.0f;
    } else {
      out[t] = (0.5f * a[R / 2 - 1] + 0.5f * a[R / 2]) + 0.0f;
    }
  }
}

using MedianFn = void (*)(float (*)[kChunk], std::size_t, float*);

template <std::uint32_t... Rs>
constexpr MedianFn pick_median(std::uint32_t r, std::integer_sequence<std::uint32_t, Rs...>) {
  MedianFn fn = nullptr;
  ((fn = (r == Rs + 1 ? &median_columns<Rs + 1> : fn)), ...);
  return fn;
}

MedianFn median_for(std::uint32_t r) {
  return pick_median(r, std::make_integer_sequence<std::uint32_t, kMaxSketchRows>{});
}

// Columns and sign masks (0 or 0x80000000) of coordinates [s, s + m) in row j: the
// SketchHash definitions, eight lanes at a time with AVX2 (four 32x32->64 multiplies
// and one 32-bit multiply per eight coordinates; GCC's own vectorisation of the 64-bit
// arithmetic spends most of its time shuffling), the scalar definitions for the tail.
// kPacked: col[t] = column | sign mask (columns are < 2^31), sgn unused: the scatter
// then reads one array instead of two. With xs (the build): val[t] receives the signed
// value s * (scale * x[t]) (scale == 1: s * x[t]), sgn unused, so that the scatter is one
// load of the column, one of the value and the cell's read-modify-write.
template <bool kPacked>
void hash_chunk(const SketchHash::Row& row, std::uint32_t cols, std::uint32_t s, std::size_t m,
                std::uint32_t* col, std::uint32_t* sgn, const float* xs = nullptr,
                float scale = 1.0f, float* val = nullptr) {
  const std::uint32_t a_lo = row.a_lo, a_hi = row.a_hi;
  const std::uint64_t b = row.b;
  std::size_t t = 0;
#ifdef __AVX2__
  const __m256i alo = _mm256_set1_epi64x(static_cast<long long>(a_lo));
  const __m256i ahi = _mm256_set1_epi32(static_cast<int>(a_hi));
  const __m256i bb = _mm256_set1_epi64x(static_cast<long long>(b));
  const __m256i cc = _mm256_set1_epi64x(static_cast<long long>(cols));
  __m256i i = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(s)),
                               _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  const __m256i eight = _mm256_set1_epi32(8);
  for (; t + 8 <= m; t += 8) {
    // (a_lo * i + b) mod 2^64 for even lanes (low halves) and odd lanes (shifted down);
    // the high 32 bits of each, back in their lanes.
    const __m256i pe = _mm256_add_epi64(_mm256_mul_epu32(i, alo), bb);
    const __m256i po = _mm256_add_epi64(_mm256_mul_epu32(_mm256_srli_epi64(i, 32), alo), bb);
    const __m256i hi = _mm256_blend_epi32(_mm256_srli_epi64(pe, 32), po, 0xAA);
    const __m256i h = _mm256_add_epi32(hi, _mm256_mullo_epi32(i, ahi));
    // (h * cols) >> 32
    const __m256i ce = _mm256_mul_epu32(h, cc);
    const __m256i co = _mm256_mul_epu32(_mm256_srli_epi64(h, 32), cc);
    const __m256i c = _mm256_blend_epi32(_mm256_srli_epi64(ce, 32), co, 0xAA);
    if constexpr (kPacked) {
      _mm256_store_si256(reinterpret_cast<__m256i*>(col + t),
                         _mm256_or_si256(c, _mm256_slli_epi32(h, 31)));
    } else if (xs != nullptr) {
      __m256 v = _mm256_loadu_ps(xs + t);
      if (scale != 1.0f) v = _mm256_mul_ps(_mm256_set1_ps(scale), v);
      _mm256_store_si256(reinterpret_cast<__m256i*>(col + t), c);
      _mm256_store_ps(val + t, _mm256_xor_ps(v, _mm256_castsi256_ps(_mm256_slli_epi32(h, 31))));
    } else {
      _mm256_store_si256(reinterpret_cast<__m256i*>(col + t), c);
      _mm256_store_si256(reinterpret_cast<__m256i*>(sgn + t), _mm256_slli_epi32(h, 31));
    }
    i = _mm256_add_epi32(i, eight);
  }
#endif
  for (; t < m; ++t) {
    const std::uint32_t ii = s + static_cast<std::uint32_t>(t);
    const std::uint64_t p = std::uint64_t{a_lo} * ii + b;
    const std::uint32_t h = static_cast<std::uint32_t>(p >> 32) + a_hi * ii;
    if constexpr (kPacked) {
      col[t] = SketchHash::column_of(h, cols) | (h << 31);
    } else if (xs != nullptr) {
      col[t] = SketchHash::column_of(h, cols);
      val[t] = flip(scale == 1.0f ? xs[t] : scale * xs[t], h << 31);
    } else {
      col[t] = SketchHash::column_of(h, cols);
      sgn[t] = h << 31;
    }
  }
}

// Calls f(begin, end) over [0, n) in chunks of kChunk, in parallel for large n (each
// chunk's result depends only on its own coordinates).
template <class F>
void for_chunks(std::size_t n, std::size_t work, const F& f) {
  const std::size_t chunks = (n + kChunk - 1) / kChunk;
#ifdef GRADCOMP_OPENMP
  if (work > kParallelMin) {
#pragma omp parallel for schedule(static)
    for (std::ptrdiff_t c = 0; c < static_cast<std::ptrdiff_t>(chunks); ++c) {
      const std::size_t b = static_cast<std::size_t>(c) * kChunk;
      f(b, std::min(n, b + kChunk));
    }
    return;
  }
#endif
  (void)work;
  for (std::size_t c = 0; c < chunks; ++c) f(c * kChunk, std::min(n, (c + 1) * kChunk));
}

void check_table(const SketchHash& h, std::size_t table_size, std::size_t n, std::string_view op) {
  if (table_size != h.cells()) {
    throw InvalidArgument(std::string(op) + ": table of " + std::to_string(table_size) +
                          " cells, sketch has " + std::to_string(h.cells()));
  }
  if (n > 0xFFFFFFFFu) {
    throw InvalidArgument(std::string(op) + ": " + std::to_string(n) +
                          " coordinates exceed 2^32-1");
  }
}

}  // namespace

SketchHash::SketchHash(std::uint64_t key, std::uint32_t rows, std::uint32_t cols)
    : key_(key), rows_(rows), cols_(cols) {
  if (rows < 1 || rows > kMaxSketchRows) {
    throw InvalidArgument("count sketch: rows " + std::to_string(rows) + " outside [1, " +
                          std::to_string(kMaxSketchRows) + "]");
  }
  if (cols == 0 || cols > 0x80000000u) {
    throw InvalidArgument("count sketch: cols " + std::to_string(cols) + " outside [1, 2^31]");
  }
  std::uint64_t s = splitmix64(key ^ 0x5EC7C4A1D5EEDull);
  for (std::uint32_t j = 0; j < rows; ++j) {
    s = splitmix64(s);
    const std::uint64_t a = s;
    s = splitmix64(s);
    row_[j] = Row{static_cast<std::uint32_t>(a), static_cast<std::uint32_t>(a >> 32), s};
  }
}

void sketch_accumulate_ref(const SketchHash& h, std::span<const float> x, float scale,
                           std::span<float> table) {
  check_table(h, table.size(), x.size(), "sketch accumulate");
  const std::uint32_t c = h.cols();
  for (std::uint32_t j = 0; j < h.rows(); ++j) {
    for (std::size_t i = 0; i < x.size(); ++i) {
      const auto ii = static_cast<std::uint32_t>(i);
      // s * (scale * x): a sign flip is exact, so this is the spec's s_j(i) * scale * x_i.
      table[std::size_t{j} * c + h.column(j, ii)] += h.sign(j, ii) * (scale * x[i]);
    }
  }
}

void sketch_accumulate(const SketchHash& h, std::span<const float> x, float scale,
                       std::span<float> table) {
  check_table(h, table.size(), x.size(), "sketch accumulate");
  const std::size_t n = x.size();
  const std::uint32_t c = h.cols();
  const std::uint32_t r = h.rows();
  const auto pairs = static_cast<std::ptrdiff_t>((r + 1) / 2);
  // Rows are independent; a row's cells receive their additions in ascending i, as in
  // the reference, whichever thread fills it. Rows go in pairs: x is read once per pair
  // (half the passes over memory), and the two rows' read-modify-writes are independent,
  // so twice as many cache misses are in flight. One thread per pair.
#ifdef GRADCOMP_OPENMP
#pragma omp parallel for schedule(static, 1) if (n * r > kParallelMin)
#endif
  for (std::ptrdiff_t pp = 0; pp < pairs; ++pp) {
    const auto j0 = static_cast<std::uint32_t>(2 * pp);
    const bool two = j0 + 1 < r;
    float* row0 = table.data() + std::size_t{j0} * c;
    float* row1 = two ? row0 + c : nullptr;
    alignas(64) std::uint32_t col[2][kBuildChunk];
    alignas(64) float val[2][kBuildChunk];
    for (std::size_t s = 0; s < n; s += kBuildChunk) {
      const std::size_t m = std::min(kBuildChunk, n - s);
      const float* xs = x.data() + s;
      const auto s32 = static_cast<std::uint32_t>(s);
      hash_chunk<false>(h.row(j0), c, s32, m, col[0], nullptr, xs, scale, val[0]);
      // The scatter: independent read-modify-writes that the CPU overlaps; equal columns
      // within a row are forwarded store to load, in order.
      if (two) {
        hash_chunk<false>(h.row(j0 + 1), c, s32, m, col[1], nullptr, xs, scale, val[1]);
        for (std::size_t t = 0; t < m; ++t) {
          row0[col[0][t]] += val[0][t];
          row1[col[1][t]] += val[1][t];
        }
      } else {
        for (std::size_t t = 0; t < m; ++t) row0[col[0][t]] += val[0][t];
      }
    }
  }
}

void sketch_accumulate_sparse(const SketchHash& h, std::span<const std::uint32_t> idx,
                              std::span<const float> vals, float scale, std::span<float> table) {
  check_table(h, table.size(), 0, "sketch accumulate");
  if (idx.size() != vals.size()) {
    throw InvalidArgument("sketch accumulate: " + std::to_string(idx.size()) + " indices, " +
                          std::to_string(vals.size()) + " values");
  }
  const std::uint32_t c = h.cols();
  for (std::uint32_t j = 0; j < h.rows(); ++j) {
    float* row = table.data() + std::size_t{j} * c;
    for (std::size_t t = 0; t < idx.size(); ++t) {
      row[h.column(j, idx[t])] += h.sign(j, idx[t]) * (scale * vals[t]);
    }
  }
}

float sketch_estimate(const SketchHash& h, std::span<const float> table, std::uint32_t i) {
  float v[kMaxSketchRows];
  const std::uint32_t c = h.cols();
  for (std::uint32_t j = 0; j < h.rows(); ++j) {
    v[j] = h.sign(j, i) * table[std::size_t{j} * c + h.column(j, i)];
  }
  return median_ref(v, h.rows());
}

void sketch_estimate_all_ref(const SketchHash& h, std::span<const float> table,
                             std::span<float> out) {
  check_table(h, table.size(), out.size(), "sketch estimate");
  for (std::size_t i = 0; i < out.size(); ++i) {
    out[i] = sketch_estimate(h, table, static_cast<std::uint32_t>(i));
  }
}

void sketch_estimate_all(const SketchHash& h, std::span<const float> table, std::span<float> out) {
  check_table(h, table.size(), out.size(), "sketch estimate");
  const std::uint32_t r = h.rows();
  const std::uint32_t c = h.cols();
  const MedianFn median = median_for(r);
  for_chunks(out.size(), out.size() * r, [&](std::size_t s, std::size_t e) {
    alignas(64) float v[kMaxSketchRows][kChunk];
    alignas(64) std::uint32_t col[kChunk];
    alignas(64) std::uint32_t sgn[kChunk];
    const std::size_t m = e - s;
    for (std::uint32_t j = 0; j < r; ++j) {
      hash_chunk<false>(h.row(j), c, static_cast<std::uint32_t>(s), m, col, sgn);
      const float* row = table.data() + std::size_t{j} * c;
      float* vj = v[j];
      for (std::size_t t = 0; t < m; ++t) vj[t] = flip(row[col[t]], sgn[t]);
    }
    median(v, m, out.data() + s);
  });
}

std::size_t sketch_top_k(const SketchHash& h, std::span<const float> table,
                         std::span<float> estimates, std::size_t k, std::span<std::uint32_t> out,
                         std::string_view op) {
  sketch_estimate_all(h, table, estimates);
  return select_topk_exact(estimates, k, out, op);
}

void sketch_zero_cells(const SketchHash& h, std::span<const std::uint32_t> idx,
                       std::span<float> table) {
  check_table(h, table.size(), 0, "sketch zero cells");
  const std::uint32_t c = h.cols();
  for (std::uint32_t j = 0; j < h.rows(); ++j) {
    float* row = table.data() + std::size_t{j} * c;
    for (std::uint32_t i : idx) row[h.column(j, i)] = 0.0f;
  }
}

std::uint32_t sketch_columns(std::size_t n, std::uint32_t rows, std::uint32_t cols,
                             double fraction) {
  if (cols > 0) return cols;
  const double want = std::ceil(fraction * static_cast<double>(n) / rows * (1.0 - 1e-12));
  if (!(want >= 1.0)) return 1;
  if (want >= 2147483648.0) return 0x80000000u;
  return static_cast<std::uint32_t>(want);
}

bool sketch_table_finite(std::span<const float> table, std::size_t* bad) {
  // One branch-free pass (vectorises); the slow search only runs on failure.
  std::uint32_t worst = 0;
  for (float v : table) worst = std::max(worst, abs_bits(v));
  if (worst < kNonFiniteBits) return true;
  std::size_t i = 0;
  while (abs_bits(table[i]) < kNonFiniteBits) ++i;
  if (bad != nullptr) *bad = i;
  return false;
}

}  // namespace gradcomp::kernels
