#include "detail/lapack_svd.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>

// LAPACK's Fortran entry points (LP64: INTEGER is int). gfortran passes each CHARACTER
// argument's length as a trailing hidden size_t; passing it keeps the calls correct
// with every LAPACK built by gfortran >= 8 (Debian's reference LAPACK and OpenBLAS).
extern "C" {
void sgesdd_(const char* jobz, const int* m, const int* n, float* a, const int* lda, float* s,
             float* u, const int* ldu, float* vt, const int* ldvt, float* work, const int* lwork,
             int* iwork, int* info, std::size_t jobz_len);
void sgesvd_(const char* jobu, const char* jobvt, const int* m, const int* n, float* a,
             const int* lda, float* s, float* u, const int* ldu, float* vt, const int* ldvt,
             float* work, const int* lwork, int* info, std::size_t jobu_len, std::size_t jobvt_len);
}

namespace gradcomp::detail {

namespace {

bool all_finite(const std::vector<float>& x, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    if (!std::isfinite(x[i])) return false;
  }
  return true;
}

// LAPACK's workspace query answers in a float; round it up (a large size may not be
// exact in float) and reject what does not fit an int.
bool workspace_size(float query, int& lwork) {
  const double want = std::ceil(double(query) * (1.0 + 1e-6));
  if (!(want >= 1.0) || want > double(INT_MAX)) return false;
  lwork = static_cast<int>(want);
  return true;
}

int run_gesdd(float* a, int m, int n, DenseSvd& out, bool& workspace_ok) {
  const int k = std::min(m, n);
  int info = 0, lwork = -1;
  float query = 0.0f;
  sgesdd_("S", &m, &n, a, &m, out.sigma.data(), out.u.data(), &m, out.vt.data(), &k, &query, &lwork,
          out.iwork.data(), &info, 1);
  if (info != 0) return info;
  workspace_ok = workspace_size(query, lwork);
  if (!workspace_ok) return 0;
  if (out.work.size() < std::size_t(lwork)) out.work.resize(std::size_t(lwork));
  sgesdd_("S", &m, &n, a, &m, out.sigma.data(), out.u.data(), &m, out.vt.data(), &k,
          out.work.data(), &lwork, out.iwork.data(), &info, 1);
  return info;
}

int run_gesvd(float* a, int m, int n, DenseSvd& out, bool& workspace_ok) {
  const int k = std::min(m, n);
  int info = 0, lwork = -1;
  float query = 0.0f;
  sgesvd_("S", "S", &m, &n, a, &m, out.sigma.data(), out.u.data(), &m, out.vt.data(), &k, &query,
          &lwork, &info, 1, 1);
  if (info != 0) return info;
  workspace_ok = workspace_size(query, lwork);
  if (!workspace_ok) return 0;
  if (out.work.size() < std::size_t(lwork)) out.work.resize(std::size_t(lwork));
  sgesvd_("S", "S", &m, &n, a, &m, out.sigma.data(), out.u.data(), &m, out.vt.data(), &k,
          out.work.data(), &lwork, &info, 1, 1);
  return info;
}

bool finite_result(const DenseSvd& out) {
  return all_finite(out.sigma, out.k) && all_finite(out.u, out.rows * out.k) &&
         all_finite(out.vt, out.k * out.cols);
}

}  // namespace

std::string dense_svd(float* a, std::size_t rows, std::size_t cols, DenseSvd& out) {
  out.rows = rows;
  out.cols = cols;
  out.k = std::min(rows, cols);
  if (out.k == 0) return "";
  // LAPACK indexes with int: every dimension, and the largest array (its elements
  // counted in int by some implementations), must stay below 2^31.
  const std::size_t largest = std::max({rows * cols, rows * out.k, out.k * cols});
  if (rows > std::size_t(INT_MAX) || cols > std::size_t(INT_MAX) ||
      largest > std::size_t(INT_MAX)) {
    return "the matrix is too large for LAPACK's 32-bit indices";
  }
  const int m = static_cast<int>(rows), n = static_cast<int>(cols);
  if (out.sigma.size() < out.k) out.sigma.resize(out.k);
  if (out.u.size() < rows * out.k) out.u.resize(rows * out.k);
  if (out.vt.size() < out.k * cols) out.vt.resize(out.k * cols);
  if (out.iwork.size() < 8 * out.k) out.iwork.resize(8 * out.k);
  if (out.a_copy.size() < rows * cols) out.a_copy.resize(rows * cols);
  std::memcpy(out.a_copy.data(), a, sizeof(float) * rows * cols);

  bool workspace_ok = true;
  const int gesdd_info = run_gesdd(a, m, n, out, workspace_ok);
  if (!workspace_ok) return "LAPACK sgesdd asked for a workspace larger than 2^31 floats";
  if (gesdd_info == 0) {
    if (finite_result(out)) return "";
  } else if (gesdd_info < 0) {
    // An illegal argument is this file's bug, not the data's: no fallback hides it.
    return "LAPACK sgesdd rejected argument " + std::to_string(-gesdd_info);
  }
  // sgesdd did not converge (info > 0) or produced non-finite output: QR iteration is
  // the slower, independent algorithm LAPACK recommends trying next.
  const std::string first = gesdd_info > 0
                                ? "LAPACK sgesdd info " + std::to_string(gesdd_info)
                                : std::string("LAPACK sgesdd returned non-finite values");
  const int gesvd_info = run_gesvd(out.a_copy.data(), m, n, out, workspace_ok);
  if (!workspace_ok) return first + ", then sgesvd asked for a workspace larger than 2^31 floats";
  if (gesvd_info != 0) return first + ", then sgesvd info " + std::to_string(gesvd_info);
  if (!finite_result(out)) return first + ", then sgesvd returned non-finite values";
  return "";
}

}  // namespace gradcomp::detail
