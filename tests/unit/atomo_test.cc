// ATOMO: the water-filling probabilities against hand-computed cases, the textbook
// reference and the optimality conditions; the thin SVD (both methods) against the
// matrix it decomposes; the codec's messages against the decomposition, its shape
// fallbacks, and unbiasedness with tolerances derived from the estimator's variance.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "detail/atomo_probabilities.h"
#include "detail/thin_svd.h"
#include "gradcomp/error.h"
#include "gradcomp/registry.h"
#include "gradcomp/rng.h"
#include "gradcomp/wire.h"
#include "support/test_support.h"

namespace gradcomp {
namespace {

using detail::SvdMethod;

// ---- probabilities ------------------------------------------------------------------

std::vector<double> fast_p(const std::vector<float>& lambda, double s) {
  const detail::AtomoCut cut = detail::atomo_cut(lambda, s);
  std::vector<double> p(lambda.size());
  detail::atomo_probabilities(lambda, cut, p);
  return p;
}

void expect_p(const std::vector<float>& lambda, double s, const std::vector<double>& want) {
  SCOPED_TRACE("s=" + std::to_string(s));
  const auto fast = fast_p(lambda, s);
  const auto ref = detail::atomo_probabilities_reference(lambda, s);
  ASSERT_EQ(fast.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(fast[i], want[i], 1e-15) << "fast, atom " << i;
    EXPECT_NEAR(ref[i], want[i], 1e-15) << "reference, atom " << i;
  }
}

TEST(AtomoProbabilities, HandComputedCases) {
  // No saturation: p = s|l|/sum|l|. s*|l_1| = 8 <= 8 (the boundary) does not saturate.
  expect_p({4, 2, 1, 1}, 2, {1.0, 0.5, 0.25, 0.25});
  expect_p({1, -1, 1, -1}, 1, {0.25, 0.25, 0.25, 0.25});
  expect_p({1, 1}, 0.5, {0.25, 0.25});
  // The largest atom saturates: 2*10 > 13, then 1*1 <= 3.
  expect_p({1, 10, 1, 1}, 2, {1.0 / 3, 1.0, 1.0 / 3, 1.0 / 3});
  // Two saturate: 3*100 > 154, 2*50 > 54, then 1*1 <= 4.
  expect_p({1, -50, 1, 100, 1, 1}, 3, {0.25, 1.0, 0.25, 1.0, 0.25, 0.25});
  // Ties saturate together: 2.5*9 > 19, 1.5*9 > 10, 0.5*1 <= 1.
  expect_p({9, 1, 9}, 2.5, {1.0, 0.5, 1.0});
  // Ties that do not saturate share equally: 2*5 <= 11.
  expect_p({5, 1, -5}, 2, {10.0 / 11, 2.0 / 11, 10.0 / 11});
}

TEST(AtomoProbabilities, EdgeCases) {
  expect_p({}, 3, {});
  expect_p({0, 0, 0}, 3, {0, 0, 0});                // nothing to send
  expect_p({3, -1, 2}, 5, {1, 1, 1});               // s >= N: every nonzero atom
  expect_p({3, -1, 2}, 3, {1, 1, 1});               // s == N
  expect_p({0, 5, 0, 1}, 3, {0, 1, 0, 1});          // fewer nonzero atoms than s
  expect_p({0, 5, 0, 0}, 0.5, {0, 0.5, 0, 0});      // one atom, s < 1
  expect_p({7}, 1e12, {1});                         // huge budget
  expect_p({1e-45f, 0, 1e-45f}, 1, {0.5, 0, 0.5});  // denormals are atoms too
}

// sum p = min(s, nonzero atoms), 0 <= p <= 1, p = 0 exactly for zero atoms, the
// saturated atoms are the largest, the others share one ratio p/|l|, and the fast form
// agrees with the textbook one.
void check_properties(const std::vector<float>& lambda, double s) {
  const auto p = fast_p(lambda, s);
  const auto ref = detail::atomo_probabilities_reference(lambda, s);
  std::size_t nonzero = 0;
  double sum = 0.0, ratio = -1.0, min_saturated = INFINITY, max_unsaturated = 0.0;
  for (std::size_t i = 0; i < lambda.size(); ++i) {
    const double a = std::fabs(double(lambda[i]));
    ASSERT_GE(p[i], 0.0) << i;
    ASSERT_LE(p[i], 1.0) << i;
    ASSERT_EQ(p[i] == 0.0, a == 0.0) << i;
    ASSERT_NEAR(p[i], ref[i], 1e-12 * std::max(1.0, p[i])) << i;
    nonzero += a != 0.0;
    sum += p[i];
    if (a == 0.0) continue;
    if (p[i] == 1.0) {
      min_saturated = std::min(min_saturated, a);
    } else {
      max_unsaturated = std::max(max_unsaturated, a);
      if (ratio < 0) ratio = p[i] / a;
      ASSERT_NEAR(p[i] / a, ratio, 1e-12 * ratio) << i;
    }
  }
  EXPECT_NEAR(sum, std::min(s, double(nonzero)), 1e-9 * std::max(1.0, s));
  if (min_saturated != INFINITY) {
    EXPECT_GE(min_saturated, max_unsaturated);
  }
}

TEST(AtomoProbabilities, PropertiesOnRandomInputs) {
  for (std::size_t n : {1, 2, 3, 17, 100, 1000, 100003}) {
    for (double s : {0.3, 1.0, 2.5, 3.0, 8.0, 64.0, 1000.0}) {
      SCOPED_TRACE("n=" + std::to_string(n) + " s=" + std::to_string(s));
      // Heavy-tailed (cubes of Gaussian-ish values), so the largest atoms saturate;
      // every fifth zero; rounded to a grid so that ties occur.
      auto g = test::random_gradient(n, n + static_cast<std::uint64_t>(s * 10));
      for (std::size_t i = 0; i < n; ++i) {
        g[i] = i % 5 == 0 ? 0.0f : std::round(16 * g[i] * g[i] * g[i]) / 16;
      }
      check_properties(g, s);
    }
  }
}

// The water-filling solution minimises sum l^2/p: moving probability mass eps from one
// atom to another (staying within [0, 1]) never lowers it.
TEST(AtomoProbabilities, NoFeasibleMoveLowersTheVariance) {
  const std::vector<float> lambda = {9, -3, 0.5f, 2, 2, -7, 0.25f, 1};
  for (double s : {1.0, 2.0, 3.5, 6.0}) {
    const auto p = fast_p(lambda, s);
    auto variance = [&](const std::vector<double>& q) {
      double v = 0.0;
      for (std::size_t i = 0; i < q.size(); ++i) v += double(lambda[i]) * lambda[i] / q[i];
      return v;
    };
    const double best = variance(p);
    for (std::size_t a = 0; a < p.size(); ++a) {
      for (std::size_t b = 0; b < p.size(); ++b) {
        const double eps = 1e-4;
        if (a == b || p[a] - eps <= 0.0 || p[b] + eps > 1.0) continue;
        auto q = p;
        q[a] -= eps;
        q[b] += eps;
        EXPECT_GE(variance(q), best) << "s=" << s << " move " << a << "->" << b;
      }
    }
  }
}

// ---- thin SVD -------------------------------------------------------------------------

// rows x cols, row-major, rank <= rank (a sum of `rank` outer products, as a layer's
// gradient over a batch of `rank` samples), singular values decaying by `decay`.
std::vector<float> low_rank(std::size_t rows, std::size_t cols, std::size_t rank,
                            std::uint64_t seed, float decay = 1.0f) {
  const auto a = test::random_gradient(rows * rank, seed);
  const auto b = test::random_gradient(rank * cols, seed + 1);
  std::vector<float> m(rows * cols, 0.0f);
  for (std::size_t i = 0; i < rows; ++i) {
    for (std::size_t l = 0; l < rank; ++l) {
      const float ail = a[i * rank + l] * std::pow(decay, float(l));
      for (std::size_t j = 0; j < cols; ++j) m[i * cols + j] += ail * b[l * cols + j];
    }
  }
  return m;
}

// ||M - U S V^T||_F / ||M||_F in double.
double reconstruction_error(const std::vector<float>& m, const detail::ThinSvd& s) {
  double e2 = 0.0, n2 = 0.0;
  std::vector<double> row(s.cols);
  for (std::size_t i = 0; i < s.rows; ++i) {
    std::fill(row.begin(), row.end(), 0.0);
    for (std::size_t k = 0; k < s.rank; ++k) {
      const double c = double(s.sigma[k]) * s.u[k * s.rows + i];
      for (std::size_t j = 0; j < s.cols; ++j) row[j] += c * s.v[k * s.cols + j];
    }
    for (std::size_t j = 0; j < s.cols; ++j) {
      const double x = m[i * s.cols + j];
      e2 += (x - row[j]) * (x - row[j]);
      n2 += x * x;
    }
  }
  return n2 > 0.0 ? std::sqrt(e2 / n2) : std::sqrt(e2);
}

// max |X^T X - I| over the k columns (length len each) of x.
double orthonormality_error(const std::vector<float>& x, std::size_t len, std::size_t k) {
  double worst = 0.0;
  for (std::size_t a = 0; a < k; ++a) {
    for (std::size_t b = 0; b <= a; ++b) {
      double d = 0.0;
      for (std::size_t i = 0; i < len; ++i) d += double(x[a * len + i]) * x[b * len + i];
      worst = std::max(worst, std::fabs(d - (a == b ? 1.0 : 0.0)));
    }
  }
  return worst;
}

void expect_valid_svd(const std::vector<float>& m, const detail::ThinSvd& s, double tol) {
  EXPECT_LE(reconstruction_error(m, s), tol);
  EXPECT_LE(orthonormality_error(s.u, s.rows, s.rank), 2e-5);
  EXPECT_LE(orthonormality_error(s.v, s.cols, s.rank), 2e-5);
  for (std::size_t k = 0; k < s.rank; ++k) {
    EXPECT_GE(s.sigma[k], 0.0f) << k;
    if (k > 0) {
      EXPECT_LE(s.sigma[k], s.sigma[k - 1]) << k;
    }
  }
}

struct SvdCase {
  std::size_t rows, cols, rank;
  float decay;
};

TEST(AtomoSvd, BothMethodsReproduceLowRankMatrices) {
  for (SvdCase c : {SvdCase{300, 200, 20, 1.0f}, SvdCase{200, 300, 20, 0.8f},
                    SvdCase{257, 129, 20, 1.0f}, SvdCase{64, 1000, 8, 1.0f}}) {
    SCOPED_TRACE(std::to_string(c.rows) + "x" + std::to_string(c.cols) + " rank " +
                 std::to_string(c.rank));
    const auto m = low_rank(c.rows, c.cols, c.rank, c.rows + c.cols, c.decay);
    detail::ThinSvd rnd, full, aut;
    detail::thin_svd(m, c.rows, c.cols, rnd,
                     {.method = SvdMethod::kRandomized, .max_basis_fraction = 1.0});
    detail::thin_svd(m, c.rows, c.cols, full, {.method = SvdMethod::kFull});
    detail::thin_svd(m, c.rows, c.cols, aut);
    EXPECT_EQ(rnd.method, SvdMethod::kRandomized);
    EXPECT_LE(rnd.residual, 2e-6) << "an exact basis leaves rounding noise only";
    EXPECT_EQ(full.method, SvdMethod::kFull);
    EXPECT_EQ(full.rank, std::min(c.rows, c.cols));
    EXPECT_EQ(aut.method, SvdMethod::kRandomized) << "low rank: the auto method verifies";
    expect_valid_svd(m, rnd, 5e-6);
    expect_valid_svd(m, full, 5e-6);
    // The same singular values (those that are not rounding noise).
    for (std::size_t k = 0; k < c.rank; ++k) {
      EXPECT_NEAR(rnd.sigma[k], full.sigma[k], 1e-5 * full.sigma[0]) << k;
    }
    for (std::size_t k = c.rank; k < rnd.rank; ++k) EXPECT_LE(rnd.sigma[k], 1e-5 * rnd.sigma[0]);
  }
}

TEST(AtomoSvd, FullRankMatricesFallBackToTheFullSvd) {
  for (SvdCase c : {SvdCase{120, 100, 100, 1.0f}, SvdCase{90, 150, 90, 1.0f}}) {
    const auto m = low_rank(c.rows, c.cols, c.rank, 3);
    detail::ThinSvd aut, full;
    detail::thin_svd(m, c.rows, c.cols, aut);
    EXPECT_EQ(aut.method, SvdMethod::kFull);
    expect_valid_svd(m, aut, 5e-6);
    // The fallback starts again from M: the same bits as asking for the full SVD.
    detail::thin_svd(m, c.rows, c.cols, full, {.method = SvdMethod::kFull});
    EXPECT_TRUE(test::same_bits(aut.sigma, full.sigma));
    EXPECT_TRUE(test::same_bits(aut.u, full.u));
    EXPECT_TRUE(test::same_bits(aut.v, full.v));
  }
}

// A randomized basis that reaches the full dimension without the residual check
// passing is not trusted: the full SVD runs even when randomized was asked for.
TEST(AtomoSvd, UnverifiedBasesAreNeverUsed) {
  const auto m = low_rank(120, 100, 100, 3);
  detail::ThinSvd s;
  detail::thin_svd(m, 120, 100, s, {.method = SvdMethod::kRandomized, .max_basis_fraction = 0.5});
  EXPECT_EQ(s.method, SvdMethod::kFull);
  expect_valid_svd(m, s, 5e-6);
  // A tolerance that no float basis meets: likewise.
  const auto low = low_rank(120, 100, 10, 3);
  detail::thin_svd(low, 120, 100, s, {.method = SvdMethod::kRandomized, .tolerance = 1e-12});
  EXPECT_EQ(s.method, SvdMethod::kFull);
  expect_valid_svd(low, s, 5e-6);
}

TEST(AtomoSvd, VectorsZerosAndExtremeScales) {
  detail::ThinSvd s;
  const std::vector<float> row = {3, 0, -4};
  detail::thin_svd(row, 1, 3, s);
  ASSERT_EQ(s.rank, 1u);
  EXPECT_EQ(s.sigma[0], 5.0f);
  EXPECT_EQ(s.u, std::vector<float>({1.0f}));
  EXPECT_EQ(s.v, std::vector<float>({0.6f, 0.0f, -0.8f}));
  detail::thin_svd(row, 3, 1, s);
  ASSERT_EQ(s.rank, 1u);
  EXPECT_EQ(s.u, std::vector<float>({0.6f, 0.0f, -0.8f}));
  EXPECT_EQ(s.v, std::vector<float>({1.0f}));

  detail::thin_svd(std::vector<float>(12, 0.0f), 3, 4, s);
  EXPECT_EQ(s.rank, 0u);
  detail::thin_svd({}, 0, 5, s);
  EXPECT_EQ(s.rank, 0u);

  for (float scale : {1e-30f, 1e30f}) {
    auto m = low_rank(80, 60, 5, 9);
    for (float& x : m) x *= scale;
    for (SvdMethod method : {SvdMethod::kRandomized, SvdMethod::kFull}) {
      detail::thin_svd(m, 80, 60, s, {.method = method});
      expect_valid_svd(m, s, 5e-6);
    }
  }
}

TEST(AtomoSvd, Deterministic) {
  const auto m = low_rank(200, 150, 30, 4);
  detail::ThinSvd a, b;
  detail::thin_svd(m, 200, 150, a);
  detail::thin_svd(low_rank(150, 200, 150, 8), 150, 200, b);  // other shapes in between
  detail::thin_svd(m, 200, 150, b);
  EXPECT_TRUE(test::same_bits(a.sigma, b.sigma));
  EXPECT_TRUE(test::same_bits(a.u, b.u));
  EXPECT_TRUE(test::same_bits(a.v, b.v));
}

// ---- the codec ------------------------------------------------------------------------

struct Spectral {
  std::uint32_t rows, cols, count;
  std::vector<float> scale;
  std::vector<std::vector<float>> u, v;
};

Spectral parse_spectral(const std::vector<std::byte>& msg) {
  const auto pl = test::payload_of(msg);
  Spectral s{load_le<std::uint32_t>(pl.data()),
             load_le<std::uint32_t>(pl.data() + 4),
             load_le<std::uint32_t>(pl.data() + 8),
             {},
             {},
             {}};
  const std::byte* a = pl.data() + 12;
  for (std::uint32_t k = 0; k < s.count; ++k) {
    s.scale.push_back(load_le<float>(a));
    s.u.emplace_back(s.rows);
    s.v.emplace_back(s.cols);
    std::memcpy(s.u.back().data(), a + 4, 4 * s.rows);
    std::memcpy(s.v.back().data(), a + 4 + 4 * s.rows, 4 * s.cols);
    a += 4 * (1 + s.rows + s.cols);
  }
  EXPECT_EQ(static_cast<std::size_t>(a - pl.data()), pl.size());
  return s;
}

TEST(Atomo, HandCheckedVectorMessage) {
  // rows 0: the 1 x n view. sigma = 5, u = [1], v = g/5; budget 3 >= 1 atom: p = 1.
  auto c = builtin_registry().make_codec("atomo");
  const std::vector<float> g = {3, 4};
  const auto msg = test::encode(*c, g, {.seed = 1});
  EXPECT_EQ(test::payload_of(msg),
            test::bytes_of({1,    0,    0,    0,    2,    0,    0,    0,
                            1,    0,    0,    0,                                // rows, cols, count
                            0x00, 0x00, 0xA0, 0x40, 0x00, 0x00, 0x80, 0x3F,     // 5.0f, u = 1.0f
                            0x9A, 0x99, 0x19, 0x3F, 0xCD, 0xCC, 0x4C, 0x3F}));  // 0.6f, 0.8f
  const auto d = test::decode(*c, msg, 2);
  EXPECT_EQ(d[0], 5.0f * 0.6f);
  EXPECT_EQ(d[1], 5.0f * 0.8f);
}

TEST(Atomo, MatrixShapeFromTheContext) {
  auto c = builtin_registry().make_codec("atomo:budget=1000");
  const auto g = test::random_gradient(24, 3);
  struct Case {
    std::uint32_t ctx_rows, rows, cols;
  };
  for (Case k : {Case{0, 1, 24}, Case{5, 1, 24}, Case{6, 6, 4}, Case{4, 4, 6}, Case{24, 24, 1},
                 Case{1, 1, 24}, Case{48, 1, 24}}) {
    SCOPED_TRACE("ctx rows " + std::to_string(k.ctx_rows));
    const auto msg = test::encode(*c, g, {.seed = 2, .rows = k.ctx_rows});
    const Spectral s = parse_spectral(msg);
    EXPECT_EQ(s.rows, k.rows);
    EXPECT_EQ(s.cols, k.cols);
    EXPECT_EQ(s.count, std::min(k.rows, k.cols)) << "budget >= atoms: all are sent";
    // Every atom with p = 1: decode reproduces g to float rounding.
    const auto d = test::decode(*c, msg, 24);
    for (std::size_t i = 0; i < 24; ++i) EXPECT_NEAR(d[i], g[i], 1e-5f) << i;
  }
}

// The size a reducer plans with (its dense fallback): the expected ceil(s) atoms of the
// step's view, not the bound of every atom. Planning with the bound sent ATOMO dense on
// every step of every built-in model at 4 workers.
TEST(Atomo, PlannedSizeIsTheBudgetOfAtomsOfTheView) {
  const std::size_t rows = 1536, cols = 784, n = rows * cols;
  StepContext ctx;
  ctx.rows = rows;
  const auto spectral = builtin_registry().make_codec("atomo:budget=3");
  EXPECT_EQ(spectral->planned_encoded_bytes(n, ctx), kHeaderBytes + 12 + 4 * 3 * (1 + rows + cols));
  EXPECT_LT(spectral->planned_encoded_bytes(n, ctx), 4 * n / 100) << "under 1% of dense";
  EXPECT_GT(spectral->max_encoded_bytes(n), 4 * n);
  // A fractional budget plans its ceiling; a view of rank 2 at most 2 atoms; the 1 x n
  // view of a flat bucket one atom, which is the vector itself.
  EXPECT_EQ(builtin_registry().make_codec("atomo:budget=2.5")->planned_encoded_bytes(n, ctx),
            kHeaderBytes + 12 + 4 * 3 * (1 + rows + cols));
  ctx.rows = 2;
  EXPECT_EQ(spectral->planned_encoded_bytes(2 * 50, ctx), kHeaderBytes + 12 + 4 * 2 * (1 + 2 + 50));
  ctx.rows = 0;
  EXPECT_EQ(spectral->planned_encoded_bytes(n, ctx), kHeaderBytes + 12 + 4 * (1 + 1 + n));
  const auto entry = builtin_registry().make_codec("atomo:atoms=entry,budget=100");
  EXPECT_EQ(entry->planned_encoded_bytes(n, ctx), kHeaderBytes + 4 + 8 * 100);
  EXPECT_EQ(entry->planned_encoded_bytes(7, ctx), entry->max_encoded_bytes(7)) << "capped";
  // Gradient dropping plans its percentile's count; a fixed tau has only its bound.
  EXPECT_EQ(builtin_registry().make_codec("threshold")->planned_encoded_bytes(1000, ctx),
            kHeaderBytes + 4 + 8 * 11);
  EXPECT_EQ(builtin_registry().make_codec("mask:ratio=0.01")->planned_encoded_bytes(1000, ctx),
            kHeaderBytes + 4 + 8 * 10);
  const auto fixed = builtin_registry().make_codec("threshold:tau=0.5");
  EXPECT_EQ(fixed->planned_encoded_bytes(1000, ctx), fixed->max_encoded_bytes(1000));
  // Codecs of a fixed size plan exactly that.
  const auto topk = builtin_registry().make_codec("topk:ratio=0.01");
  EXPECT_EQ(topk->planned_encoded_bytes(n, ctx), topk->max_encoded_bytes(n));
}

// The message is the decomposition: kept atoms carry sigma_i/p_i and the singular
// vectors of detail::thin_svd, in ascending atom order.
TEST(Atomo, SpectralMessageCarriesTheDecomposition) {
  const std::size_t rows = 40, cols = 30;
  const auto g = low_rank(rows, cols, 30, 21);
  detail::ThinSvd svd;
  detail::thin_svd(g, rows, cols, svd);
  const std::span<const float> sigma(svd.sigma.data(), svd.rank);
  std::vector<double> p(svd.rank);
  detail::atomo_probabilities(sigma, detail::atomo_cut(sigma, 3.0), p);

  auto c = builtin_registry().make_codec("atomo:budget=3");
  double mean_count = 0.0;
  const int draws = 400;
  for (int step = 0; step < draws; ++step) {
    const auto msg =
        test::encode(*c, g, {.seed = 5, .step = static_cast<std::uint64_t>(step), .rows = rows});
    const Spectral s = parse_spectral(msg);
    mean_count += s.count;
    for (std::uint32_t k = 0; k < s.count; ++k) {
      // Find the atom by its scale's sigma: atoms are sent in ascending order.
      bool found = false;
      for (std::size_t i = 0; i < svd.rank && !found; ++i) {
        if (s.scale[k] != static_cast<float>(double(sigma[i]) / p[i])) continue;
        if (std::memcmp(s.u[k].data(), svd.u.data() + i * rows, 4 * rows) != 0) continue;
        found = std::memcmp(s.v[k].data(), svd.v.data() + i * cols, 4 * cols) == 0;
      }
      ASSERT_TRUE(found) << "atom " << k << " of step " << step;
    }
  }
  // E[count] = sum p = 3; the count's variance is sum p(1-p) <= 3.
  mean_count /= draws;
  EXPECT_NEAR(mean_count, 3.0, 5.0 * std::sqrt(3.0 / draws));
}

TEST(Atomo, DeterministicPerRankAndStep) {
  auto c = builtin_registry().make_codec("atomo:atoms=entry,budget=10");
  const auto g = test::random_gradient(500, 8);
  const StepContext ctx{.seed = 1, .step = 2, .rank = 3, .bucket = 4};
  EXPECT_EQ(test::encode(*c, g, ctx), test::encode(*c, g, ctx));
  StepContext other = ctx;
  other.rank = 4;
  EXPECT_NE(test::encode(*c, g, ctx), test::encode(*c, g, other)) << "per-rank randomness";

  auto s = builtin_registry().make_codec("atomo:budget=2");
  const auto m = low_rank(20, 25, 20, 2);
  const StepContext mctx{.seed = 1, .step = 2, .rank = 3, .bucket = 4, .rows = 20};
  EXPECT_EQ(test::encode(*s, m, mctx), test::encode(*s, m, mctx));
}

TEST(Atomo, EntrywiseSendsSaturatedEntriesExactlyAndTheRestAtOneMagnitude) {
  // |g| = 100 and 50 saturate at s = 3 (see HandComputedCases); the others are sent,
  // when drawn, as sign * T / s' = +-4.
  const std::vector<float> g = {1, -50, 1, 100, -1, 1};
  auto c = builtin_registry().make_codec("atomo:atoms=entry,budget=3");
  std::vector<double> mean(g.size(), 0.0);
  const int draws = 20000;
  for (int step = 0; step < draws; ++step) {
    const auto msg = test::encode(*c, g, {.seed = 3, .step = static_cast<std::uint64_t>(step)});
    const auto pl = test::payload_of(msg);
    const std::uint32_t count = load_le<std::uint32_t>(pl.data());
    ASSERT_EQ(pl.size(), 4 + 8 * count);
    for (std::uint32_t k = 0; k < count; ++k) {
      const std::uint32_t i = load_le<std::uint32_t>(pl.data() + 4 + 4 * k);
      const float v = load_le<float>(pl.data() + 4 + 4 * count + 4 * k);
      if (k > 0) {
        ASSERT_GT(i, load_le<std::uint32_t>(pl.data() + 4 * k));
      }
      ASSERT_EQ(v, std::fabs(g[i]) >= 50 ? g[i] : std::copysign(4.0f, g[i])) << i;
    }
    const auto d = test::decode(*c, msg, g.size());
    for (std::size_t i = 0; i < g.size(); ++i) mean[i] += d[i];
  }
  // p = 1/4 for the small entries: the mean of +-4 * Bernoulli(1/4) has standard
  // deviation 4 * sqrt(3/16 / draws).
  for (std::size_t i = 0; i < g.size(); ++i) {
    EXPECT_NEAR(mean[i] / draws, g[i], 5 * 4 * std::sqrt(3.0 / 16 / draws)) << i;
  }
}

TEST(Atomo, EntrywiseWithBudgetAboveTheNonzeroCountSendsThemAll) {
  auto c = builtin_registry().make_codec("atomo:atoms=entry,budget=5");
  const std::vector<float> g = {0, 2, 0, -3, 0, 0, 1e-30f, 0};
  const auto msg = test::encode(*c, g, {.seed = 9});
  EXPECT_EQ(test::payload_of(msg),
            test::bytes_of({3,    0,    0,    0,    1,    0,    0,    0,
                            3,    0,    0,    0,    6,    0,    0,    0,     // indices
                            0x00, 0x00, 0x00, 0x40, 0x00, 0x00, 0x40, 0xC0,  // 2, -3
                            0x60, 0x42, 0xA2, 0x0D}));                       // 1e-30f
  EXPECT_EQ(test::decode(*c, msg, g.size()), g);
}

TEST(Atomo, ZeroGradientsSendNoAtoms) {
  for (const char* spec : {"atomo", "atomo:atoms=entry"}) {
    auto c = builtin_registry().make_codec(spec);
    const std::vector<float> g(60, 0.0f);
    const auto msg = test::encode(*c, g, {.rows = 6});
    EXPECT_EQ(msg.size(), kHeaderBytes + (std::string(spec) == "atomo" ? 12u : 4u)) << spec;
    EXPECT_EQ(test::decode(*c, msg, 60), g);
  }
}

TEST(Atomo, NonFiniteInputIsRejected) {
  for (const char* spec : {"atomo", "atomo:atoms=entry"}) {
    auto c = builtin_registry().make_codec(spec);
    for (float bad : {NAN, INFINITY, -INFINITY}) {
      std::vector<float> g(40, 1.0f);
      g[17] = bad;
      std::vector<std::byte> out(c->max_encoded_bytes(40));
      EXPECT_THROW(c->encode(g, {.rows = 4}, out), InvalidArgument) << spec;
    }
  }
}

// max_encoded_bytes is reached: the shape maximising min(r,c)(1+r+c) among r*c = n
// with every atom kept. n = 36: 6 x 6 gives 6 * 13 floats.
TEST(Atomo, MaxEncodedBytesIsExactAndTight) {
  auto c = builtin_registry().make_codec("atomo:budget=1e9");
  EXPECT_EQ(c->max_encoded_bytes(0), kHeaderBytes + 12);
  EXPECT_EQ(c->max_encoded_bytes(1), kHeaderBytes + 12 + 4 * 3);
  EXPECT_EQ(c->max_encoded_bytes(7), kHeaderBytes + 12 + 4 * 9);
  EXPECT_EQ(c->max_encoded_bytes(36), kHeaderBytes + 12 + 4 * 78);
  const std::size_t n = 36;
  const auto g = low_rank(6, 6, 6, 12);
  std::size_t largest = 0;
  for (std::uint32_t rows : {1u, 2u, 3u, 4u, 6u, 9u, 12u, 18u, 36u}) {
    const auto msg = test::encode(*c, g, {.rows = rows});
    EXPECT_LE(msg.size(), c->max_encoded_bytes(n));
    largest = std::max(largest, msg.size());
  }
  EXPECT_EQ(largest, c->max_encoded_bytes(n));
  auto e = builtin_registry().make_codec("atomo:atoms=entry,budget=1e9");
  EXPECT_EQ(test::encode(*e, g).size(), e->max_encoded_bytes(n));
}

// Unbiasedness with the tolerance derived from the estimator's exact variance: atoms
// are independent Bernoulli(p_k) draws, so element j of the decoded message has
// Var_j = sum_k (1/p_k - 1) (lambda_k a_k[j])^2, and the mean of D draws lies within
// 5 sqrt(Var_j / D) of the expectation. The expectation is sum_k lambda_k a_k[j]
// computed in float, i.e. g up to the decomposition's rounding (1e-5 relative).
TEST(Atomo, SpectralIsUnbiased) {
  const std::size_t rows = 12, cols = 10, n = rows * cols;
  const auto g = low_rank(rows, cols, 10, 31, 0.7f);
  detail::ThinSvd svd;
  detail::thin_svd(g, rows, cols, svd);
  for (double s : {1.0, 3.0}) {
    SCOPED_TRACE("budget " + std::to_string(s));
    const std::span<const float> sigma(svd.sigma.data(), svd.rank);
    std::vector<double> p(svd.rank);
    detail::atomo_probabilities(sigma, detail::atomo_cut(sigma, s), p);
    std::vector<double> var(n, 0.0);
    for (std::size_t k = 0; k < svd.rank; ++k) {
      if (p[k] == 0.0) continue;
      for (std::size_t i = 0; i < rows; ++i) {
        for (std::size_t j = 0; j < cols; ++j) {
          const double x = double(sigma[k]) * svd.u[k * rows + i] * svd.v[k * cols + j];
          var[i * cols + j] += (1.0 / p[k] - 1.0) * x * x;
        }
      }
    }
    auto c = builtin_registry().make_codec("atomo:budget=" + std::to_string(s));
    const int draws = 20000;
    std::vector<double> sum(n, 0.0);
    for (int step = 0; step < draws; ++step) {
      const auto msg =
          test::encode(*c, g, {.seed = 7, .step = static_cast<std::uint64_t>(step), .rows = rows});
      const auto d = test::decode(*c, msg, n);
      for (std::size_t i = 0; i < n; ++i) sum[i] += d[i];
    }
    double g_norm = 0.0;
    for (float x : g) g_norm += double(x) * x;
    g_norm = std::sqrt(g_norm);
    for (std::size_t i = 0; i < n; ++i) {
      EXPECT_NEAR(sum[i] / draws, g[i], 5.0 * std::sqrt(var[i] / draws) + 1e-5 * g_norm) << i;
    }
  }
}

TEST(Atomo, EntrywiseIsUnbiased) {
  const std::size_t n = 200;
  auto g = test::random_gradient(n, 41);
  g[3] = 40.0f;  // saturates
  g[7] = 0.0f;
  const double s = 12.0;
  std::vector<double> p(n);
  detail::atomo_probabilities(g, detail::atomo_cut(g, s), p);
  auto c = builtin_registry().make_codec("atomo:atoms=entry,budget=12");
  const int draws = 40000;
  std::vector<double> sum(n, 0.0);
  for (int step = 0; step < draws; ++step) {
    const auto msg = test::encode(*c, g, {.seed = 8, .step = static_cast<std::uint64_t>(step)});
    const auto d = test::decode(*c, msg, n);
    for (std::size_t i = 0; i < n; ++i) sum[i] += d[i];
  }
  for (std::size_t i = 0; i < n; ++i) {
    // Var = (1/p - 1) g^2 for a single Bernoulli(p) atom.
    const double var = p[i] > 0.0 ? (1.0 / p[i] - 1.0) * double(g[i]) * g[i] : 0.0;
    EXPECT_NEAR(sum[i] / draws, g[i], 5.0 * std::sqrt(var / draws) + 1e-6 * std::fabs(g[i]))
        << i << " p=" << p[i];
  }
}

// The keep decision is x < p * 2^64 for the 64-bit x = hi.bits(i) << 32 | lo.bits(i),
// checked against x86's 64-bit-mantissa long double (exact for both sides), including
// probabilities far below 2^-32 and high words that tie with the threshold.
TEST(AtomoProbabilities, KeepDecisionIsExactTo64Bits) {
  const CounterRng hi(11), lo(12);
  auto reference = [&](std::uint32_t i, double p) {
    const std::uint64_t x = std::uint64_t{hi.bits(i)} << 32 | lo.bits(i);
    return static_cast<long double>(x) < std::ldexp(static_cast<long double>(p), 64);
  };
  static_assert(std::numeric_limits<long double>::digits >= 64, "reference needs 64 bits");
  std::size_t kept_tiny = 0;
  for (std::uint32_t i = 0; i < 200000; ++i) {
    for (double p : {0.0, 1e-300, 0x1.0p-40, 1e-9, 0.3, 0.5, 1.0 - 0x1.0p-53, 1.0, 2.0}) {
      ASSERT_EQ(detail::atomo_keep(hi, lo, i, p), reference(i, p)) << i << " p=" << p;
    }
    // A p whose high-word threshold equals this counter's high word: the low word decides.
    const double tie = (double(hi.bits(i)) + double(lo.bits(i) ^ 1u) * 0x1.0p-32) * 0x1.0p-32;
    ASSERT_EQ(detail::atomo_keep(hi, lo, i, tie), reference(i, tie)) << i << " tie";
    kept_tiny += detail::atomo_keep(hi, lo, i, 0x1.0p-10);
  }
  EXPECT_NEAR(double(kept_tiny), 200000.0 / 1024, 5 * std::sqrt(200000.0 / 1024));
}

}  // namespace
}  // namespace gradcomp
