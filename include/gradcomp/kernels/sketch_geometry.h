// The sketch geometry both count-sketch schemes take (k, rows, cols, table: declared in
// scheme_descriptions.cc), as the user gave it, and what it gives for one bucket. Shared
// by the schemes' reducers (src/dist) and their start-of-run check.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "gradcomp/kernels/select.h"
#include "gradcomp/registry.h"

namespace gradcomp::kernels {

struct SketchGeometry {
  std::int64_t k = 0;      // 0: from ratio
  double ratio = 0.01;     // k = ceil(ratio * n)
  std::uint32_t rows = 5;  // sketch rows
  std::uint32_t cols = 0;  // 0: from table
  double table = 0.025;    // r * c as a fraction of n
};

inline SketchGeometry sketch_geometry_from(const Params& p) {
  SketchGeometry g;
  g.k = p.get_int("k");
  g.ratio = p.get_float("ratio");
  g.rows = static_cast<std::uint32_t>(p.get_int("rows"));
  g.cols = static_cast<std::uint32_t>(p.get_int("cols"));
  g.table = p.get_float("table");
  return g;
}

// min(k, n) for a bucket of n (k >= 1 when n >= 1).
inline std::size_t sketch_k_for(const SketchGeometry& g, std::size_t n) {
  if (n == 0) return 0;
  if (g.k > 0) return std::min<std::size_t>(static_cast<std::size_t>(g.k), n);
  return count_for_fraction(g.ratio, n);
}

}  // namespace gradcomp::kernels
