// PowerSGD's low-rank kernels (detail/low_rank.h): every fast kernel equals its scalar
// reference bit for bit over a sweep of shapes (SIMD tails, rank blocks of 8, the
// OpenMP split), Gram-Schmidt gives orthonormal columns spanning the same space, zero
// and dependent columns come out as exact zeros, and one power iteration recovers a
// rank-r matrix.
#include "gradcomp/kernels/low_rank.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "gradcomp/error.h"
#include "support/test_support.h"

namespace gradcomp::kernels {
namespace {

using gradcomp::test::random_gradient;
using gradcomp::test::same_bits;

std::string shape_name(const LowRankShape& s) {
  return std::to_string(s.rows) + "x" + std::to_string(s.cols) + " r" + std::to_string(s.rank);
}

std::vector<LowRankShape> sweep_shapes() {
  std::vector<LowRankShape> out;
  for (std::size_t rows : {1, 2, 3, 5, 8, 17}) {
    for (std::size_t cols : {1, 7, 8, 9, 15, 16, 17, 33, 100}) {
      for (std::size_t rank : {1, 2, 3, 5, 8, 9, 13, 17}) out.push_back({rows, cols, rank});
    }
  }
  // Large enough for the OpenMP split (> 2^16 elements), odd columns, ranks on both
  // sides of the 8-column block.
  out.push_back({300, 301, 1});
  out.push_back({300, 301, 2});
  out.push_back({257, 1030, 3});
  out.push_back({130, 777, 11});
  out.push_back({10, 7000, 2});
  return out;
}

TEST(LowRank, KernelsEqualReferences) {
  std::uint64_t seed = 1;
  for (const LowRankShape& s : sweep_shapes()) {
    SCOPED_TRACE(shape_name(s));
    const auto m = random_gradient(s.m_size(), ++seed);
    const auto q = random_gradient(s.q_size(), ++seed);
    const auto p_in = random_gradient(s.p_size(), ++seed);

    std::vector<float> p(s.p_size(), -1.0f), p_ref(s.p_size(), -2.0f);
    lr_project(s, m, q, p);
    lr_project_ref(s, m, q, p_ref);
    EXPECT_TRUE(same_bits(p, p_ref)) << "project";

    std::vector<float> q_out(s.q_size(), -1.0f), q_ref(s.q_size(), -2.0f);
    lr_back_project(s, m, p_in, q_out);
    lr_back_project_ref(s, m, p_in, q_ref);
    EXPECT_TRUE(same_bits(q_out, q_ref)) << "back_project";

    std::vector<float> out(s.m_size(), -1.0f), out_ref(s.m_size(), -2.0f);
    lr_reconstruct(s, p_in, q, out);
    lr_reconstruct_ref(s, p_in, q, out_ref);
    EXPECT_TRUE(same_bits(out, out_ref)) << "reconstruct";

    // The fused error update: e = M - P Q^T with the reference's P Q^T.
    std::vector<float> e = m;
    std::vector<float> out2(s.m_size(), -3.0f);
    lr_reconstruct_residual(s, p_in, q, e, out2);
    EXPECT_TRUE(same_bits(out2, out_ref)) << "reconstruct_residual out";
    std::vector<float> e_ref(s.m_size());
    for (std::size_t i = 0; i < e_ref.size(); ++i) e_ref[i] = m[i] - out_ref[i];
    EXPECT_TRUE(same_bits(e, e_ref)) << "reconstruct_residual e";

    // The fused accumulate: e <- g + e, P = e Q.
    const auto g = random_gradient(s.m_size(), ++seed);
    std::vector<float> acc = m;
    std::vector<float> p2(s.p_size(), -1.0f);
    lr_project_accumulate(s, g, acc, q, p2);
    std::vector<float> sum(s.m_size());
    for (std::size_t i = 0; i < sum.size(); ++i) sum[i] = g[i] + m[i];
    EXPECT_TRUE(same_bits(acc, sum)) << "project_accumulate e";
    lr_project_ref(s, sum, q, p_ref);
    EXPECT_TRUE(same_bits(p2, p_ref)) << "project_accumulate P";
    if (HasFailure()) return;
  }
}

TEST(LowRank, ReferencesMatchDoublePrecisionProducts) {
  // The references themselves: close to the products computed in double.
  const LowRankShape s{23, 41, 3};
  const auto m = random_gradient(s.m_size(), 5);
  const auto q = random_gradient(s.q_size(), 6);
  std::vector<float> p(s.p_size());
  lr_project_ref(s, m, q, p);
  for (std::size_t i = 0; i < s.rows; ++i) {
    for (std::size_t k = 0; k < s.rank; ++k) {
      double want = 0;
      for (std::size_t j = 0; j < s.cols; ++j)
        want += double{m[i * s.cols + j]} * q[k * s.cols + j];
      EXPECT_NEAR(p[k * s.rows + i], want, 1e-4 * (1 + std::abs(want)));
    }
  }
  std::vector<float> qt(s.q_size());
  lr_back_project_ref(s, m, p, qt);
  for (std::size_t j = 0; j < s.cols; ++j) {
    for (std::size_t k = 0; k < s.rank; ++k) {
      double want = 0;
      for (std::size_t i = 0; i < s.rows; ++i)
        want += double{m[i * s.cols + j]} * p[k * s.rows + i];
      EXPECT_NEAR(qt[k * s.cols + j], want, 1e-4 * (1 + std::abs(want)));
    }
  }
  std::vector<float> out(s.m_size());
  lr_reconstruct_ref(s, p, q, out);
  for (std::size_t i = 0; i < s.rows; ++i) {
    for (std::size_t j = 0; j < s.cols; ++j) {
      double want = 0;
      for (std::size_t k = 0; k < s.rank; ++k)
        want += double{p[k * s.rows + i]} * q[k * s.cols + j];
      EXPECT_NEAR(out[i * s.cols + j], want, 1e-4 * (1 + std::abs(want)));
    }
  }
}

// max |P^T P - I| over the kept (nonzero) columns; dropped columns must be all zero.
double orthonormality_error(const std::vector<float>& p, std::size_t rows, std::size_t rank) {
  double worst = 0;
  for (std::size_t a = 0; a < rank; ++a) {
    for (std::size_t b = 0; b < rank; ++b) {
      double d = 0, na = 0, nb = 0;
      for (std::size_t i = 0; i < rows; ++i) {
        d += double{p[a * rows + i]} * p[b * rows + i];
        na += double{p[a * rows + i]} * p[a * rows + i];
        nb += double{p[b * rows + i]} * p[b * rows + i];
      }
      if (na == 0 || nb == 0) continue;
      worst = std::max(worst, std::abs(d - (a == b ? 1.0 : 0.0)));
    }
  }
  return worst;
}

TEST(LowRank, OrthonormalizeGivesOrthonormalColumnsSpanningTheInput) {
  for (std::size_t rows : {8, 50, 1536}) {
    for (std::size_t rank : {1, 2, 3, 8}) {
      SCOPED_TRACE(std::to_string(rows) + " r" + std::to_string(rank));
      const auto orig = random_gradient(rows * rank, rows * 31 + rank);
      std::vector<float> p = orig;
      EXPECT_EQ(lr_orthonormalize(p, rows, rank), rank);
      EXPECT_LT(orthonormality_error(p, rows, rank), 1e-5);
      // Gram-Schmidt is triangular: original column k lies in the span of the first k+1
      // new columns (its residual after projecting on them is tiny).
      for (std::size_t k = 0; k < rank; ++k) {
        std::vector<double> v(orig.begin() + static_cast<std::ptrdiff_t>(k * rows),
                              orig.begin() + static_cast<std::ptrdiff_t>((k + 1) * rows));
        double norm0 = 0;
        for (double x : v) norm0 += x * x;
        for (std::size_t c = 0; c <= k; ++c) {
          double d = 0;
          for (std::size_t i = 0; i < rows; ++i) d += double{p[c * rows + i]} * v[i];
          for (std::size_t i = 0; i < rows; ++i) v[i] -= d * p[c * rows + i];
        }
        double res = 0;
        for (double x : v) res += x * x;
        EXPECT_LT(std::sqrt(res), 1e-5 * std::sqrt(norm0));
      }
    }
  }
}

TEST(LowRank, OrthonormalizeKeepsBadlyConditionedColumnsOrthogonal) {
  // Column 1 = column 0 + 1e-3 * noise: the component left after projection is ~1e-3 of
  // the column, which loses ~3 digits in one pass; the second pass restores them.
  const std::size_t rows = 200;
  const auto a = random_gradient(rows, 1);
  const auto b = random_gradient(rows, 2);
  std::vector<float> p(2 * rows);
  for (std::size_t i = 0; i < rows; ++i) {
    p[i] = a[i];
    p[rows + i] = a[i] + 1e-3f * b[i];
  }
  EXPECT_EQ(lr_orthonormalize(p, rows, 2), 2u);
  EXPECT_LT(orthonormality_error(p, rows, 2), 1e-5);
}

TEST(LowRank, OrthonormalizeZeroesZeroDependentAndNonFiniteColumns) {
  const std::size_t rows = 33;
  // All zero: stays zero, no NaN.
  std::vector<float> z(rows * 3, 0.0f);
  EXPECT_EQ(lr_orthonormalize(z, rows, 3), 0u);
  for (float v : z) EXPECT_EQ(std::bit_cast<std::uint32_t>(v), 0u);

  // [a, 2a, 0, b, NaN-column]: a and b kept, the rest exactly zero.
  const auto a = random_gradient(rows, 3);
  const auto b = random_gradient(rows, 4);
  std::vector<float> p(rows * 5, 0.0f);
  for (std::size_t i = 0; i < rows; ++i) {
    p[i] = a[i];
    p[rows + i] = 2.0f * a[i];
    p[3 * rows + i] = b[i];
    p[4 * rows + i] = i == 7 ? std::numeric_limits<float>::quiet_NaN() : b[i];
  }
  EXPECT_EQ(lr_orthonormalize(p, rows, 5), 2u);
  for (std::size_t k : {1, 2, 4}) {
    for (std::size_t i = 0; i < rows; ++i) {
      EXPECT_EQ(std::bit_cast<std::uint32_t>(p[k * rows + i]), 0u) << "column " << k;
    }
  }
  EXPECT_LT(orthonormality_error(p, rows, 5), 1e-5);

  // A tiny but independent column is kept (relative, not absolute, tolerance).
  std::vector<float> t(rows * 2);
  for (std::size_t i = 0; i < rows; ++i) {
    t[i] = a[i];
    t[rows + i] = 1e-30f * b[i];
  }
  EXPECT_EQ(lr_orthonormalize(t, rows, 2), 2u);
  EXPECT_LT(orthonormality_error(t, rows, 2), 1e-5);
}

TEST(LowRank, OnePowerIterationRecoversARankRMatrix) {
  for (std::size_t rank : {1, 2, 4}) {
    const LowRankShape s{64, 96, rank};
    SCOPED_TRACE(shape_name(s));
    // M = A B^T with A rows x r, B cols x r.
    const auto a = random_gradient(s.rows * rank, 10 + rank);
    const auto b = random_gradient(s.cols * rank, 20 + rank);
    std::vector<float> m(s.m_size());
    lr_reconstruct_ref(s, a, b, m);
    std::vector<float> q(s.q_size());
    lr_fill_normal(CounterRng(99), 0, q);
    std::vector<float> p(s.p_size());
    lr_project(s, m, q, p);
    EXPECT_EQ(lr_orthonormalize(p, s.rows, rank), rank);
    lr_back_project(s, m, p, q);
    std::vector<float> e = m;
    std::vector<float> out(s.m_size());
    lr_reconstruct_residual(s, p, q, e, out);
    double worst = 0, scale = 0;
    for (std::size_t i = 0; i < m.size(); ++i) {
      worst = std::max(worst, double{std::abs(out[i] - m[i])});
      scale = std::max(scale, double{std::abs(m[i])});
      EXPECT_EQ(e[i], m[i] - out[i]);
    }
    EXPECT_LT(worst, 1e-5 * scale);
  }
}

TEST(LowRank, ZeroMatrix) {
  const LowRankShape s{20, 30, 2};
  const std::vector<float> m(s.m_size(), 0.0f);
  std::vector<float> q(s.q_size());
  lr_fill_normal(CounterRng(1), 0, q);
  std::vector<float> p(s.p_size(), 1.0f);
  lr_project(s, m, q, p);
  EXPECT_EQ(lr_orthonormalize(p, s.rows, s.rank), 0u);
  lr_back_project(s, m, p, q);
  std::vector<float> e = m, out(s.m_size(), 5.0f);
  lr_reconstruct_residual(s, p, q, e, out);
  for (std::size_t i = 0; i < out.size(); ++i) {
    EXPECT_EQ(out[i], 0.0f);
    EXPECT_EQ(e[i], 0.0f);
  }
}

TEST(LowRank, FillNormalIsDeterministicAndStandard) {
  std::vector<float> x(200000);
  const CounterRng rng(12345);
  lr_fill_normal(rng, 0, x);
  double mean = 0, var = 0;
  for (float v : x) {
    ASSERT_TRUE(std::isfinite(v));
    mean += v;
  }
  mean /= static_cast<double>(x.size());
  for (float v : x) var += (v - mean) * (v - mean);
  var /= static_cast<double>(x.size());
  EXPECT_NEAR(mean, 0.0, 5.0 / std::sqrt(double(x.size())));
  EXPECT_NEAR(var, 1.0, 0.02);
  // out[t] depends on (rng, first + t) only.
  std::vector<float> y(100);
  lr_fill_normal(rng, 1000, y);
  EXPECT_TRUE(same_bits(y, std::span<const float>(x).subspan(1000, 100)));
  // Another key, other values.
  lr_fill_normal(CounterRng(12346), 1000, y);
  EXPECT_FALSE(same_bits(y, std::span<const float>(x).subspan(1000, 100)));
  EXPECT_THROW(lr_fill_normal(rng, 0x7FFFFFFFu, y), InvalidArgument);
}

TEST(LowRank, SizeMismatchesThrow) {
  const LowRankShape s{4, 5, 2};
  std::vector<float> m(20), q(10), p(8), small(3);
  EXPECT_THROW(lr_project(s, small, q, p), InvalidArgument);
  EXPECT_THROW(lr_project(s, m, small, p), InvalidArgument);
  EXPECT_THROW(lr_project(s, m, q, small), InvalidArgument);
  EXPECT_THROW(lr_back_project(s, m, p, small), InvalidArgument);
  EXPECT_THROW(lr_reconstruct(s, p, q, small), InvalidArgument);
  EXPECT_THROW(lr_reconstruct_residual(s, p, q, m, m), InvalidArgument);  // out overlaps e
  EXPECT_THROW(lr_project(LowRankShape{4, 5, 0}, m, {}, {}), InvalidArgument);
  EXPECT_THROW(lr_orthonormalize(small, 4, 2), InvalidArgument);
}

}  // namespace
}  // namespace gradcomp::kernels
