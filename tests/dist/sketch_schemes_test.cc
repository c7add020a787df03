// The count-sketch reducer schemes (sketched-sgd, fetchsgd) over real Gloo groups, one
// thread per rank, against a single-process simulation of the same math written with
// the scalar references (sketch_accumulate_ref, sketch_estimate_all_ref) and brute-force
// top-k (a stable sort). Gradients are integer-valued and momentum / lr / 1/W are
// powers of two where it matters, so every sum is exact whatever order Gloo's ring adds
// in, and the reducers must match the simulation bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "dist_test_support.h"
#include "gradcomp/dist/reducers.h"
#include "gradcomp/dist/schemes.h"
#include "gradcomp/error.h"
#include "gradcomp/kernels/count_sketch.h"
#include "gradcomp/rng.h"
#include "support/test_support.h"

namespace gradcomp::dist {
namespace {

using kernels::SketchHash;
using test::run_ranks;

// The schemes' hash streams (sketched_sgd.cc, fetchsgd.cc).
constexpr std::uint32_t kSketchedSgdStream = 0x55C4u;
constexpr std::uint32_t kFetchSgdStream = 0xFE7Cu;

constexpr std::uint64_t kSeed = 99;
// Bucket 3 is the dense bucket (not compressible); bucket 1 has a single element.
const std::vector<BucketShape> kShapes = {{10, 1500, true, 0},
                                          {11, 1, true, 0},
                                          {12, 301, true, 0},
                                          {13, 40, false, 0},
                                          {14, 0, true, 0}};

std::vector<float> gradient_of(int rank, int step, std::size_t b) {
  const std::uint64_t key = 1000003ull * static_cast<std::uint64_t>(rank) + 7919ull * step + b;
  return gradcomp::test::integer_gradient(kShapes[b].numel, key, 8);
}

// Indices of the k largest |x| (ties: lower index), ascending: a stable sort.
std::vector<std::uint32_t> brute_topk(std::span<const float> x, std::size_t k) {
  std::vector<std::uint32_t> order(x.size());
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) {
    return std::fabs(x[a]) > std::fabs(x[b]);
  });
  order.resize(std::min(k, x.size()));
  std::sort(order.begin(), order.end());
  return order;
}

std::vector<float> sketch_ref(const SketchHash& h, std::span<const float> x) {
  std::vector<float> t(h.cells(), 0.0f);
  kernels::sketch_accumulate_ref(h, x, 1.0f, t);
  return t;
}

std::vector<float> estimates_ref(const SketchHash& h, std::span<const float> t, std::size_t n) {
  std::vector<float> e(n);
  kernels::sketch_estimate_all_ref(h, t, e);
  return e;
}

struct Refs {
  std::vector<std::vector<float>> grads;
  std::vector<BucketRef> refs;
};

Refs make_refs(int rank, int step, bool compress = true) {
  Refs r;
  for (std::size_t b = 0; b < kShapes.size(); ++b) r.grads.push_back(gradient_of(rank, step, b));
  for (std::size_t b = 0; b < kShapes.size(); ++b) {
    r.refs.push_back({kShapes[b].id, r.grads[b], compress && kShapes[b].compressible});
  }
  return r;
}

void expect_same_on_all_ranks(Communicator& comm, std::span<const float> x) {
  if (x.empty()) return;
  std::vector<std::byte> all;
  std::vector<std::size_t> offsets;
  comm.allgather_bytes(std::as_bytes(x), all, offsets);
  for (int r = 1; r < comm.world_size(); ++r) {
    ASSERT_EQ(0, std::memcmp(all.data(), all.data() + offsets[r], x.size() * 4)) << "rank " << r;
  }
}

// ---- Sketched-SGD ---------------------------------------------------------------------

struct SketchedSgdSim {
  // u[w][b], v[w][b]
  std::vector<std::vector<std::vector<float>>> u, v;
  std::size_t k, p2;
  std::uint32_t rows, cols;
  float m;
  bool mask;  // zero u where the update lands

