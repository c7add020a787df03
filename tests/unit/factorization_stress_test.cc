// Numerical stress test of every factorization the codecs run on gradients, checked
// against double precision: ATOMO's thin SVD (detail/thin_svd.h: the randomized range
// finder and LAPACK's SVD), ATOMO's sampling probabilities on the spectra it produces
// (detail/atomo_probabilities.h), and PowerSGD's Gram-Schmidt (detail/low_rank.h).
//
// Over 10,000 matrices of the built-in models' layer shapes and odd ones, ranks 1..160,
// in every tests/support/stress_matrices.h pattern, plus the matrix on which Eigen
// 3.4.0's BDCSVD read perm(-1) and killed ATOMO ranks (tests/data). A decomposition
// with an out-of-range read fails here under scripts/test.sh's ASan + UBSan build,
// which keeps assertions (GRADCOMP_ASSERTIONS) so that Eigen's range checks fire too.
//
// Tolerances, from float's eps = 2^-23 ~ 1.2e-7 and the range finder's acceptance
// residual (SvdOptions::tolerance = 1e-5): reconstruction ||M - U S V^T|| / ||M||
// <= 1e-5 + kRoundoff, |U^T U - I| and |V^T V - I| elementwise <= kRoundoff, singular
// values within 1e-5 * sigma_1 + kRoundoff * sigma_1 of a double Jacobi SVD.
#include <gtest/gtest.h>

#include <Eigen/Core>
#include <Eigen/SVD>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "detail/atomo_probabilities.h"
#include "detail/lapack_svd.h"
#include "detail/thin_svd.h"
#include "gradcomp/kernels/low_rank.h"
#include "gradcomp/registry.h"
#include "support/stress_matrices.h"

#ifndef GRADCOMP_TEST_DATA_DIR
#error "GRADCOMP_TEST_DATA_DIR must name tests/data (tests/CMakeLists.txt)"
#endif

