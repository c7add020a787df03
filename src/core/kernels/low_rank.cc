#include "gradcomp/kernels/low_rank.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>

#include "gradcomp/error.h"

namespace gradcomp::kernels {

std::optional<LowRankShape> powersgd_factorisation(std::uint32_t id, std::size_t numel,
                                                   std::size_t rows, bool compressible,
                                                   std::size_t rank) {
  if (rows > 0 && numel % rows != 0) {
    throw InvalidArgument("powersgd: bucket " + std::to_string(id) + " of " +
                          std::to_string(numel) + " elements is not a matrix of " +
                          std::to_string(rows) + " rows");
  }
  if (!compressible || rows == 0) return std::nullopt;
  const std::size_t cols = numel / rows;
  if (!low_rank_pays(rows, cols, rank)) return std::nullopt;
  return LowRankShape{rows, cols, rank};
}

void check_projection_finite(std::span<const float> p, std::uint32_t id, std::uint64_t step) {
  for (float v : p) {
    if (!std::isfinite(v)) {
      throw InvalidArgument("powersgd: bucket " + std::to_string(id) + " step " +
                            std::to_string(step) +
                            ": non-finite value in M Q (the gradient is not finite)");
    }
  }
}

namespace {

// Columns of Q (or P) handled together: 8 accumulators of 8 lanes fit AVX2's 16
// registers with room for the loads.
constexpr std::size_t kBlock = 8;
constexpr std::size_t kLanes = 8;  // dot8's partial sums
// M elements; below: one thread (only OpenMP pragmas read it in some builds).
[[maybe_unused]] constexpr std::size_t kParallelMin = std::size_t{1} << 16;
constexpr std::size_t kColumnChunk = 512;  // back_project: columns per parallel task

void check_size(std::string_view op, std::string_view what, std::size_t got, std::size_t want) {
  if (got != want) {
    throw InvalidArgument(std::string(op) + ": " + std::string(what) + " has " +
                          std::to_string(got) + " elements, expected " + std::to_string(want));
  }
}

void check_shape(std::string_view op, const LowRankShape& s) {
  if (s.rank == 0) throw InvalidArgument(std::string(op) + ": rank 0");
  // The sizes below must not wrap; rows, cols and rank come from bucket shapes.
  constexpr std::size_t kMax = std::size_t{1} << 40;
  if (s.rows > kMax || s.cols > kMax || s.rank > 4096 || s.rows * s.cols > kMax) {
    throw InvalidArgument(std::string(op) + ": shape " + std::to_string(s.rows) + " x " +
                          std::to_string(s.cols) + " rank " + std::to_string(s.rank) +
                          " too large");
  }
}

// Calls f(begin, end) over [0, n) in chunks of `chunk`, in parallel when the matrix is
// large. Each index is handled by exactly one call, so results do not depend on threads.
template <class F>
void for_ranges(std::size_t n, std::size_t chunk, std::size_t work, const F& f) {
#ifdef GRADCOMP_OPENMP
  if (work > kParallelMin && n > chunk) {
    const auto chunks = static_cast<std::ptrdiff_t>((n + chunk - 1) / chunk);
#pragma omp parallel for schedule(static)
    for (std::ptrdiff_t c = 0; c < chunks; ++c) {
      const std::size_t b = static_cast<std::size_t>(c) * chunk;
      f(b, std::min(n, b + chunk));
    }
    return;
  }
#endif
  (void)chunk;
  (void)work;
  f(std::size_t{0}, n);
}

inline float combine8(const float* s) {
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

// out[k] = dot8(row, q + k * cols) for k < R. The k-loop inside the 8-element step reads
// `row` once for all R columns; the l-loops become one vector FMA each.
template <std::size_t R>
void dot8_block(const float* __restrict row, const float* __restrict q, std::size_t cols,
                float* __restrict out) {
  float acc[R][kLanes] = {};
  const std::size_t full = cols / kLanes * kLanes;
  for (std::size_t j = 0; j < full; j += kLanes) {
    for (std::size_t k = 0; k < R; ++k) {
      const float* qk = q + k * cols + j;
      for (std::size_t l = 0; l < kLanes; ++l) acc[k][l] = std::fma(row[j + l], qk[l], acc[k][l]);
    }
  }
  for (std::size_t j = full; j < cols; ++j) {
    for (std::size_t k = 0; k < R; ++k) {
      acc[k][j - full] = std::fma(row[j], q[k * cols + j], acc[k][j - full]);
    }
  }
  for (std::size_t k = 0; k < R; ++k) out[k] = combine8(acc[k]);
}

void dot8_any(const float* row, const float* q, std::size_t cols, std::size_t r, float* out) {
  switch (r) {
    case 1:
      return dot8_block<1>(row, q, cols, out);
    case 2:
      return dot8_block<2>(row, q, cols, out);
    case 3:
      return dot8_block<3>(row, q, cols, out);
    case 4:
      return dot8_block<4>(row, q, cols, out);
    case 5:
      return dot8_block<5>(row, q, cols, out);
    case 6:
      return dot8_block<6>(row, q, cols, out);
    case 7:
      return dot8_block<7>(row, q, cols, out);
    default:
      return dot8_block<8>(row, q, cols, out);
  }
}

// P rows [i0, i1). With g: the row of e becomes g + e first (it is then in L1).
void project_rows(const LowRankShape& s, const float* m, const float* g, float* e, const float* q,
                  float* p, std::size_t i0, std::size_t i1) {
  const std::size_t cols = s.cols;
  float out[kBlock];
  for (std::size_t i = i0; i < i1; ++i) {
    const float* row;
    if (g != nullptr) {
      float* __restrict er = e + i * cols;
      const float* __restrict gr = g + i * cols;
      for (std::size_t j = 0; j < cols; ++j) er[j] = gr[j] + er[j];
      row = er;
    } else {
      row = m + i * cols;
    }
    for (std::size_t k0 = 0; k0 < s.rank; k0 += kBlock) {
      const std::size_t kb = std::min(kBlock, s.rank - k0);
      dot8_any(row, q + k0 * cols, cols, kb, out);
      for (std::size_t k = 0; k < kb; ++k) p[(k0 + k) * s.rows + i] = out[k];
    }
  }
}

// Q rows [j0, j1) (columns of M), all R = r columns of Q, four rows of M at a time: each
// Q element is still one fma chain in ascending i.
void back_project_cols(const LowRankShape& s, const float* m, const float* p, float* q,
                       std::size_t j0, std::size_t j1) {
  const std::size_t rows = s.rows;
  const std::size_t cols = s.cols;
  for (std::size_t k = 0; k < s.rank; ++k) std::fill(q + k * cols + j0, q + k * cols + j1, 0.0f);
  std::size_t i = 0;
  for (; i + 4 <= rows; i += 4) {
    const float* __restrict m0 = m + i * cols;
    const float* __restrict m1 = m0 + cols;
    const float* __restrict m2 = m1 + cols;
    const float* __restrict m3 = m2 + cols;
    for (std::size_t k = 0; k < s.rank; ++k) {
      const float* pk = p + k * rows + i;
      const float p0 = pk[0], p1 = pk[1], p2 = pk[2], p3 = pk[3];
      float* __restrict qk = q + k * cols;
      for (std::size_t j = j0; j < j1; ++j) {
        qk[j] = std::fma(m3[j], p3,
                         std::fma(m2[j], p2, std::fma(m1[j], p1, std::fma(m0[j], p0, qk[j]))));
      }
    }
  }
  for (; i < rows; ++i) {
    const float* __restrict m0 = m + i * cols;
    for (std::size_t k = 0; k < s.rank; ++k) {
      const float p0 = p[k * rows + i];
      float* __restrict qk = q + k * cols;
      for (std::size_t j = j0; j < j1; ++j) qk[j] = std::fma(m0[j], p0, qk[j]);
    }
  }
}

// out rows [i0, i1) for R columns starting at k0; `first` starts the chains at 0, else
// they continue from out. With e (last block only): e -= out.
template <std::size_t R>
void reconstruct_block(const float* __restrict pk, std::size_t rows, const float* q,
                       std::size_t cols, bool first, float* __restrict out_row,
                       float* __restrict e_row) {
  float pr[R];
  for (std::size_t k = 0; k < R; ++k) pr[k] = pk[k * rows];
  const float* __restrict qk[R];
  for (std::size_t k = 0; k < R; ++k) qk[k] = q + k * cols;
  for (std::size_t j = 0; j < cols; ++j) {
    float o = first ? 0.0f : out_row[j];
    for (std::size_t k = 0; k < R; ++k) o = std::fma(pr[k], qk[k][j], o);
    out_row[j] = o;
    if (e_row != nullptr) e_row[j] = e_row[j] - o;
  }
}

template <std::size_t R>
void reconstruct_block_dispatch(const float* pk, std::size_t rows, const float* q, std::size_t cols,
                                bool first, float* out_row, float* e_row) {
  // Two instantiations so that the common case (no residual) has no branch inside.
  if (e_row != nullptr) {
    reconstruct_block<R>(pk, rows, q, cols, first, out_row, e_row);
  } else {
    reconstruct_block<R>(pk, rows, q, cols, first, out_row, nullptr);
  }
}

void reconstruct_rows(const LowRankShape& s, const float* p, const float* q, float* out, float* e,
                      std::size_t i0, std::size_t i1) {
  const std::size_t cols = s.cols;
  for (std::size_t i = i0; i < i1; ++i) {
    float* out_row = out + i * cols;
    for (std::size_t k0 = 0; k0 < s.rank; k0 += kBlock) {
      const std::size_t kb = std::min(kBlock, s.rank - k0);
      const bool last = k0 + kb == s.rank;
      float* e_row = (last && e != nullptr) ? e + i * cols : nullptr;
      const float* pk = p + k0 * s.rows + i;
      const float* qk = q + k0 * cols;
      const bool first = k0 == 0;
      switch (kb) {
        case 1:
          reconstruct_block_dispatch<1>(pk, s.rows, qk, cols, first, out_row, e_row);
          break;
        case 2:
          reconstruct_block_dispatch<2>(pk, s.rows, qk, cols, first, out_row, e_row);
          break;
        case 3:
          reconstruct_block_dispatch<3>(pk, s.rows, qk, cols, first, out_row, e_row);
          break;
        case 4:
          reconstruct_block_dispatch<4>(pk, s.rows, qk, cols, first, out_row, e_row);
          break;
        case 5:
          reconstruct_block_dispatch<5>(pk, s.rows, qk, cols, first, out_row, e_row);
          break;
        case 6:
          reconstruct_block_dispatch<6>(pk, s.rows, qk, cols, first, out_row, e_row);
          break;
        case 7:
          reconstruct_block_dispatch<7>(pk, s.rows, qk, cols, first, out_row, e_row);
          break;
        default:
          reconstruct_block_dispatch<8>(pk, s.rows, qk, cols, first, out_row, e_row);
          break;
      }
    }
  }
}

// Rows per parallel task: about 64 Ki elements of M.
std::size_t row_chunk(const LowRankShape& s) {
  return std::max<std::size_t>(1, (std::size_t{1} << 16) / std::max<std::size_t>(1, s.cols));
}

}  // namespace

// ---- fast kernels -------------------------------------------------------------------

void lr_project(const LowRankShape& s, std::span<const float> m, std::span<const float> q,
                std::span<float> p) {
  constexpr std::string_view op = "lr_project";
  check_shape(op, s);
  check_size(op, "M", m.size(), s.m_size());
  check_size(op, "Q", q.size(), s.q_size());
  check_size(op, "P", p.size(), s.p_size());
  for_ranges(s.rows, row_chunk(s), s.m_size(), [&](std::size_t i0, std::size_t i1) {
    project_rows(s, m.data(), nullptr, nullptr, q.data(), p.data(), i0, i1);
  });
}

void lr_project_accumulate(const LowRankShape& s, std::span<const float> g, std::span<float> e,
                           std::span<const float> q, std::span<float> p) {
  constexpr std::string_view op = "lr_project_accumulate";
  check_shape(op, s);
  check_size(op, "g", g.size(), s.m_size());
  check_size(op, "e", e.size(), s.m_size());
  check_size(op, "Q", q.size(), s.q_size());
  check_size(op, "P", p.size(), s.p_size());
  for_ranges(s.rows, row_chunk(s), s.m_size(), [&](std::size_t i0, std::size_t i1) {
    project_rows(s, nullptr, g.data(), e.data(), q.data(), p.data(), i0, i1);
  });
}

void lr_back_project(const LowRankShape& s, std::span<const float> m, std::span<const float> p,
                     std::span<float> q) {
  constexpr std::string_view op = "lr_back_project";
  check_shape(op, s);
  check_size(op, "M", m.size(), s.m_size());
  check_size(op, "P", p.size(), s.p_size());
  check_size(op, "Q", q.size(), s.q_size());
  for_ranges(s.cols, kColumnChunk, s.m_size(), [&](std::size_t j0, std::size_t j1) {
    back_project_cols(s, m.data(), p.data(), q.data(), j0, j1);
  });
}

void lr_reconstruct(const LowRankShape& s, std::span<const float> p, std::span<const float> q,
                    std::span<float> out) {
  constexpr std::string_view op = "lr_reconstruct";
  check_shape(op, s);
  check_size(op, "P", p.size(), s.p_size());
  check_size(op, "Q", q.size(), s.q_size());
  check_size(op, "out", out.size(), s.m_size());
  for_ranges(s.rows, row_chunk(s), s.m_size(), [&](std::size_t i0, std::size_t i1) {
    reconstruct_rows(s, p.data(), q.data(), out.data(), nullptr, i0, i1);
  });
}

void lr_reconstruct_residual(const LowRankShape& s, std::span<const float> p,
                             std::span<const float> q, std::span<float> m_to_e,
                             std::span<float> out) {
  constexpr std::string_view op = "lr_reconstruct_residual";
  check_shape(op, s);
  check_size(op, "P", p.size(), s.p_size());
  check_size(op, "Q", q.size(), s.q_size());
  check_size(op, "e", m_to_e.size(), s.m_size());
  check_size(op, "out", out.size(), s.m_size());
  if (!out.empty() && out.data() < m_to_e.data() + m_to_e.size() &&
      m_to_e.data() < out.data() + out.size()) {
    throw InvalidArgument(std::string(op) + ": out overlaps e");
  }
  for_ranges(s.rows, row_chunk(s), s.m_size(), [&](std::size_t i0, std::size_t i1) {
    reconstruct_rows(s, p.data(), q.data(), out.data(), m_to_e.data(), i0, i1);
  });
}

std::size_t lr_orthonormalize(std::span<float> p, std::size_t rows, std::size_t rank) {
  check_size("lr_orthonormalize", "P", p.size(), rows * rank);
  std::size_t kept = 0;
  for (std::size_t k = 0; k < rank; ++k) {
    float* v = p.data() + k * rows;
    double n0 = 0;
    for (std::size_t i = 0; i < rows; ++i) n0 += double{v[i]} * double{v[i]};
    n0 = std::sqrt(n0);
    if (n0 > 0 && n0 < 0.5) {
      // Bring a small column up to norm [0.5, 1) by a power of two first: exact, and for
      // columns in float's normal range nothing below changes by a bit. Near FLT_MIN the
      // subtractions below would round to the subnormal grid, leaving kept columns up to
      // 1e-4 away from orthogonal (found by the factorization stress test).
      int exponent = 0;
      std::frexp(n0, &exponent);
      const double up = std::ldexp(1.0, -exponent);
      for (std::size_t i = 0; i < rows; ++i) v[i] = static_cast<float>(double{v[i]} * up);
      n0 *= up;
    }
    double n = 0;
    if (n0 > 0 && std::isfinite(n0)) {
      // Zero (dropped) earlier columns project nothing away: no need to skip them.
      for (int pass = 0; pass < 2; ++pass) {
        for (std::size_t c = 0; c < k; ++c) {
          const float* u = p.data() + c * rows;
          double d = 0;
          for (std::size_t i = 0; i < rows; ++i) d += double{u[i]} * double{v[i]};
          for (std::size_t i = 0; i < rows; ++i) {
            v[i] = static_cast<float>(double{v[i]} - d * double{u[i]});
          }
        }
      }
      for (std::size_t i = 0; i < rows; ++i) n += double{v[i]} * double{v[i]};
      n = std::sqrt(n);
    }
    if (n > kLowRankDropTolerance * n0 && std::isfinite(n)) {
      const double inv = 1.0 / n;
      for (std::size_t i = 0; i < rows; ++i) v[i] = static_cast<float>(double{v[i]} * inv);
      ++kept;
    } else {
      std::fill(v, v + rows, 0.0f);
    }
  }
  return kept;
}

void lr_fill_normal(const CounterRng& rng, std::uint32_t first, std::span<float> out) {
  if (out.size() > (std::size_t{1} << 31) - first) {
    throw InvalidArgument("lr_fill_normal: " + std::to_string(out.size()) +
                          " values from counter " + std::to_string(first) + " exceed 2^31");
  }
  constexpr double kTwoPi = 6.283185307179586476925286766559;
  for (std::size_t t = 0; t < out.size(); ++t) {
    const auto c = static_cast<std::uint32_t>(2 * (first + t));
    // 1 - u is in (0, 1]: the logarithm is finite.
    const double u1 = 1.0 - double{rng.uniform(c)};
    const double u2 = double{rng.uniform(c + 1)};
    out[t] = static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(kTwoPi * u2));
  }
}

// ---- scalar references ----------------------------------------------------------------

void lr_project_ref(const LowRankShape& s, std::span<const float> m, std::span<const float> q,
                    std::span<float> p) {
  constexpr std::string_view op = "lr_project_ref";
  check_shape(op, s);
  check_size(op, "M", m.size(), s.m_size());
  check_size(op, "Q", q.size(), s.q_size());
  check_size(op, "P", p.size(), s.p_size());
  for (std::size_t i = 0; i < s.rows; ++i) {
    for (std::size_t k = 0; k < s.rank; ++k) {
      float part[kLanes] = {};
      for (std::size_t j = 0; j < s.cols; ++j) {
        part[j % kLanes] = std::fma(m[i * s.cols + j], q[k * s.cols + j], part[j % kLanes]);
      }
      p[k * s.rows + i] = combine8(part);
    }
  }
}

void lr_back_project_ref(const LowRankShape& s, std::span<const float> m, std::span<const float> p,
                         std::span<float> q) {
  constexpr std::string_view op = "lr_back_project_ref";
  check_shape(op, s);
  check_size(op, "M", m.size(), s.m_size());
  check_size(op, "P", p.size(), s.p_size());
  check_size(op, "Q", q.size(), s.q_size());
  for (std::size_t k = 0; k < s.rank; ++k) {
    for (std::size_t j = 0; j < s.cols; ++j) {
      float acc = 0.0f;
      for (std::size_t i = 0; i < s.rows; ++i) {
        acc = std::fma(m[i * s.cols + j], p[k * s.rows + i], acc);
      }
      q[k * s.cols + j] = acc;
    }
  }
}

void lr_reconstruct_ref(const LowRankShape& s, std::span<const float> p, std::span<const float> q,
                        std::span<float> out) {
  constexpr std::string_view op = "lr_reconstruct_ref";
  check_shape(op, s);
  check_size(op, "P", p.size(), s.p_size());
  check_size(op, "Q", q.size(), s.q_size());
  check_size(op, "out", out.size(), s.m_size());
  for (std::size_t i = 0; i < s.rows; ++i) {
    for (std::size_t j = 0; j < s.cols; ++j) {
      float acc = 0.0f;
      for (std::size_t k = 0; k < s.rank; ++k) {
        acc = std::fma(p[k * s.rows + i], q[k * s.cols + j], acc);
      }
      out[i * s.cols + j] = acc;
    }
  }
}

}  // namespace gradcomp::kernels