  SketchedSgdSim(int world, std::size_t k_, std::size_t p2_, std::uint32_t rows_,
                 std::uint32_t cols_, float m_, bool mask_ = true)
      : k(k_), p2(p2_), rows(rows_), cols(cols_), m(m_), mask(mask_) {
    u.resize(static_cast<std::size_t>(world));
    for (auto& per : u) {
      for (const BucketShape& s : kShapes) per.emplace_back(s.numel, 0.0f);
    }
    v = u;
  }

  // The mean gradient of bucket b (a compressible one) at `step`.
  std::vector<float> step(std::size_t b, int stp) {
    const std::size_t n = kShapes[b].numel;
    const auto world = static_cast<int>(u.size());
    StepContext c{.seed = kSeed, .step = static_cast<std::uint64_t>(stp), .bucket = kShapes[b].id};
    const SketchHash h(CounterRng::for_step(c, RngScope::kShared, kSketchedSgdStream).key(), rows,
                       cols);
    std::vector<float> table(h.cells(), 0.0f);
    for (int w = 0; w < world; ++w) {
      auto& uw = u[w][b];
      auto& vw = v[w][b];
      const auto g = gradient_of(w, stp, b);
      for (std::size_t i = 0; i < n; ++i) {
        uw[i] = m * uw[i] + g[i];
        vw[i] += uw[i];
      }
      const auto s = sketch_ref(h, vw);
      for (std::size_t c2 = 0; c2 < table.size(); ++c2) table[c2] += s[c2];
    }
    const auto est = estimates_ref(h, table, n);
    const auto cand = brute_topk(est, std::min(n, p2 * k));
    std::vector<float> sums(cand.size(), 0.0f);
    for (int w = 0; w < world; ++w) {
      for (std::size_t t = 0; t < cand.size(); ++t) sums[t] += v[w][b][cand[t]];
    }
    const auto pos = brute_topk(sums, k);
    std::vector<float> out(n, 0.0f);
    const float inv_w = 1.0f / static_cast<float>(world);
    for (std::uint32_t p : pos) {
      const std::uint32_t i = cand[p];
      out[i] = sums[p] * inv_w;
      for (int w = 0; w < world; ++w) {
        if (mask) u[w][b][i] = 0.0f;
        v[w][b][i] = 0.0f;
      }
    }
    return out;
  }
};

void check_sketched_sgd(int world, bool mask = true) {
  SCOPED_TRACE("world " + std::to_string(world) + (mask ? "" : ", mask=false"));
  run_ranks(world, [&](Communicator& comm) {
    const std::string spec = std::string("sketched-sgd:k=12,rows=3,cols=40,p2=3,momentum=0.5") +
                             (mask ? "" : ",mask=false");
    const auto reducer = make_reducer(spec, ReducerKind::kAuto, comm, kShapes);
    EXPECT_TRUE(reducer->momentum_in_memory());
    EXPECT_EQ(reducer->describe().rfind("sketched-sgd:", 0), 0u) << reducer->describe();
    SketchedSgdSim sim(world, 12, 3, 3, 40, 0.5f, mask);
    const float inv_w = 1.0f / static_cast<float>(world);
    for (int step = 0; step < 4; ++step) {
      Refs r = make_refs(comm.rank(), step);
      reducer->reduce(r.refs, {.seed = kSeed, .step = static_cast<std::uint64_t>(step)});
      for (std::size_t b = 0; b < kShapes.size(); ++b) {
        SCOPED_TRACE("step " + std::to_string(step) + " bucket " + std::to_string(b));
        const std::size_t n = kShapes[b].numel;
        if (n == 0) continue;
        std::vector<float> want(n, 0.0f);
        if (!kShapes[b].compressible) {
          for (int w = 0; w < world; ++w) {
            const auto g = gradient_of(w, step, b);
            for (std::size_t i = 0; i < n; ++i) want[i] += g[i];
          }
          for (float& x : want) x *= inv_w;
        } else {
          want = sim.step(b, step);
          // At most k coordinates move.
          EXPECT_LE(n - static_cast<std::size_t>(std::count(want.begin(), want.end(), 0.0f)), 12u);
        }
        ASSERT_TRUE(gradcomp::test::same_bits(r.grads[b], want));
        expect_same_on_all_ranks(comm, r.grads[b]);
      }
    }
    // state(): this rank's u and v of the compressible, non-empty buckets.
    const auto st = reducer->state();
    ASSERT_EQ(st.size(), 6u);
    std::size_t j = 0;
    for (std::size_t b = 0; b < kShapes.size(); ++b) {
      if (!kShapes[b].compressible || kShapes[b].numel == 0) continue;
      const auto rk = static_cast<std::size_t>(comm.rank());
      EXPECT_EQ(st[j].name, "bucket" + std::to_string(kShapes[b].id) + ".momentum");
      EXPECT_TRUE(gradcomp::test::same_bits(st[j].data, sim.u[rk][b]));
      EXPECT_TRUE(gradcomp::test::same_bits(st[j + 1].data, sim.v[rk][b]));
      j += 2;
    }
    // Stats: two rounds' bytes.
    const ReduceStats s = reducer->take_stats();
    EXPECT_EQ(s.steps, 4u);
    if (world > 1) {
      EXPECT_GT(s.bytes_sent, 0u);
    }
  });
}

