// The PowerSGD reducer scheme over real Gloo groups (one thread per rank) against a
// single-process simulation of docs/algorithms/low-rank.md in double precision: P = sum_w (g_w +
// e_w) Q, Gram-Schmidt, Q = mean_w M_w^T P, out = P Q^T, e_w = M_w - out. Plus: a rank-r matrix
// comes back to float tolerance, the size rule, dense buckets and dense steps, error
// feedback conservation, warm start through state(), byte counts, bad parameters.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "dist_test_support.h"
#include "gradcomp/dist/reducers.h"
#include "gradcomp/dist/schemes.h"
#include "gradcomp/error.h"
#include "gradcomp/kernels/low_rank.h"
#include "gradcomp/rng.h"
#include "support/test_support.h"

namespace gradcomp::dist {
namespace {

using test::run_ranks;

constexpr std::uint64_t kSeed = 77;

// A mix of every path: two matrices that compress, a fused bucket (rows 0), a matrix
// that fails the size rule, the dense bucket, an empty bucket.
const std::vector<BucketShape> kShapes = {
    {10, 40 * 50, true, 40},   // compressed (2000 > 2*2*90)
    {11, 300, true, 0},        // fused: dense
    {12, 6 * 8, true, 6},      // 48 <= 2*2*14: dense
    {13, 17, false, 0},        // the dense bucket
    {14, 10 * 200, true, 10},  // compressed (2000 > 2*2*210)
    {15, 0, true, 0},          // empty
};

std::vector<float> gradient_of(int rank, int step, std::size_t b) {
  const std::uint64_t key = 1000003ull * static_cast<std::uint64_t>(rank) + 7919ull * step + b;
  return gradcomp::test::random_gradient(kShapes[b].numel, key);
}

bool low_rank(const BucketShape& s, std::size_t r) {
  if (!s.compressible || s.rows == 0) return false;
  const std::size_t cols = s.numel / s.rows;
  return s.rows * cols > 2 * r * (s.rows + cols);
}

// ---- the simulation (double precision, column-major factors as in low_rank.h)

struct SimConfig {
  std::size_t rank = 2;
  bool error_feedback = true;
  bool warm_start = true;
};

struct Simulation {
  SimConfig cfg;
  int world;
  std::vector<std::vector<std::vector<double>>> e;  // [bucket][rank]
  std::vector<std::vector<double>> q;               // [bucket]

  Simulation(SimConfig c, int w) : cfg(c), world(w), e(kShapes.size()), q(kShapes.size()) {
    for (std::size_t b = 0; b < kShapes.size(); ++b) {
      if (!low_rank(kShapes[b], cfg.rank)) continue;
      e[b].assign(static_cast<std::size_t>(w), std::vector<double>(kShapes[b].numel, 0.0));
      q[b].assign(kShapes[b].numel / kShapes[b].rows * cfg.rank, 0.0);
    }
  }

