// Count sketch kernels (Charikar, Chen, Farach-Colton 2002), shared by the `sketch`
// codec and the Sketched-SGD / FetchSGD reducer schemes (docs/algorithms/sketches.md).
//
// A sketch of n coordinates is an r x c table of fp32, row-major (row j occupies
// table[j*c, (j+1)*c)). Row j hashes coordinate i to a column b_j(i) in [0, c) and a
// sign s_j(i) in {-1, +1}:
//   sketch:    S[j, b_j(i)] += s_j(i) * scale * x_i      for every row j, coordinate i
//   estimate:  x^_i = median_j s_j(i) * S[j, b_j(i)]      (even r: mean of the middle two)
// The table is linear in x: S(a) + S(b) == S(a + b) exactly whenever the float sums are
// exact (integer-valued inputs), which is what lets ranks allreduce their sketches.
//
// Hash family: Dietzfelbinger's multiply-add-shift, per row a 64-bit multiplier a_j
// and a 64-bit offset b_j:
//   h_j(i) = ((a_j * i + b_j) mod 2^64) >> 32                        (32 bits)
// which is strongly universal (pairwise independent) for 32-bit keys and 32-bit
// outputs. The column is the multiply-shift range reduction (h * c) >> 32, the sign is
// h's lowest bit. All arithmetic is unsigned (wrap-around is the definition, no
// signed overflow); a_j, b_j come from splitmix64 of one 64-bit key, so every worker
// that derives the key from the same (seed, bucket[, step]) hashes identically.
//
// Each fast kernel has a scalar reference (the _ref functions): the tests compare them
// bit for bit. Fast kernels process the coordinates in chunks: a vectorisable pass
// computes the chunk's columns and signed values, then a scalar scatter (or gather)
// touches the table; every table cell still receives its additions in ascending i,
// so the fast and reference tables agree bit for bit, whatever the thread count.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace gradcomp::kernels {

// Rows are bounded so that per-row scratch arrays stay small (the median network is
// O(r^2) per coordinate).
inline constexpr std::uint32_t kMaxSketchRows = 15;

class SketchHash {
 public:
  // Throws InvalidArgument for rows outside [1, kMaxSketchRows] or cols == 0.
  SketchHash(std::uint64_t key, std::uint32_t rows, std::uint32_t cols);

  std::uint32_t rows() const { return rows_; }
  std::uint32_t cols() const { return cols_; }
  std::uint64_t key() const { return key_; }
  std::size_t cells() const { return std::size_t{rows_} * cols_; }

  // The 32-bit hash of coordinate i in row j.
  std::uint32_t hash(std::uint32_t j, std::uint32_t i) const {
    const Row& r = row_[j];
    const std::uint64_t t = std::uint64_t{r.a_lo} * i + r.b;  // wraps mod 2^64
    return static_cast<std::uint32_t>(t >> 32) + r.a_hi * i;  // wraps mod 2^32
  }
  std::uint32_t column(std::uint32_t j, std::uint32_t i) const {
    return column_of(hash(j, i), cols_);
  }
  // +1 or -1.
  float sign(std::uint32_t j, std::uint32_t i) const { return (hash(j, i) & 1u) ? -1.0f : 1.0f; }

  static std::uint32_t column_of(std::uint32_t h, std::uint32_t cols) {
    return static_cast<std::uint32_t>((std::uint64_t{h} * cols) >> 32);
  }

  struct Row {
    std::uint32_t a_lo = 0;
    std::uint32_t a_hi = 0;
    std::uint64_t b = 0;
  };
  const Row& row(std::uint32_t j) const { return row_[j]; }

 private:
  std::uint64_t key_;
  std::uint32_t rows_;
  std::uint32_t cols_;
  Row row_[kMaxSketchRows];
};

// table += sketch(scale * x). table.size() must be h.cells(); x.size() < 2^32.
// Values are added as-is (no finiteness check): callers that need finite tables check.
void sketch_accumulate(const SketchHash& h, std::span<const float> x, float scale,
                       std::span<float> table);
void sketch_accumulate_ref(const SketchHash& h, std::span<const float> x, float scale,
                           std::span<float> table);

// table += sketch of a sparse vector (x[idx[t]] = vals[t], idx ascending and < 2^32).
void sketch_accumulate_sparse(const SketchHash& h, std::span<const std::uint32_t> idx,
                              std::span<const float> vals, float scale, std::span<float> table);

// The estimate of coordinate i (median over rows; +0 for a zero median).
float sketch_estimate(const SketchHash& h, std::span<const float> table, std::uint32_t i);

// out[i] = estimate of coordinate i for i < out.size().
void sketch_estimate_all(const SketchHash& h, std::span<const float> table, std::span<float> out);
void sketch_estimate_all_ref(const SketchHash& h, std::span<const float> table,
                             std::span<float> out);

// Heavy hitters: writes every coordinate's estimate to `estimates` (n = its size), then
// the min(k, n) indices of the largest |estimate| (ties: lower index), ascending, to
// `out`; returns their count. Non-finite estimates throw InvalidArgument naming `op`.
// Uses scratch slots 1..3 (select.h); `estimates` and `out` belong to the caller.
std::size_t sketch_top_k(const SketchHash& h, std::span<const float> table,
                         std::span<float> estimates, std::size_t k, std::span<std::uint32_t> out,
                         std::string_view op);

// Sets every cell that coordinate i touches (S[j, b_j(i)], all rows) to zero, for each i
// in idx: FetchSGD's "zero the cells S(Delta) touches".
void sketch_zero_cells(const SketchHash& h, std::span<const std::uint32_t> idx,
                       std::span<float> table);

// Columns for n coordinates from a table budget: cols > 0 wins; otherwise
// ceil(fraction * n / rows), at least 1, at most 2^31.
std::uint32_t sketch_columns(std::size_t n, std::uint32_t rows, std::uint32_t cols,
                             double fraction);

// True when every cell is finite; otherwise *bad receives the first bad cell.
bool sketch_table_finite(std::span<const float> table, std::size_t* bad);

}  // namespace gradcomp::kernels