TEST(SketchedSgd, MatchesSimulationWorld1) { check_sketched_sgd(1); }
TEST(SketchedSgd, MatchesSimulationWorld2) { check_sketched_sgd(2); }
TEST(SketchedSgd, MatchesSimulationWorld3) { check_sketched_sgd(3); }
TEST(SketchedSgd, MatchesSimulationWorld4) { check_sketched_sgd(4); }
// mask=false keeps the momentum u where the update lands (only v is cleared).
TEST(SketchedSgd, WithoutMaskingMatchesSimulationWorld2) { check_sketched_sgd(2, false); }
TEST(SketchedSgd, WithoutMaskingMatchesSimulationWorld3) { check_sketched_sgd(3, false); }

// Error accumulation loses nothing: with momentum 0 (u = g), W * (applied updates) plus
// every rank's residual v equals the sum of all gradients, exactly (integers).
TEST(SketchedSgd, ConservesTheGradientSumWithoutMomentum) {
  const int world = 2;
  run_ranks(world, [&](Communicator& comm) {
    const auto reducer = make_reducer("sketched-sgd:k=5,rows=3,cols=30,momentum=0",
                                      ReducerKind::kAuto, comm, kShapes);
    std::vector<float> applied(kShapes[0].numel, 0.0f), total(kShapes[0].numel, 0.0f);
    for (int step = 0; step < 6; ++step) {
      Refs r = make_refs(comm.rank(), step);
      for (int w = 0; w < world; ++w) {
        const auto g = gradient_of(w, step, 0);
        for (std::size_t i = 0; i < g.size(); ++i) total[i] += g[i];
      }
      reducer->reduce(r.refs, {.seed = kSeed, .step = static_cast<std::uint64_t>(step)});
      for (std::size_t i = 0; i < applied.size(); ++i) applied[i] += r.grads[0][i] * world;
    }
    const auto st = reducer->state();
    ASSERT_EQ(st[1].name, "bucket10.error");
    std::vector<float> residual(st[1].data.begin(), st[1].data.end());
    comm.allreduce_sum(residual);
    std::size_t moved = 0;
    for (std::size_t i = 0; i < applied.size(); ++i) {
      ASSERT_EQ(applied[i] + residual[i], total[i]) << i;
      moved += applied[i] != 0.0f;
    }
    EXPECT_GT(moved, 5u);
  });
}

