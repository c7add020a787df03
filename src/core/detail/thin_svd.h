// Thin singular value decomposition of a float matrix, for ATOMO's spectral atoms.
//
// M (rows x cols, row-major, as a PyTorch weight gradient is stored) = U diag(sigma) V^T
// with sigma descending, U (rows x k) and V (cols x k) with orthonormal columns.
//
// Gradients of fully connected layers are low-rank (rank <= batch size), and a full
// SVD of a 1536 x 1536 matrix costs seconds, so the default method tries a randomized
// range finder first and VERIFIES it (Halko, Martinsson & Tropp 2011, blocked "randQB"
// of Martinsson & Voronin 2016):
//   R <- M; repeat: Y = R * Omega (Omega: cols x b, fixed pseudo-random), orthonormalise Y
//   against the basis Q so far (two Gram-Schmidt passes, then Householder QR), append
//   it to Q, B_b = Q_b^T R, R <- R - Q_b B_b; until ||R||_F <= tolerance * ||M||_F.
// Then M = Q B + R with R negligible, and the SVD of the small k x cols matrix B,
// B = U_B S V^T, gives M's SVD: U = Q U_B. Nothing is approximated beyond the checked
// residual (1e-5 relative by default, the order of a float SVD's own rounding, ~2e-6). When the
// basis would grow past max_basis_fraction * min(rows, cols), the matrix is not low-rank: the
// full SVD runs instead (from the original M).
//
// Both SVDs (of B, and the full one) are LAPACK's sgesdd with sgesvd as its fallback
// (detail/lapack_svd.h says why not Eigen's BDCSVD, which crashed ATOMO ranks). When both
// fail or return non-finite values, thin_svd throws InvalidArgument naming the shape.
//
// Vectors (rows == 1 or cols == 1) have the closed form sigma = ||M||, one triplet.
// The matrix is scaled by a power of two near 1/||M||_F first (exact), so no float
// overflows or underflows inside; sigma is scaled back.
//
// Deterministic for a given machine and LAPACK: the same input gives the same bits (Eigen
// is kept single-threaded in this unit; Omega is a fixed function of its position;
// OpenBLAS's LAPACK picks its kernels by CPU, so another CPU may round differently).
// Buffers are thread-local and grow-only; Eigen's QR temporaries still allocate.
// Input must be finite (the caller checks).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace gradcomp::detail {

enum class SvdMethod : std::uint8_t { kAuto, kRandomized, kFull };

struct SvdOptions {
  SvdMethod method = SvdMethod::kAuto;
  // Accept the randomized basis when ||M - Q Q^T M||_F <= tolerance * ||M||_F. Float
  // sets the scale: the residual, computed in float, has a rounding floor of about
  // eps * sqrt(k) (measured 0.7e-6 at k = 80 to 1.4e-6 at k = 240 on 1536 x 1536), and
  // a full float SVD itself reproduces M only to ~1e-6..2e-6. A tolerance of 1e-6
  // would reject exact bases by their rounding noise and fall back to the full SVD.
  double tolerance = 1e-5;
  std::size_t block = 80;            // columns added to the basis per round
  double max_basis_fraction = 0.25;  // beyond this share of min(rows, cols): full SVD
  std::size_t full_below = 48;       // min(rows, cols) below this: full SVD directly
};

struct ThinSvd {
  std::size_t rows = 0, cols = 0;
  std::size_t rank = 0;                 // triplets computed (some sigma may be ~0)
  std::vector<float> sigma;             // rank values, descending, >= 0
  std::vector<float> u;                 // rows x rank, column-major: u_i = u[i*rows, (i+1)*rows)
  std::vector<float> v;                 // cols x rank, column-major: v_i = v[i*cols, (i+1)*cols)
  SvdMethod method = SvdMethod::kAuto;  // the method that produced it (kRandomized/kFull)
  std::size_t basis = 0;                // randomized: final basis size k; full: 0
  double residual = 0.0;                // randomized: ||R||_F / ||M||_F at acceptance; full: 0
};

// Decomposes m (rows * cols floats, row-major) into out (its vectors are reused).
void thin_svd(std::span<const float> m, std::size_t rows, std::size_t cols, ThinSvd& out,
              const SvdOptions& options = {});

}  // namespace gradcomp::detail
