// The dense thin SVD behind thin_svd (detail/thin_svd.h): LAPACK's sgesdd (divide and
// conquer), with sgesvd (QR iteration) as the fallback when sgesdd reports a failure.
//
// Why LAPACK and not Eigen: Eigen 3.4.0's BDCSVD (Debian 12's libeigen3-dev) reads
// perm(-1) in perturbCol0 on some inputs (tests/data/atomo-bdcsvd-crash-80x1536.bin
// under -O3 -march=native on Zen 4), which killed ATOMO ranks with SIGSEGV; which
// rounding exposes it depends on the compiler flags and the CPU, so no input set can
// prove it safe. Measured against that, on this code's shapes (README, "ATOMO's SVD"):
// sgesdd single-threaded costs about what BDCSVD did on the k x cols matrices of the
// range finder, is 1.5x faster on full 1536 x 784 / 1536 x 1536 matrices, and is the most
// accurate of the candidates; Eigen's JacobiSVD is 2-3x slower on k x cols and 14x on
// full matrices; sgesvd is 3-10x slower on full ones; the eigen-decomposition of B B^T
// loses V's orthogonality on rank-deficient B. LAPACK comes from Debian's liblapack3
// (OpenBLAS provides liblapack.so.3 through alternatives).
//
// Nothing here throws: a failure is returned as text for the caller's error message.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace gradcomp::detail {

// A = U diag(sigma) V^T for the column-major rows x cols matrix A, k = min(rows, cols):
// sigma descending, U rows x k and Vt k x cols, both column-major (leading dimensions
// rows and k). The vectors are grow-only workspaces, reused across calls.
struct DenseSvd {
  std::size_t rows = 0, cols = 0, k = 0;
  std::vector<float> sigma;
  std::vector<float> u;
  std::vector<float> vt;
  // Workspaces: LAPACK's work arrays and a copy of A for the fallback (sgesdd
  // overwrites A).
  std::vector<float> work;
  std::vector<int> iwork;
  std::vector<float> a_copy;
};

// Decomposes a (rows * cols floats, column-major, overwritten) into out. Returns "" on
// success; otherwise why it failed, e.g. "LAPACK sgesdd info 3, then sgesvd info 2" or
// "LAPACK sgesdd returned a non-finite singular vector". A dimension or workspace that
// does not fit LAPACK's 32-bit integers is reported the same way.
std::string dense_svd(float* a, std::size_t rows, std::size_t cols, DenseSvd& out);

}  // namespace gradcomp::detail
