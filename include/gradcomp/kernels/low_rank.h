// Low-rank kernels for PowerSGD (docs/algorithms/low-rank.md): the products of a gradient matrix
// with its rank-r factors, and the orthonormalisation of P. Torch-free, allocation-free.
//
// Layouts (r is small, 1..64; the MLP's matrices are 1536 x 784 and 1536 x 1536):
//   M   rows x cols, row-major: M(i, j) = m[i * cols + j]  (a bucket: its layer's first
//       dimension is `rows`);
//   P   rows x r, stored column after column: P(i, k) = p[k * rows + i];
//   Q   cols x r, stored column after column: Q(j, k) = q[k * cols + j].
// Columns are contiguous so that Gram-Schmidt and the per-column loops stream.
//
// Each kernel is one pass over M (for r <= 8; larger r re-reads each row of M from L1
// once per 8 columns). The summation order is fixed, written out below, and the same in
// the fast kernels and their scalar references (the *_ref functions), which the tests
// hold bit for bit. Every product-accumulate is an explicit fused multiply-add
// (std::fma), so no compiler contraction choice can change a result. Results do not
// depend on the OpenMP thread count (threads split rows or columns, never a sum).
//
//   project       P(i, k) = dot8(M(i, :), Q(:, k)), where dot8(x, y) keeps 8 partial sums
//                 s_l (l = 0..7), s_l = fma(x_j, y_j, s_l) over j = l, l+8, l+16, ...
//                 in ascending j from s_l = 0, combined ((s0+s1)+(s2+s3))+((s4+s5)+(s6+s7)).
//   back_project  Q(j, k) = fma-chain over i = 0, 1, ..., rows-1 of M(i, j) * P(i, k),
//                 from 0: q = fma(M(i, j), P(i, k), q).
//   reconstruct   out(i, j) = fma-chain over k = 0, 1, ..., r-1 of P(i, k) * Q(j, k), from 0.
//   residual      the same out, and e(i, j) = M(i, j) - out(i, j).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "gradcomp/rng.h"

namespace gradcomp::kernels {

// Shapes of one factorisation; the kernels check span sizes against them and throw
// InvalidArgument naming the kernel on a mismatch.
struct LowRankShape {
  std::size_t rows = 0;
  std::size_t cols = 0;
  std::size_t rank = 0;
  std::size_t m_size() const { return rows * cols; }
  std::size_t p_size() const { return rows * rank; }
  std::size_t q_size() const { return cols * rank; }
};

// PowerSGD's size rule (docs/algorithms/low-rank.md): a rows x cols matrix is factored at
// rank r only when its factors hold fewer than half its elements; otherwise it goes dense.
// The reducer and the cost model's traffic hook both ask this one function.
inline bool low_rank_pays(std::size_t rows, std::size_t cols, std::size_t rank) {
  return rows * cols > 2 * rank * (rows + cols);
}

// The factorisation PowerSGD gives bucket `id` (numel elements, `rows` rows of its matrix
// view, 0 for none) at `rank`: nullopt when the bucket goes dense (not compressible, no
// matrix view, or low_rank_pays says no). InvalidArgument when rows does not divide numel.
// The host scheme and the device reducer both plan their buckets with it.
std::optional<LowRankShape> powersgd_factorisation(std::uint32_t id, std::size_t numel,
                                                   std::size_t rows, bool compressible,
                                                   std::size_t rank);

// PowerSGD's check of the allreduced M Q of bucket `id` at `step`: InvalidArgument when it
// holds a non-finite value. Every rank holds the same sum, so every rank throws alike and
// no collective is left half-issued.
void check_projection_finite(std::span<const float> p, std::uint32_t id, std::uint64_t step);

// ---- fast kernels -------------------------------------------------------------------

// p = M q.
void lr_project(const LowRankShape& s, std::span<const float> m, std::span<const float> q,
                std::span<float> p);
// Error feedback's first half fused into the same pass: e <- g + e (elementwise, so e
// holds M afterwards), then p = e q. Equal to adding and then calling lr_project.
void lr_project_accumulate(const LowRankShape& s, std::span<const float> g, std::span<float> e,
                           std::span<const float> q, std::span<float> p);
// q = M^T p.
void lr_back_project(const LowRankShape& s, std::span<const float> m, std::span<const float> p,
                     std::span<float> q);
// out = p q^T.
void lr_reconstruct(const LowRankShape& s, std::span<const float> p, std::span<const float> q,
                    std::span<float> out);
// out = p q^T and, in the same pass, m_to_e <- m_to_e - out (m_to_e holds M on entry and
// the residual e = M - P Q^T on exit). out and m_to_e must not overlap.
void lr_reconstruct_residual(const LowRankShape& s, std::span<const float> p,
                             std::span<const float> q, std::span<float> m_to_e,
                             std::span<float> out);

// Orthonormalises the r columns of p (rows x r, column-major as above) in place by
// modified Gram-Schmidt, in column order, with one re-orthogonalisation pass ("twice is
// enough"): for k = 0..r-1, v = P(:, k); twice: v -= (P(:, j) . v) P(:, j) for every
// kept column j < k; then v /= |v|. Dot products and norms accumulate in double,
// sequentially in i.
//
// A column of norm below 0.5 is first scaled up by a power of two (exact; results for
// columns in float's normal range are unchanged), so tiny columns near FLT_MIN are
// orthonormalised as accurately as any other.
//
// Zero and near-zero columns. PyTorch divides by (|v| + epsilon); epsilon = 0 there by
// default, so a zero column becomes NaN. Here a column whose norm after projection is
// zero, not finite, or below kLowRankDropTolerance times its norm before projection (it
// lies in the span of the earlier columns up to rounding, so normalising it would blow
// rounding noise up into a direction that is not orthogonal to them) is set to exactly
// zero instead. A zero column of P contributes nothing to P Q^T (its Q column is
// M^T 0 = 0), so the reconstruction stays an orthogonal projection of M and error
// feedback keeps what was not sent. Returns the number of columns kept (nonzero).
inline constexpr double kLowRankDropTolerance = 1e-4;
std::size_t lr_orthonormalize(std::span<float> p, std::size_t rows, std::size_t rank);

// Standard normal values, out[t] a pure function of (rng, first + t): Box-Muller's
// cosine branch on the uniforms of counters 2(first + t) and 2(first + t) + 1, computed
// in double. PowerSGD draws its shared initial Q with it (RngScope::kShared).
// Throws InvalidArgument when first + out.size() > 2^31 (the counters are 32-bit).
void lr_fill_normal(const CounterRng& rng, std::uint32_t first, std::span<float> out);

// ---- scalar references (one element at a time, the orders above) --------------------

void lr_project_ref(const LowRankShape& s, std::span<const float> m, std::span<const float> q,
                    std::span<float> p);
void lr_back_project_ref(const LowRankShape& s, std::span<const float> m, std::span<const float> p,
                         std::span<float> q);
void lr_reconstruct_ref(const LowRankShape& s, std::span<const float> p, std::span<const float> q,
                        std::span<float> out);

}  // namespace gradcomp::kernels