// A compressible bucket in a dense step (--dense-steps) is the plain mean of g: the
// trainer's optimizer applies momentum on dense steps, so the scheme must not (it would
// be applied twice), and u, v stay untouched until compression starts.
TEST(SketchedSgd, DenseStepsAreThePlainMean) {
  run_ranks(2, [&](Communicator& comm) {
    const auto reducer =
        make_reducer("sketched-sgd:momentum=0.5", ReducerKind::kAuto, comm, kShapes);
    for (int step = 0; step < 3; ++step) {
      Refs r = make_refs(comm.rank(), step, /*compress=*/false);
      reducer->reduce(r.refs, {.seed = kSeed, .step = static_cast<std::uint64_t>(step)});
      std::vector<float> mean(kShapes[0].numel, 0.0f);
      for (int w = 0; w < 2; ++w) {
        const auto g = gradient_of(w, step, 0);
        for (std::size_t i = 0; i < g.size(); ++i) mean[i] += g[i];
      }
      for (float& x : mean) x *= 0.5f;
      ASSERT_TRUE(gradcomp::test::same_bits(r.grads[0], mean)) << "step " << step;
    }
    for (const StateBuffer& b : reducer->state()) {
      for (float x : b.data) ASSERT_EQ(x, 0.0f) << b.name;
    }
  });
}

// ---- FetchSGD --------------------------------------------------------------------------

struct FetchSgdSim {
  std::vector<std::vector<float>> su, se;  // per bucket
  std::size_t k;
  std::uint32_t rows, cols;
  float m;

  FetchSgdSim(std::size_t k_, std::uint32_t rows_, std::uint32_t cols_, float m_)
      : k(k_), rows(rows_), cols(cols_), m(m_) {
    for (std::size_t b = 0; b < kShapes.size(); ++b) {
      su.emplace_back(std::size_t{rows} * cols, 0.0f);
      se.emplace_back(std::size_t{rows} * cols, 0.0f);
    }
  }

  std::vector<float> step(std::size_t b, int stp, int world, float lr) {
    const std::size_t n = kShapes[b].numel;
    StepContext c{.seed = kSeed, .step = 0, .bucket = kShapes[b].id};
    const SketchHash h(CounterRng::for_step(c, RngScope::kShared, kFetchSgdStream).key(), rows,
                       cols);
    std::vector<float> sum(h.cells(), 0.0f);
    for (int w = 0; w < world; ++w) {
      const auto s = sketch_ref(h, gradient_of(w, stp, b));
      for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += s[i];
    }
    const float inv_w = 1.0f / static_cast<float>(world);
    auto& u = su[b];
    auto& e = se[b];
    for (std::size_t i = 0; i < u.size(); ++i) u[i] = m * u[i] + sum[i] * inv_w;
    std::vector<float> out(n, 0.0f);
    if (lr == 0.0f) return out;
    for (std::size_t i = 0; i < u.size(); ++i) e[i] += lr * u[i];
    const auto est = estimates_ref(h, e, n);
    const auto top = brute_topk(est, k);
    for (std::uint32_t i : top) out[i] = est[i] * (1.0f / lr);
    for (std::uint32_t i : top) {
      for (std::uint32_t j = 0; j < rows; ++j) {
        u[std::size_t{j} * cols + h.column(j, i)] = 0.0f;
        e[std::size_t{j} * cols + h.column(j, i)] = 0.0f;
      }
    }
    return out;
  }
};