  // The mean-gradient estimate of every bucket for this step.
  std::vector<std::vector<double>> step(int t, const std::vector<bool>& compressed) {
    std::vector<std::vector<double>> out(kShapes.size());
    for (std::size_t b = 0; b < kShapes.size(); ++b) {
      const BucketShape& s = kShapes[b];
      out[b].assign(s.numel, 0.0);
      if (!low_rank(s, cfg.rank) || !compressed[b]) {
        for (int w = 0; w < world; ++w) {
          const auto g = gradient_of(w, t, b);
          for (std::size_t i = 0; i < s.numel; ++i) out[b][i] += g[i];
        }
        for (double& x : out[b]) x /= world;
        continue;
      }
      const std::size_t rows = s.rows, cols = s.numel / s.rows, r = cfg.rank;
      // Q columns: drawn when zero (or always without warm start).
      StepContext c{kSeed, static_cast<std::uint64_t>(t), 0, s.id};
      const CounterRng rng = CounterRng::for_step(c, RngScope::kShared);
      for (std::size_t k = 0; k < r; ++k) {
        bool zero = true;
        for (std::size_t j = 0; j < cols; ++j) zero = zero && q[b][k * cols + j] == 0;
        if (zero || !cfg.warm_start) {
          std::vector<float> col(cols);
          kernels::lr_fill_normal(rng, static_cast<std::uint32_t>(k * cols), col);
          for (std::size_t j = 0; j < cols; ++j) q[b][k * cols + j] = col[j];
        }
      }
      std::vector<std::vector<double>> m(static_cast<std::size_t>(world));
      for (int w = 0; w < world; ++w) {
        const auto g = gradient_of(w, t, b);
        auto& mw = m[static_cast<std::size_t>(w)];
        mw.assign(s.numel, 0.0);
        for (std::size_t i = 0; i < s.numel; ++i) {
          mw[i] = g[i] + (cfg.error_feedback ? e[b][static_cast<std::size_t>(w)][i] : 0.0);
        }
      }
      std::vector<double> p(rows * r, 0.0);
      for (const auto& mw : m) {
        for (std::size_t k = 0; k < r; ++k) {
          for (std::size_t i = 0; i < rows; ++i) {
            for (std::size_t j = 0; j < cols; ++j) {
              p[k * rows + i] += mw[i * cols + j] * q[b][k * cols + j];
            }
          }
        }
      }
      // Classical Gram-Schmidt in double (well-conditioned random P: no drops).
      for (std::size_t k = 0; k < r; ++k) {
        for (std::size_t c2 = 0; c2 < k; ++c2) {
          double d = 0;
          for (std::size_t i = 0; i < rows; ++i) d += p[c2 * rows + i] * p[k * rows + i];
          for (std::size_t i = 0; i < rows; ++i) p[k * rows + i] -= d * p[c2 * rows + i];
        }
        double n = 0;
        for (std::size_t i = 0; i < rows; ++i) n += p[k * rows + i] * p[k * rows + i];
        n = std::sqrt(n);
        for (std::size_t i = 0; i < rows; ++i) p[k * rows + i] /= n;
      }
      std::fill(q[b].begin(), q[b].end(), 0.0);
      for (const auto& mw : m) {
        for (std::size_t k = 0; k < r; ++k) {
          for (std::size_t i = 0; i < rows; ++i) {
            for (std::size_t j = 0; j < cols; ++j) {
              q[b][k * cols + j] += mw[i * cols + j] * p[k * rows + i] / world;
            }
          }
        }
      }
      for (std::size_t i = 0; i < rows; ++i) {
        for (std::size_t j = 0; j < cols; ++j) {
          double o = 0;
          for (std::size_t k = 0; k < r; ++k) o += p[k * rows + i] * q[b][k * cols + j];
          out[b][i * cols + j] = o;
        }
      }
      if (cfg.error_feedback) {
        for (int w = 0; w < world; ++w) {
          auto& ew = e[b][static_cast<std::size_t>(w)];
          for (std::size_t i = 0; i < s.numel; ++i) {
            ew[i] = m[static_cast<std::size_t>(w)][i] - out[b][i];
          }
        }
      }
    }
    return out;
  }
};

double max_abs(std::span<const double> x) {
  double m = 0;
  for (double v : x) m = std::max(m, std::abs(v));
  return m;
}

// |got - want| <= tol * max|want| elementwise.
void expect_close(std::span<const float> got, std::span<const double> want, double tol,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const double scale = std::max(max_abs(want), 1e-30);
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_LE(std::abs(got[i] - want[i]), tol * scale)
        << what << " i " << i << " got " << got[i] << " want " << want[i];
  }
}

void check_against_simulation(const std::string& spec, SimConfig cfg, int world) {
  SCOPED_TRACE(spec + " world " + std::to_string(world));
  constexpr int kSteps = 4;
  // Step 1 is a dense step (the trainer's --dense-steps flag, mid-run here).
  auto compressed_at = [](int t) { return t != 1; };
  Simulation sim(cfg, world);
  std::vector<std::vector<std::vector<double>>> want;  // [step][bucket]
  for (int t = 0; t < kSteps; ++t) {
    std::vector<bool> c(kShapes.size(), compressed_at(t));
    for (std::size_t b = 0; b < kShapes.size(); ++b) c[b] = c[b] && kShapes[b].compressible;
    want.push_back(sim.step(t, c));
  }
  run_ranks(world, [&](Communicator& comm) {
    const auto reducer = make_reducer(spec, ReducerKind::kAuto, comm, kShapes);
    for (int t = 0; t < kSteps; ++t) {
      std::vector<std::vector<float>> grads;
      std::vector<BucketRef> refs;
      for (std::size_t b = 0; b < kShapes.size(); ++b)
        grads.push_back(gradient_of(comm.rank(), t, b));
      for (std::size_t b = 0; b < kShapes.size(); ++b) {
        refs.push_back({kShapes[b].id, grads[b], kShapes[b].compressible && compressed_at(t)});
      }
      reducer->reduce(refs, {kSeed, static_cast<std::uint64_t>(t), 0, 0});
      for (std::size_t b = 0; b < kShapes.size(); ++b) {
        expect_close(grads[b], want[static_cast<std::size_t>(t)][b], 2e-4,
                     "step " + std::to_string(t) + " bucket " + std::to_string(b));
        // Every rank holds the same bucket, bit for bit.
        std::vector<std::byte> all;
        std::vector<std::size_t> offsets;
        comm.allgather_bytes(std::as_bytes(std::span<const float>(grads[b])), all, offsets);
        for (int r = 1; r < world && !grads[b].empty(); ++r) {
          ASSERT_EQ(std::memcmp(all.data(), all.data() + offsets[static_cast<std::size_t>(r)],
                                4 * grads[b].size()),
                    0)
              << "rank " << r << " differs from rank 0 in bucket " << b;
        }
      }
    }
    // state(): residual (with feedback) and Q of each low-rank bucket, in bucket order.
    const auto state = reducer->state();
    std::size_t k = 0;
    for (std::size_t b = 0; b < kShapes.size(); ++b) {
      if (!low_rank(kShapes[b], cfg.rank)) continue;
      const std::string prefix = "bucket" + std::to_string(kShapes[b].id) + ".";
      if (cfg.error_feedback) {
        ASSERT_LT(k, state.size());
        EXPECT_EQ(state[k].name, prefix + "residual");
        expect_close(state[k].data, sim.e[b][static_cast<std::size_t>(comm.rank())], 2e-4,
                     state[k].name);
        ++k;
      }
      ASSERT_LT(k, state.size());
      EXPECT_EQ(state[k].name, prefix + "q");
      expect_close(state[k].data, sim.q[b], 2e-4, state[k].name);
      ++k;
    }
    EXPECT_EQ(k, state.size());
  });
}

TEST(PowerSgd, MatchesSimulation) {
  for (int world = 1; world <= 4; ++world) {
    check_against_simulation("powersgd:rank=2", {}, world);
  }
  check_against_simulation("powersgd:rank=3,warm_start=false", {3, true, false}, 3);
  check_against_simulation("powersgd:rank=1,error_feedback=false", {1, false, true}, 2);
}

TEST(PowerSgd, DescribesItsCanonicalSpec) {
  run_ranks(1, [&](Communicator& comm) {
    const auto r = make_reducer("powersgd:rank=3", ReducerKind::kAuto, comm, kShapes);
    EXPECT_EQ(r->describe(), "powersgd:rank=3,warmup_steps=0,error_feedback=1,warm_start=1");
    EXPECT_FALSE(r->momentum_in_memory());
  });
  const SchemeInfo* s = find_scheme("powersgd");
  ASSERT_NE(s, nullptr);
  EXPECT_FALSE(s->summary.empty());
  for (const auto& e : s->examples) EXPECT_NO_THROW(Method::parse(e)) << e;
}

// A rank-r matrix, the same on every rank (so the mean is the matrix itself), comes back
// to float tolerance, and its residual stays at rounding level.
TEST(PowerSgd, RecoversARankRMatrix) {
  for (int world : {1, 3}) {
    for (std::size_t r : {1, 2, 4}) {
      SCOPED_TRACE("world " + std::to_string(world) + " rank " + std::to_string(r));
      const kernels::LowRankShape s{96, 80, r};
      const auto a = gradcomp::test::random_gradient(s.p_size(), 100 + r);
      const auto bq = gradcomp::test::random_gradient(s.q_size(), 200 + r);
      std::vector<float> m(s.m_size());
      kernels::lr_reconstruct_ref(s, a, bq, m);
      double scale = 0;
      for (float v : m) scale = std::max(scale, double{std::abs(v)});
      const std::vector<BucketShape> shapes = {{3, s.m_size(), true, s.rows}};
      run_ranks(world, [&](Communicator& comm) {
        const auto reducer =
            make_reducer("powersgd:rank=" + std::to_string(r), ReducerKind::kAuto, comm, shapes);
        for (int t = 0; t < 3; ++t) {
          std::vector<float> g = m;
          const BucketRef ref{3, g, true};
          reducer->reduce(std::span<const BucketRef>(&ref, 1),
                          {kSeed, static_cast<std::uint64_t>(t), 0, 0});
          double worst = 0;
          for (std::size_t i = 0; i < g.size(); ++i) {
            worst = std::max(worst, double{std::abs(g[i] - m[i])});
          }
          EXPECT_LT(worst, 1e-5 * scale) << "step " << t;
          const auto state = reducer->state();
          ASSERT_EQ(state.size(), 2u);
          double e_max = 0;
          for (float v : state[0].data) e_max = std::max(e_max, double{std::abs(v)});
          EXPECT_LT(e_max, 1e-5 * scale) << "step " << t;
        }
      });
    }
  }
}

// rank 2 on a rank-1 matrix: Gram-Schmidt drops P's dependent column; its Q column is
// zero afterwards and is redrawn the next step. Nothing becomes NaN, the matrix is
// recovered, a zero gradient gives zeros.
TEST(PowerSgd, RankDeficientAndZeroGradients) {
  const kernels::LowRankShape s{64, 48, 1};
  const auto a = gradcomp::test::random_gradient(s.p_size(), 5);
  const auto bq = gradcomp::test::random_gradient(s.q_size(), 6);
  std::vector<float> m(s.m_size());
  kernels::lr_reconstruct_ref(s, a, bq, m);
  const std::vector<BucketShape> shapes = {{0, s.m_size(), true, s.rows}};
  run_ranks(2, [&](Communicator& comm) {
    const auto reducer = make_reducer("powersgd:rank=2", ReducerKind::kAuto, comm, shapes);
    for (int t = 0; t < 4; ++t) {
      std::vector<float> g = t == 2 ? std::vector<float>(m.size(), 0.0f) : m;
      const BucketRef ref{0, g, true};
      reducer->reduce(std::span<const BucketRef>(&ref, 1),
                      {kSeed, static_cast<std::uint64_t>(t), 0, 0});
      for (std::size_t i = 0; i < g.size(); ++i) {
        ASSERT_TRUE(std::isfinite(g[i])) << "step " << t;
        // Step 2's input is zero but M = 0 + e (rounding-level): out ~ 0.
        const float want = t == 2 ? 0.0f : m[i];
        ASSERT_NEAR(g[i], want, 1e-4) << "step " << t << " i " << i;
      }
      // Q's second column is zero after a step on a rank-1 matrix (steps 0 and 1: from
      // step 2 on, M = m + e holds e's rounding-level noise at full rank, which P's second
      // column may legitimately pick up).
      const auto state = reducer->state();
      ASSERT_EQ(state.size(), 2u);
      ASSERT_EQ(state[1].data.size(), 2 * s.cols);
      if (t < 2) {
        for (std::size_t j = 0; j < s.cols; ++j) {
          ASSERT_EQ(state[1].data[s.cols + j], 0.0f) << "step " << t << " j " << j;
        }
      }
    }
  });
}

// The skip rule at its boundary: rows * cols <= 2 r (rows + cols) stays dense.
TEST(PowerSgd, SizeRule) {
  struct Case {
    std::size_t rows, cols, r;
    bool compressed;
  };
  const std::vector<Case> cases = {
      {4, 4, 1, false},    {5, 5, 1, true},     {8, 8, 2, false},   {9, 9, 2, true},
      {10, 1536, 2, true}, {4, 1000, 2, false}, {5, 1000, 2, true}, {1000, 4, 2, false},
      {40, 50, 8, true},   {1, 5000, 1, false}, {16, 16, 4, false}, {17, 17, 4, true},
  };
  run_ranks(1, [&](Communicator& comm) {
    for (const Case& c : cases) {
      SCOPED_TRACE(std::to_string(c.rows) + "x" + std::to_string(c.cols) + " r" +
                   std::to_string(c.r));
      EXPECT_EQ(c.compressed, c.rows * c.cols > 2 * c.r * (c.rows + c.cols));
      const std::vector<BucketShape> shapes = {{7, c.rows * c.cols, true, c.rows}};
      const auto reducer =
          make_reducer("powersgd:rank=" + std::to_string(c.r), ReducerKind::kAuto, comm, shapes);
      EXPECT_EQ(reducer->state().size(), c.compressed ? 2u : 0u);
      // A dense bucket comes back unchanged at world 1 (sum / 1).
      auto g = gradcomp::test::random_gradient(c.rows * c.cols, 3);
      const auto before = g;
      const BucketRef ref{7, g, true};
      reducer->reduce(std::span<const BucketRef>(&ref, 1), {kSeed, 0, 0, 0});
      if (!c.compressed) {
        EXPECT_TRUE(gradcomp::test::same_bits(g, before));
      }
    }
  });
}

// Dense warm-up: warmup_steps (PyTorch's start_powerSGD_iter) and compressed == false
// both average densely and leave e and Q alone.
TEST(PowerSgd, DenseWarmUp) {
  const std::vector<BucketShape> shapes = {{0, 40 * 50, true, 40}};
  run_ranks(2, [&](Communicator& comm) {
    const auto reducer = make_reducer("powersgd:warmup_steps=2", ReducerKind::kAuto, comm, shapes);
    for (int t = 0; t < 4; ++t) {
      auto g = gradcomp::test::random_gradient(shapes[0].numel, 10 * t + comm.rank());
      const auto g0 = gradcomp::test::random_gradient(shapes[0].numel, 10 * t);
      const auto g1 = gradcomp::test::random_gradient(shapes[0].numel, 10 * t + 1);
      const bool compressed = t != 3;  // step 3: the trainer says dense
      const BucketRef ref{0, g, compressed};
      reducer->reduce(std::span<const BucketRef>(&ref, 1),
                      {kSeed, static_cast<std::uint64_t>(t), 0, 0});
      const auto state = reducer->state();
      ASSERT_EQ(state.size(), 2u);
      bool e_zero = true;
      for (float v : state[0].data) e_zero = e_zero && v == 0.0f;
      if (t < 2 || t == 3) {
        for (std::size_t i = 0; i < g.size(); ++i) {
          ASSERT_FLOAT_EQ(g[i], (g0[i] + g1[i]) * 0.5f) << "step " << t;
        }
      }
      if (t < 2) {
        EXPECT_TRUE(e_zero) << "step " << t;
      }
      if (t >= 2) {
        EXPECT_FALSE(e_zero) << "step " << t;
      }
    }
  });
}

// e after a dense step equals e before it; Q too.
TEST(PowerSgd, DenseStepLeavesStateAlone) {
  const std::vector<BucketShape> shapes = {{0, 40 * 50, true, 40}};
  run_ranks(2, [&](Communicator& comm) {
    const auto reducer = make_reducer("powersgd:rank=2", ReducerKind::kAuto, comm, shapes);
    auto g = gradcomp::test::random_gradient(shapes[0].numel, 1 + comm.rank());
    BucketRef ref{0, g, true};
    reducer->reduce(std::span<const BucketRef>(&ref, 1), {kSeed, 0, 0, 0});
    std::vector<std::vector<float>> before;
    for (const auto& s : reducer->state()) before.emplace_back(s.data.begin(), s.data.end());
    const auto g2 = gradcomp::test::random_gradient(shapes[0].numel, 5 + comm.rank());
    std::copy(g2.begin(), g2.end(), g.begin());  // ref.grad points into g
    ref.compressed = false;
    reducer->reduce(std::span<const BucketRef>(&ref, 1), {kSeed, 1, 0, 0});
    const auto after = reducer->state();
    ASSERT_EQ(after.size(), before.size());
    for (std::size_t k = 0; k < after.size(); ++k) {
      EXPECT_TRUE(gradcomp::test::same_bits(after[k].data, before[k])) << after[k].name;
    }
  });
}

// Error feedback conserves on every rank: sum of outputs + e_final = sum of inputs
// (e_w = M_w - out telescopes), up to float rounding.
TEST(PowerSgd, ErrorFeedbackConserves) {
  const std::vector<BucketShape> shapes = {{0, 30 * 70, true, 30}, {1, 64 * 20, true, 64}};
  constexpr int kSteps = 6;
  run_ranks(3, [&](Communicator& comm) {
    const auto reducer = make_reducer("powersgd:rank=2", ReducerKind::kAuto, comm, shapes);
    std::vector<std::vector<double>> sum_in(shapes.size()), sum_out(shapes.size());
    for (std::size_t b = 0; b < shapes.size(); ++b) {
      sum_in[b].assign(shapes[b].numel, 0.0);
      sum_out[b].assign(shapes[b].numel, 0.0);
    }
    for (int t = 0; t < kSteps; ++t) {
      std::vector<std::vector<float>> grads;
      std::vector<BucketRef> refs;
      for (std::size_t b = 0; b < shapes.size(); ++b) {
        grads.push_back(
            gradcomp::test::random_gradient(shapes[b].numel, 1000 * t + 10 * b + comm.rank()));
        for (std::size_t i = 0; i < shapes[b].numel; ++i) sum_in[b][i] += grads[b][i];
      }
      for (std::size_t b = 0; b < shapes.size(); ++b) refs.push_back({shapes[b].id, grads[b]});
      reducer->reduce(refs, {kSeed, static_cast<std::uint64_t>(t), 0, 0});
      for (std::size_t b = 0; b < shapes.size(); ++b) {
        for (std::size_t i = 0; i < shapes[b].numel; ++i) sum_out[b][i] += grads[b][i];
      }
    }
    const auto state = reducer->state();
    ASSERT_EQ(state.size(), 4u);
    for (std::size_t b = 0; b < shapes.size(); ++b) {
      const auto& e = state[2 * b].data;
      ASSERT_EQ(e.size(), shapes[b].numel);
      for (std::size_t i = 0; i < e.size(); ++i) {
        ASSERT_NEAR(sum_out[b][i] + e[i], sum_in[b][i],
                    1e-5 * kSteps * (1 + std::abs(sum_in[b][i])))
            << "bucket " << b << " i " << i;
      }
    }
  });
}

// Warm start lives in state(): a fresh reducer given another's state continues exactly
// where it left off (what a checkpoint restore does).
TEST(PowerSgd, StateRestoresWarmStart) {
  const std::vector<BucketShape> shapes = {{4, 40 * 50, true, 40}};
  run_ranks(1, [&](Communicator& comm) {
    const auto a = make_reducer("powersgd:rank=2", ReducerKind::kAuto, comm, shapes);
    const auto b = make_reducer("powersgd:rank=2", ReducerKind::kAuto, comm, shapes);
    for (int t = 0; t < 3; ++t) {
      auto g = gradcomp::test::random_gradient(shapes[0].numel, 50 + t);
      const BucketRef ref{4, g, true};
      a->reduce(std::span<const BucketRef>(&ref, 1), {kSeed, static_cast<std::uint64_t>(t), 0, 0});
    }
    auto sa = a->state();
    auto sb = b->state();
    ASSERT_EQ(sa.size(), sb.size());
    for (std::size_t k = 0; k < sa.size(); ++k) {
      std::copy(sa[k].data.begin(), sa[k].data.end(), sb[k].data.begin());
    }
    auto ga = gradcomp::test::random_gradient(shapes[0].numel, 99);
    auto gb = ga;
    const BucketRef ra{4, ga, true}, rb{4, gb, true};
    a->reduce(std::span<const BucketRef>(&ra, 1), {kSeed, 3, 0, 0});
    b->reduce(std::span<const BucketRef>(&rb, 1), {kSeed, 3, 0, 0});
    EXPECT_TRUE(gradcomp::test::same_bits(ga, gb));
    // Without the restored Q, b would have drawn a fresh one: a different result.
    const auto c = make_reducer("powersgd:rank=2", ReducerKind::kAuto, comm, shapes);
    auto sc = c->state();
    std::copy(sa[0].data.begin(), sa[0].data.end(), sc[0].data.begin());  // e only
    auto gc = gradcomp::test::random_gradient(shapes[0].numel, 99);
    const BucketRef rc{4, gc, true};
    c->reduce(std::span<const BucketRef>(&rc, 1), {kSeed, 3, 0, 0});
    EXPECT_FALSE(gradcomp::test::same_bits(ga, gc));
  });
}

// Bytes on the wire: two allreduces of r (rows + cols) floats per compressed matrix plus
// the dense buckets; ring allreduce sends 2 (W-1)/W of the buffer.
TEST(PowerSgd, ByteCounts) {
  run_ranks(2, [&](Communicator& comm) {
    const auto reducer = make_reducer("powersgd:rank=2", ReducerKind::kAuto, comm, kShapes);
    std::vector<std::vector<float>> grads;
    std::vector<BucketRef> refs;
    for (std::size_t b = 0; b < kShapes.size(); ++b)
      grads.push_back(gradient_of(comm.rank(), 0, b));
    for (std::size_t b = 0; b < kShapes.size(); ++b) {
      refs.push_back({kShapes[b].id, grads[b], kShapes[b].compressible});
    }
    reducer->reduce(refs, {kSeed, 0, 0, 0});
    std::uint64_t p_floats = 0, q_floats = 0;
    for (const BucketShape& s : kShapes) {
      if (low_rank(s, 2)) {
        p_floats += 2 * s.rows;
        q_floats += 2 * (s.numel / s.rows);
      } else {
        p_floats += s.numel;
      }
    }
    const ReduceStats st = reducer->take_stats();
    // W = 2: each allreduce sends 2 * 1/2 * B = B bytes.
    EXPECT_EQ(st.bytes_sent, 4 * (p_floats + q_floats));
    EXPECT_EQ(st.bytes_received, 4 * (p_floats + q_floats));
    EXPECT_EQ(st.steps, 1u);
    EXPECT_GE(st.encode_seconds, 0.0);
    EXPECT_EQ(reducer->take_stats().steps, 0u);
  });
}

TEST(PowerSgd, BadParametersAndShapesThrow) {
  for (const char* spec :
       {"powersgd:rank=0", "powersgd:rank=65", "powersgd:rank=two", "powersgd:warmup_steps=-1",
        "powersgd:warm_start=maybe", "powersgd:ratio=0.1", "powersgd:rank=2,rank=3"}) {
    EXPECT_THROW(Method::parse(spec), InvalidArgument) << spec;
  }
  run_ranks(1, [&](Communicator& comm) {
    EXPECT_THROW(make_reducer("powersgd:rank=0", ReducerKind::kAuto, comm, kShapes),
                 InvalidArgument);
    // --reducer allgather / allreduce / dense cannot be combined with a scheme.
    for (ReducerKind k : {ReducerKind::kAllgather, ReducerKind::kAllreduce, ReducerKind::kDense}) {
      EXPECT_THROW(make_reducer("powersgd:rank=2", k, comm, kShapes), InvalidArgument)
          << to_string(k);
    }
    // 10 elements are not a matrix of 3 rows.
    const std::vector<BucketShape> bad = {{0, 10, true, 3}};
    EXPECT_THROW(make_reducer("powersgd:rank=2", ReducerKind::kAuto, comm, bad), InvalidArgument);
    // reduce() with buckets that do not match the construction.
    const auto reducer = make_reducer("powersgd:rank=2", ReducerKind::kAuto, comm, kShapes);
    std::vector<float> g(5);
    const BucketRef one{10, g, true};
    EXPECT_THROW(reducer->reduce(std::span<const BucketRef>(&one, 1), {}), InvalidArgument);
  });
}

// A non-finite gradient on one rank: every rank throws InvalidArgument after the first
// allreduce (they all hold the same sum), so none is left waiting in a collective.
TEST(PowerSgd, NonFiniteGradientThrowsOnEveryRank) {
  const std::vector<BucketShape> shapes = {{0, 40 * 50, true, 40}};
  std::vector<int> threw(3, 0);
  run_ranks(3, [&](Communicator& comm) {
    const auto reducer = make_reducer("powersgd:rank=2", ReducerKind::kAuto, comm, shapes);
    auto g = gradcomp::test::random_gradient(shapes[0].numel, 1);
    if (comm.rank() == 1) g[77] = std::numeric_limits<float>::infinity();
    const BucketRef ref{0, g, true};
    try {
      reducer->reduce(std::span<const BucketRef>(&ref, 1), {kSeed, 0, 0, 0});
    } catch (const InvalidArgument&) {
      threw[static_cast<std::size_t>(comm.rank())] = 1;
    }
    comm.barrier();  // the group is still in step
  });
  EXPECT_EQ(threw, std::vector<int>(3, 1));
}

}  // namespace
}  // namespace gradcomp::dist