namespace gradcomp::detail {
namespace {

using kernels::kLowRankDropTolerance;
using kernels::lr_orthonormalize;
using test::StressMatrix;
using test::StressPattern;
using MatD = Eigen::MatrixXd;

// A float SVD's rounding error, relative, for the dimensions used here (measured up to
// ~1e-5 on 1536 x 1536 orthogonality; 64 eps * sqrt(1536) ~ 3e-4 bounds it loosely).
double roundoff(std::size_t rows, std::size_t cols) {
  return 64.0 * 0x1.0p-23 * std::sqrt(double(std::max(rows, cols)));
}

MatD to_double(const StressMatrix& s) {
  MatD m(static_cast<Eigen::Index>(s.rows), static_cast<Eigen::Index>(s.cols));
  for (std::size_t i = 0; i < s.rows; ++i) {
    for (std::size_t j = 0; j < s.cols; ++j) {
      m(Eigen::Index(i), Eigen::Index(j)) = s.m[i * s.cols + j];
    }
  }
  return m;
}

MatD columns(const std::vector<float>& x, std::size_t n, std::size_t k) {
  MatD m(static_cast<Eigen::Index>(n), static_cast<Eigen::Index>(k));
  for (std::size_t c = 0; c < k; ++c) {
    for (std::size_t i = 0; i < n; ++i) m(Eigen::Index(i), Eigen::Index(c)) = x[c * n + i];
  }
  return m;
}

double max_abs_off_identity(const MatD& q) {
  const auto k = q.cols();
  return k == 0 ? 0.0 : (q.transpose() * q - MatD::Identity(k, k)).cwiseAbs().maxCoeff();
}

// thin_svd of s, checked against double precision; returns the singular values.
std::vector<float> check_thin_svd(const StressMatrix& s, bool with_reference) {
  ThinSvd svd;
  thin_svd(s.m, s.rows, s.cols, svd);
  const std::string what = s.describe();
  const MatD m = to_double(s);
  const double norm = m.norm();
  const std::size_t k = svd.rank;
  const double tol = roundoff(s.rows, s.cols);
  EXPECT_LE(k, std::min(s.rows, s.cols)) << what;
  if (norm == 0.0) {
    EXPECT_EQ(k, 0u) << what;
    return {};
  }
  EXPECT_GE(k, 1u) << what;
  for (std::size_t i = 0; i < k; ++i) {
    EXPECT_TRUE(std::isfinite(svd.sigma[i]) && svd.sigma[i] >= 0.0f) << what << " sigma " << i;
    if (i > 0) {
      EXPECT_LE(svd.sigma[i], svd.sigma[i - 1]) << what << " sigma " << i;
    }
  }
  const MatD u = columns(svd.u, s.rows, k), v = columns(svd.v, s.cols, k);
  Eigen::VectorXd sigma(static_cast<Eigen::Index>(k));
  for (std::size_t i = 0; i < k; ++i) sigma(Eigen::Index(i)) = svd.sigma[i];
  EXPECT_TRUE(u.allFinite() && v.allFinite()) << what;
  const double recon = (m - u * sigma.asDiagonal() * v.transpose()).norm() / norm;
  EXPECT_LE(recon, 1e-5 + tol) << what << " (method " << int(svd.method) << ")";
  EXPECT_LE(max_abs_off_identity(u), tol) << what << ": U^T U != I";
  EXPECT_LE(max_abs_off_identity(v), tol) << what << ": V^T V != I";
  if (with_reference) {
    const Eigen::JacobiSVD<MatD> ref(m);
    const Eigen::VectorXd& rs = ref.singularValues();
    const double bound = (1e-5 + tol) * rs(0);
    for (Eigen::Index i = 0; i < rs.size(); ++i) {
      // Triplets the range finder did not keep are below its acceptance residual.
      const double got = i < Eigen::Index(k) ? sigma(i) : 0.0;
      EXPECT_NEAR(got, rs(i), bound) << what << " sigma " << i;
    }
  }
  return svd.sigma;
}

// The water-filling on a spectrum against the textbook reference.
void check_probabilities(std::span<const float> sigma, double budget, const std::string& what) {
  if (sigma.empty()) return;
  const AtomoCut cut = atomo_cut(sigma, budget);
  std::vector<double> p(sigma.size());
  atomo_probabilities(sigma, cut, p);
  const std::vector<double> ref = atomo_probabilities_reference(sigma, budget);
  double sum = 0.0;
  std::size_t nonzero = 0;
  for (std::size_t i = 0; i < p.size(); ++i) {
    ASSERT_TRUE(p[i] >= 0.0 && p[i] <= 1.0) << what << " p[" << i << "] = " << p[i];
    ASSERT_NEAR(p[i], ref[i], 1e-12 * std::max(1.0, ref[i])) << what << " p[" << i << "]";
    sum += p[i];
    nonzero += sigma[i] != 0.0f;
  }
  EXPECT_NEAR(sum, std::min(budget, double(nonzero)), 1e-9 * budget) << what;
}

// PowerSGD's Gram-Schmidt on the matrix's first r columns read as P (rows x r): kept
// columns orthonormal, dropped ones exactly zero, and every input column inside the
// span of the kept ones (up to the drop tolerance).
void check_orthonormalize(const StressMatrix& s, std::size_t r) {
  const std::string what = s.describe() + " as P with r " + std::to_string(r);
  std::vector<float> p(s.m.begin(), s.m.begin() + std::ptrdiff_t(s.rows * r));
  const MatD before = columns(p, s.rows, r);
  const std::size_t kept = lr_orthonormalize(p, s.rows, r);
  MatD after = columns(p, s.rows, r);
  ASSERT_TRUE(after.allFinite()) << what;
  std::vector<Eigen::Index> nonzero;
  for (Eigen::Index c = 0; c < after.cols(); ++c) {
    if (after.col(c).squaredNorm() != 0.0) nonzero.push_back(c);
  }
  ASSERT_EQ(nonzero.size(), kept) << what;
  MatD q(after.rows(), static_cast<Eigen::Index>(kept));
  for (std::size_t c = 0; c < kept; ++c) q.col(Eigen::Index(c)) = after.col(nonzero[c]);
  const double tol = roundoff(s.rows, r);
  EXPECT_LE(max_abs_off_identity(q), tol) << what;
  const double scale = before.colwise().norm().maxCoeff();
  if (scale == 0.0) return;
  const MatD outside = before - q * (q.transpose() * before);
  // A column is dropped when less than kLowRankDropTolerance of it remains after the
  // projections; rounding adds tol relative to the largest column.
  EXPECT_LE(outside.colwise().norm().maxCoeff() / scale, kLowRankDropTolerance * 2 + tol) << what;
}

// `count` matrices cycling through `shapes` and every pattern, ranks 1..min(160, rows,
// cols) (the extremes 1 and full over-represented), each through thin_svd, the
// probabilities of its spectrum at two budgets, and Gram-Schmidt on its columns.
// Returns how many were checked (fewer after the first failure: one report, not
// thousands).
std::size_t sweep(const std::vector<std::pair<std::size_t, std::size_t>>& shapes, std::size_t count,
                  std::uint64_t seed) {
  const auto patterns = static_cast<std::size_t>(StressPattern::kCount);
  std::mt19937_64 rng(seed);
  std::size_t checked = 0;
  for (std::size_t t = 0; t < count; ++t) {
    const auto [rows, cols] = shapes[t % shapes.size()];
    const auto pattern = static_cast<StressPattern>((t / shapes.size()) % patterns);
    const std::size_t cap = std::min<std::size_t>({160, rows, cols});
    const std::size_t pick = rng() % 4;
    const std::size_t rank = pick == 0 ? 1 : pick == 1 ? cap : 1 + rng() % cap;
    const StressMatrix s = test::make_stress_matrix(rows, cols, rank, pattern, rng());
    // A double Jacobi SVD as the spectrum's reference where it is cheap.
    const bool reference = std::min(rows, cols) <= 8 || t % 64 == 0;
    const std::vector<float> sigma = check_thin_svd(s, reference);
    check_probabilities(sigma, 3.0, s.describe());
    check_probabilities(sigma, 0.5 + double(t % 9), s.describe());
    check_orthonormalize(s, std::min<std::size_t>(cols, 1 + t % 64));
    ++checked;
    if (::testing::Test::HasFailure()) break;
  }
  return checked;
}

// 10,000 small matrices: the models' small layers (LeNet-5, ResNet-20 convs as o x i*k*k)
// and odd shapes on both sides of thin_svd's switch to the range finder at 48.
TEST(FactorizationStress, TenThousandSmallAndOddMatrices) {
  std::vector<std::pair<std::size_t, std::size_t>> shapes;
  for (const auto& s : test::model_shapes(true)) {
    if (s.first * s.second <= 5000) shapes.push_back(s);
  }
  for (const auto& odd : std::vector<std::pair<std::size_t, std::size_t>>{{1, 1},
                                                                          {1, 9},
                                                                          {9, 1},
                                                                          {2, 2},
                                                                          {2, 3},
                                                                          {3, 2},
                                                                          {5, 7},
                                                                          {13, 11},
                                                                          {17, 33},
                                                                          {31, 30},
                                                                          {47, 47},
                                                                          {48, 48},
                                                                          {49, 50},
                                                                          {64, 3},
                                                                          {3, 64},
                                                                          {1, 300},
                                                                          {300, 1}}) {
    shapes.push_back(odd);
  }
  const auto start = std::chrono::steady_clock::now();
  const std::size_t checked = sweep(shapes, 10000, 2018);
  EXPECT_EQ(checked, 10000u);
  std::printf("factorization stress: %zu small matrices in %.1f s\n", checked,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

// Fewer, larger ones: the models' mid-size layers and ranks up to 160.
TEST(FactorizationStress, MidSizeMatrices) {
  const std::vector<std::pair<std::size_t, std::size_t>> shapes = {
      {84, 120},  {120, 400}, {64, 288}, {97, 49},  {161, 170},
      {200, 300}, {10, 1536}, {1, 1536}, {1536, 1}, {32, 288}};
  EXPECT_EQ(sweep(shapes, 120, 1986), 120u);
}

// The models' real layer sizes, where the range finder and the full SVD both run.
TEST(FactorizationStress, RealLayerSizes) {
  struct Case {
    std::size_t rows, cols, rank;
    StressPattern pattern;
  };
  for (const Case& c : {Case{1536, 784, 64, StressPattern::kGradientLike},
                        Case{1536, 1536, 64, StressPattern::kGradientLike},
                        Case{1536, 1536, 160, StressPattern::kExactLowRank},
                        Case{1536, 784, 32, StressPattern::kClustered},
                        Case{10, 1536, 10, StressPattern::kLowRankNoise},
                        Case{120, 400, 120, StressPattern::kLowRankNoise},
                        Case{64, 576, 64, StressPattern::kGraded},
                        Case{784, 300, 100, StressPattern::kZeroLines}}) {
    const StressMatrix s =
        test::make_stress_matrix(c.rows, c.cols, c.rank, c.pattern, c.rows + c.cols);
    const std::vector<float> sigma = check_thin_svd(s, false);
    check_probabilities(sigma, 3.0, s.describe());
    check_orthonormalize(s, std::min<std::size_t>(c.rank, 64));
  }
}

const char* const kCrashFile = GRADCOMP_TEST_DATA_DIR "/atomo-bdcsvd-crash-80x1536.bin";

// The matrix B on which Eigen's BDCSVD read perm(-1): LAPACK's SVD of it directly, then
// thin_svd, then a whole ATOMO encode of it.
TEST(FactorizationStress, BdcsvdCrashMatrix) {
  const StressMatrix s = test::read_matrix_file(kCrashFile);
  ASSERT_EQ(s.rows, 80u);
  ASSERT_EQ(s.cols, 1536u);

  std::vector<float> a(s.rows * s.cols);  // column-major, as LAPACK wants it
  for (std::size_t i = 0; i < s.rows; ++i) {
    for (std::size_t j = 0; j < s.cols; ++j) a[j * s.rows + i] = s.m[i * s.cols + j];
  }
  DenseSvd dense;
  ASSERT_EQ(dense_svd(a.data(), s.rows, s.cols, dense), "");
  EXPECT_EQ(dense.k, 80u);

  const std::vector<float> sigma = check_thin_svd(s, true);
  check_probabilities(sigma, 3.0, "crash matrix");

  auto codec = builtin_registry().make_codec("atomo:budget=3");
  std::vector<std::byte> msg(codec->max_encoded_bytes(s.m.size()));
  const StepContext ctx{.seed = 42, .step = 0, .bucket = 1, .rows = 80};
  EXPECT_GT(codec->encode(s.m, ctx, msg), 0u);
}

// Failures come back as text, never as a signal or an exception from LAPACK.
TEST(DenseSvd, ReportsWhatLapackCannotIndex) {
  DenseSvd out;
  // The dimension check runs before the matrix is touched, so no memory is needed.
  const std::string why = dense_svd(nullptr, std::size_t{1} << 31, 2, out);
  EXPECT_NE(why.find("32-bit"), std::string::npos) << why;
}

TEST(DenseSvd, EmptyAndOneByOne) {
  DenseSvd out;
  EXPECT_EQ(dense_svd(nullptr, 0, 5, out), "");
  EXPECT_EQ(out.k, 0u);
  float a = -2.5f;
  ASSERT_EQ(dense_svd(&a, 1, 1, out), "");
  EXPECT_EQ(out.sigma[0], 2.5f);
  EXPECT_EQ(out.u[0] * out.vt[0], -1.0f);
}

}  // namespace
}  // namespace gradcomp::detail