void check_fetchsgd(int world) {
  SCOPED_TRACE("world " + std::to_string(world));
  run_ranks(world, [&](Communicator& comm) {
    const auto reducer = make_reducer("fetchsgd:k=10,rows=5,cols=64,momentum=0.5",
                                      ReducerKind::kAuto, comm, kShapes);
    EXPECT_TRUE(reducer->momentum_in_memory());
    FetchSgdSim sim(10, 5, 64, 0.5f);
    const float inv_w = 1.0f / static_cast<float>(world);
    // Step 2 runs with lr 0: nothing is applied, the error sketch keeps everything.
    const float lrs[] = {0.5f, 0.25f, 0.0f, 0.5f, 1.0f};
    for (int step = 0; step < 5; ++step) {
      Refs r = make_refs(comm.rank(), step);
      reducer->reduce(r.refs,
                      {.seed = kSeed, .step = static_cast<std::uint64_t>(step), .lr = lrs[step]});
      for (std::size_t b = 0; b < kShapes.size(); ++b) {
        SCOPED_TRACE("step " + std::to_string(step) + " bucket " + std::to_string(b));
        const std::size_t n = kShapes[b].numel;
        if (n == 0) continue;
        std::vector<float> want(n, 0.0f);
        if (!kShapes[b].compressible) {
          for (int w = 0; w < world; ++w) {
            const auto g = gradient_of(w, step, b);
            for (std::size_t i = 0; i < n; ++i) want[i] += g[i];
          }
          for (float& x : want) x *= inv_w;
        } else {
          want = sim.step(b, step, world, lrs[step]);
        }
        // 1/W is inexact for W = 3: the momentum update may then round differently
        // (FMA contraction) from the simulation's.
        if (world != 3) {
          ASSERT_TRUE(gradcomp::test::same_bits(r.grads[b], want));
        } else {
          for (std::size_t i = 0; i < n; ++i) ASSERT_TRUE(std::isfinite(r.grads[b][i]));
        }
        expect_same_on_all_ranks(comm, r.grads[b]);
      }
    }
    const auto st = reducer->state();
    ASSERT_EQ(st.size(), 6u);
    EXPECT_EQ(st[0].name, "bucket10.sketch_momentum");
    EXPECT_EQ(st[1].name, "bucket10.sketch_error");
    if (world != 3) {
      EXPECT_TRUE(gradcomp::test::same_bits(st[0].data, sim.su[0]));
      EXPECT_TRUE(gradcomp::test::same_bits(st[1].data, sim.se[0]));
    }
    expect_same_on_all_ranks(comm, st[1].data);
  });
}

TEST(FetchSgd, MatchesSimulationWorld1) { check_fetchsgd(1); }
TEST(FetchSgd, MatchesSimulationWorld2) { check_fetchsgd(2); }
TEST(FetchSgd, RanksAgreeWorld3) { check_fetchsgd(3); }
TEST(FetchSgd, MatchesSimulationWorld4) { check_fetchsgd(4); }

// ---- specs ----------------------------------------------------------------------------

TEST(SketchSchemes, ForcedReducerKindsAndBadParamsThrow) {
  run_ranks(1, [&](Communicator& comm) {
    for (const char* spec : {"sketched-sgd", "fetchsgd"}) {
      for (ReducerKind kind :
           {ReducerKind::kDense, ReducerKind::kAllreduce, ReducerKind::kAllgather}) {
        EXPECT_THROW(make_reducer(spec, kind, comm, kShapes), InvalidArgument) << spec;
      }
      EXPECT_NO_THROW(make_reducer(spec, ReducerKind::kAuto, comm, kShapes)) << spec;
    }
    for (const char* bad :
         {"sketched-sgd:p2=0", "sketched-sgd:rows=0", "sketched-sgd:rows=16", "sketched-sgd:k=-1",
          "sketched-sgd:ratio=0", "sketched-sgd:ratio=1.5", "sketched-sgd:momentum=1",
          "sketched-sgd:bogus=1", "fetchsgd:table=0", "fetchsgd:cols=-3", "fetchsgd:momentum=-0.1",
          "fetchsgd:p2=4", "fetchsgd:k=x"}) {
      EXPECT_THROW(make_reducer(bad, ReducerKind::kAuto, comm, kShapes), InvalidArgument) << bad;
      EXPECT_THROW(Method::parse(bad), InvalidArgument) << bad;
    }
  });
  ASSERT_NE(find_scheme("sketched-sgd"), nullptr);
  ASSERT_NE(find_scheme("fetchsgd"), nullptr);
  EXPECT_EQ(canonical_scheme_spec(*find_scheme("fetchsgd"), parse_spec("fetchsgd:k=3")),
            "fetchsgd:k=3,ratio=0.005,rows=1,cols=0,table=0.09,momentum=0.9");
}

}  // namespace
}  // namespace gradcomp::dist
