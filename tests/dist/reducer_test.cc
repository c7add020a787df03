// Reducers over real Gloo groups (one thread per rank) against a single-process
// simulation: every rank's gradients are a deterministic function of (rank, step,
// bucket), so each rank can rebuild all W memories, encode every rank's message and
// decode them in rank order -- the mean the reducer must produce. The allgather path
// must match it bit for bit; the allreduce path sums compressed regions in Gloo's ring
// order (fp16 sums round in fp16), so it matches within a tolerance.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "dist_test_support.h"
#include "gradcomp/dist/reducers.h"
#include "gradcomp/error.h"
#include "support/test_support.h"

namespace gradcomp::dist {
namespace {

using test::run_ranks;

const std::vector<std::size_t> kBucketSizes = {0, 1, 7, 1000, 33};
constexpr std::size_t kDenseBucket = 4;  // passed with compressed == false
constexpr int kSteps = 3;
constexpr std::uint64_t kSeed = 1234;

std::uint32_t bucket_id(std::size_t b) { return static_cast<std::uint32_t>(10 + b); }

std::vector<float> gradient_of(int rank, int step, std::size_t b, bool integers) {
  const std::uint64_t key = 1000003ull * static_cast<std::uint64_t>(rank) + 7919ull * step + b;
  return integers ? gradcomp::test::integer_gradient(kBucketSizes[b], key, 8)
                  : gradcomp::test::random_gradient(kBucketSizes[b], key);
}

struct Case {
  std::string spec;
  ReducerKind kind;
  std::string mode;       // describe() prefix
  bool exact;             // bit-identical to the simulation
  float tolerance;        // otherwise: |got - want| <= tolerance * (1 + |want|)
  bool error_feedback;    // check conservation through state()
  bool integers = false;  // integer-valued gradients
};

const std::vector<Case> kCases = {
    {"none", ReducerKind::kAuto, "dense", false, 1e-6f, false, true},
    {"none", ReducerKind::kDense, "dense", false, 1e-6f, false},
    {"none", ReducerKind::kAllreduce, "allreduce(", false, 1e-6f, false},
    {"none", ReducerKind::kAllgather, "allgather(", true, 0, false},
    {"randomk:ratio=0.25", ReducerKind::kAuto, "allreduce(", false, 1e-5f, true},
    {"randomk:ratio=0.25,rescale=true", ReducerKind::kAuto, "allreduce(", false, 1e-5f, false},
    {"fp16", ReducerKind::kAuto, "allreduce(", false, 4e-3f, false},
    {"ef(fp16)", ReducerKind::kAllreduce, "allreduce(", false, 4e-3f, true},
    {"fp16:format=bf16", ReducerKind::kAuto, "allreduce(", false, 2e-2f, false},
    // Forced allgather: the simulation gathers every message (kAuto may send a bucket
    // dense for a step; DenseFallback below).
    {"topk:ratio=0.1", ReducerKind::kAllgather, "allgather(", true, 0, true},
    {"2bit", ReducerKind::kAllgather, "allgather(", true, 0, true},
    {"qsgd", ReducerKind::kAllgather, "allgather(", true, 0, false},
    {"randomk:ratio=0.25", ReducerKind::kAllgather, "allgather(", true, 0, true},
};

void check_case(const Case& c, int world) {
  SCOPED_TRACE(c.spec + " " + to_string(c.kind) + " world " + std::to_string(world));
  run_ranks(world, [&](Communicator& comm) {
    const auto reducer = make_reducer(c.spec, c.kind, comm, kBucketSizes);
    ASSERT_EQ(reducer->describe().rfind(c.mode, 0), 0u) << reducer->describe();
    const bool dense = c.mode == "dense";
    const float inv_w = 1.0f / static_cast<float>(world);

    // The simulation: W memories per bucket (skipped when dense).
    const CodecRegistry& registry = builtin_registry();
    const auto codec = registry.make_codec_of(c.spec);
    std::vector<std::vector<std::unique_ptr<Memory>>> sim(static_cast<std::size_t>(world));
    for (auto& per_rank : sim) {
      for (std::size_t n : kBucketSizes) per_rank.push_back(registry.make_memory(c.spec, n));
    }

    std::vector<std::vector<float>> sum_got(kBucketSizes.size());
    std::vector<std::vector<float>> sum_in(kBucketSizes.size());
    for (std::size_t b = 0; b < kBucketSizes.size(); ++b) {
      sum_got[b].assign(kBucketSizes[b], 0.0f);
      sum_in[b].assign(kBucketSizes[b], 0.0f);
    }

    for (int step = 0; step < kSteps; ++step) {
      std::vector<std::vector<float>> grads;
      std::vector<BucketRef> refs;
      for (std::size_t b = 0; b < kBucketSizes.size(); ++b) {
        grads.push_back(gradient_of(comm.rank(), step, b, c.integers));
      }
      for (std::size_t b = 0; b < kBucketSizes.size(); ++b) {
        refs.push_back({bucket_id(b), grads[b], b != kDenseBucket});
      }
      reducer->reduce(refs, {kSeed, static_cast<std::uint64_t>(step), 0, 0});

      for (std::size_t b = 0; b < kBucketSizes.size(); ++b) {
        const std::size_t n = kBucketSizes[b];
        std::vector<float> want(n, 0.0f);
        if (dense || b == kDenseBucket) {
          for (int r = 0; r < world; ++r) {
            const auto g = gradient_of(r, step, b, c.integers);
            for (std::size_t i = 0; i < n; ++i) want[i] += g[i];
          }
          for (float& x : want) x /= static_cast<float>(world);
        } else {
          for (int r = 0; r < world; ++r) {
            const auto g = gradient_of(r, step, b, c.integers);
            auto& mem = *sim[static_cast<std::size_t>(r)][b];
            std::vector<std::byte> msg(mem.max_encoded_bytes());
            const StepContext ctx{kSeed, static_cast<std::uint64_t>(step),
                                  static_cast<std::uint32_t>(r), bucket_id(b)};
            msg.resize(mem.compress(g, ctx, msg));
            codec->decode_add(msg, want, inv_w);
          }
        }
        for (std::size_t i = 0; i < n; ++i) {
          if (c.exact && !dense && b != kDenseBucket) {
            ASSERT_EQ(grads[b][i], want[i]) << "step " << step << " bucket " << b << " i " << i;
          } else {
            // Dense sums run in Gloo's ring order, not rank order: a few ulps.
            const float tol = std::max(c.tolerance, 1e-6f);
            ASSERT_LE(std::fabs(grads[b][i] - want[i]), tol * (1 + std::fabs(want[i])))
                << "step " << step << " bucket " << b << " i " << i << " got " << grads[b][i]
                << " want " << want[i] << " " << c.spec << " world " << world;
          }
          sum_got[b][i] += grads[b][i];
        }
        for (int r = 0; r < world; ++r) {
          const auto g = gradient_of(r, step, b, c.integers);
          for (std::size_t i = 0; i < n; ++i) sum_in[b][i] += g[i] * inv_w;
        }

        // Every rank holds the same bucket, bit for bit.
        std::vector<std::byte> all;
        std::vector<std::size_t> offsets;
        comm.allgather_bytes(std::as_bytes(std::span<const float>(grads[b])), all, offsets);
        for (int r = 1; r < world && n > 0; ++r) {
          ASSERT_EQ(
              std::memcmp(all.data(), all.data() + offsets[static_cast<std::size_t>(r)], 4 * n), 0)
              << "rank " << r << " differs from rank 0 in bucket " << b;
        }
      }
    }

    // state(): this rank's memories, in bucket order, equal to the simulation's, each
    // named after its bucket ("bucket<id>.residual").
    auto state = reducer->state();
    if (dense) {
      EXPECT_TRUE(state.empty());
    } else {
      std::vector<StateBuffer> sim_state;
      std::uint32_t bucket_id = 0;
      for (auto& m : sim[static_cast<std::size_t>(comm.rank())]) {
        for (auto& s : m->state()) {
          sim_state.push_back({"bucket" + std::to_string(bucket_id) + "." + s.name, s.data});
        }
        ++bucket_id;
      }
      ASSERT_EQ(state.size(), sim_state.size());
      for (std::size_t k = 0; k < state.size(); ++k) {
        ASSERT_EQ(state[k].name, sim_state[k].name);
        ASSERT_EQ(state[k].data.size(), sim_state[k].data.size());
        for (std::size_t i = 0; i < state[k].data.size(); ++i) {
          ASSERT_EQ(state[k].data[i], sim_state[k].data[i]);
        }
      }
    }

    // Error feedback conserves: sum of means + mean residual = mean of inputs.
    if (c.error_feedback) {
      ASSERT_EQ(state.size(), kBucketSizes.size());
      for (std::size_t b = 0; b < kBucketSizes.size(); ++b) {
        std::vector<float> residual(state[b].data.begin(), state[b].data.end());
        comm.allreduce_sum(residual);
        for (std::size_t i = 0; i < kBucketSizes[b]; ++i) {
          const float lhs = sum_got[b][i] + residual[i] * inv_w;
          // Exact up to float rounding -- except that an fp16 allreduce rounds the SUM
          // in fp16, and that rounding is outside every rank's error feedback.
          const float tol = std::max(1e-4f, c.tolerance) * kSteps;
          ASSERT_NEAR(lhs, sum_in[b][i], tol * (1 + std::fabs(sum_in[b][i])))
              << c.spec << " world " << world << " bucket " << b << " i " << i;
        }
      }
    }

    const ReduceStats stats = reducer->take_stats();
    EXPECT_EQ(stats.steps, static_cast<std::uint64_t>(kSteps));
    if (world == 1) {
      EXPECT_EQ(stats.bytes_sent, 0u);
    } else {
      EXPECT_GT(stats.bytes_sent, 0u);
    }
    if (dense) {
      std::uint64_t bytes = 0;
      for (std::size_t n : kBucketSizes) bytes += 4 * n;
      const auto w = static_cast<std::uint64_t>(world);
      EXPECT_EQ(stats.bytes_sent, kSteps * (2 * (w - 1) * bytes / w));
    }
    EXPECT_EQ(reducer->take_stats().steps, 0u);
  });
}

TEST(DistReducer, MatchesSimulationForEveryPath) {
  for (const Case& c : kCases) {
    for (int world : {1, 2, 3, 5}) check_case(c, world);
  }
}

TEST(DistReducer, AllCompressedBucketsEmpty) {
  // Only empty compressed buckets: the gather has nothing to send and no data round.
  run_ranks(3, [&](Communicator& comm) {
    const std::vector<std::size_t> sizes = {0, 0};
    const auto reducer = make_reducer("topk:ratio=0.5", ReducerKind::kAuto, comm, sizes);
    std::vector<BucketRef> refs = {{0, {}, true}, {1, {}, true}};
    reducer->reduce(refs, {});
    // topk messages of n = 0 still have a header, so there is a data round.
    EXPECT_EQ(reducer->take_stats().steps, 1u);
  });
}

// kAuto's dense fallback: a bucket whose gathered messages would outweigh the dense
// allreduce goes into it instead, through its memory's compress_dense (error feedback:
// g + e, with e emptied), on every rank alike; a bucket whose messages are small is
// gathered. At W = 2, (W-1) m > 2(W-1)/W * 4n means m > 4n bytes.
TEST(DistReducer, DenseFallbackWhenGatheringCostsMoreBytes) {
  run_ranks(2, [&](Communicator& comm) {
    const std::vector<std::size_t> sizes = {1000, 2000};
    // ratio 0.9: 8 bytes per kept entry, 7.2n > 4n; ratio 0.01 on the second: 0.08n.
    for (const auto& [spec, fallbacks] :
         {std::pair<std::string, std::uint64_t>{"ef(topk:ratio=0.9,select=exact)", 2},
          {"ef(topk:ratio=0.01,select=exact)", 0}}) {
      const auto reducer = make_reducer(spec, ReducerKind::kAuto, comm, sizes);
      const auto forced = make_reducer(spec, ReducerKind::kAllgather, comm, sizes);
      for (int step = 0; step < 2; ++step) {
        std::vector<std::vector<float>> mine, copy;
        std::vector<BucketRef> refs, forced_refs;
        for (std::size_t b = 0; b < sizes.size(); ++b) {
          mine.push_back(gradcomp::test::integer_gradient(sizes[b], 100 * comm.rank() + b, 8));
        }
        copy = mine;
        for (std::size_t b = 0; b < sizes.size(); ++b) {
          refs.push_back({static_cast<std::uint32_t>(b), mine[b], true});
          forced_refs.push_back({static_cast<std::uint32_t>(b), copy[b], true});
        }
        StepContext ctx;
        ctx.step = static_cast<std::uint64_t>(step);
        reducer->reduce(refs, ctx);
        forced->reduce(forced_refs, ctx);
        const ReduceStats stats = reducer->take_stats();
        EXPECT_EQ(stats.dense_fallbacks, fallbacks) << spec;
        EXPECT_EQ(forced->take_stats().dense_fallbacks, 0u) << spec;
        if (fallbacks == 0) {
          for (std::size_t b = 0; b < sizes.size(); ++b) EXPECT_EQ(mine[b], copy[b]) << spec;
          continue;
        }
        // Integer gradients and an empty residual (every element was sent last step):
        // the dense mean is exact.
        for (std::size_t b = 0; b < sizes.size(); ++b) {
          std::vector<float> want(sizes[b]);
          const auto a = gradcomp::test::integer_gradient(sizes[b], b, 8);
          const auto c = gradcomp::test::integer_gradient(sizes[b], 100 + b, 8);
          for (std::size_t i = 0; i < sizes[b]; ++i) want[i] = (a[i] + c[i]) * 0.5f;
          EXPECT_EQ(mine[b], want) << spec << " bucket " << b << " step " << step;
        }
        for (const StateBuffer& st : reducer->state()) {
          EXPECT_TRUE(std::all_of(st.data.begin(), st.data.end(), [](float v) { return v == 0; }))
              << st.name << ": compress_dense empties the residual";
        }
      }
    }
  });
}

// A Method's traits (dense_only, momentum_in_memory, the reducer's description) are what
// the reducer built from it says, learned without building one.
TEST(DistReducer, MethodTraitsMatchTheReducer) {
  run_ranks(1, [](Communicator& comm) {
    const std::vector<std::size_t> sizes = {4096, 100};
    for (const char* spec :
         {"none", "ef(none)", "fp16", "randomk:ratio=0.1", "topk:ratio=0.01", "efm(2bit)",
          "noef(qsgd)", "dgc:density=0.001", "dgc:density=0.01,correction=false", "powersgd:rank=2",
          "sketched-sgd", "fetchsgd", "atomo:budget=2"}) {
      for (ReducerKind kind : {ReducerKind::kAuto, ReducerKind::kDense, ReducerKind::kAllreduce,
                               ReducerKind::kAllgather}) {
        std::unique_ptr<Reducer> r;
        try {
          r = make_reducer(spec, kind, comm, sizes);
        } catch (const InvalidArgument&) {
          continue;  // a combination make_reducer refuses (a scheme under --reducer dense)
        }
        // What the Method says without building anything is what the reducer does.
        const Method m = Method::parse(spec, {.reducer = kind});
        EXPECT_EQ(m.dense_only(), r->dense_only()) << spec << " " << to_string(kind);
        EXPECT_EQ(m.momentum_in_memory(), r->momentum_in_memory())
            << spec << " " << to_string(kind);
        EXPECT_EQ(describe_reducer(m), r->describe()) << spec << " " << to_string(kind);
      }
    }
  });
  EXPECT_THROW((void)Method::parse("nosuch"), InvalidArgument);
}

// Each rank's fp16 values are finite, but their sum may leave fp16's range (a diverging
// run): one line that says so, on every rank, not a corrupt message. A sum within the
// range passes.
TEST(DistReducer, AnFp16SumPastItsRangeIsNamedAsAnOverflow) {
  run_ranks(2, [&](Communicator& comm) {
    const std::vector<std::size_t> sizes = {4};
    const auto reducer = make_reducer("fp16", ReducerKind::kAuto, comm, sizes);
    std::vector<float> g = {1.0f, -30000.0f, 2.0f, 3.0f};
    std::vector<BucketRef> refs = {{0, g, true}};
    reducer->reduce(refs, {});
    EXPECT_EQ(g[1], -30000.0f);
    g = {1.0f, 2.0f, -40000.0f, 3.0f};
    try {
      reducer->reduce(refs, {});
      ADD_FAILURE() << "no error";
    } catch (const CorruptMessage& e) {
      ADD_FAILURE() << "named as corrupt: " << e.what();
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()),
                "allreduce: bucket 0: the ranks' fp16 values summed past fp16's range (65504) "
                "at value 2 of the sum: a diverging run, or values too large for fp16 "
                "(fp16:format=bf16 has fp32's range)");
    }
  });
}

TEST(DistReducer, RejectsMismatchedBucketsAndForcedAllreduce) {
  run_ranks(1, [&](Communicator& comm) {
    const std::vector<std::size_t> sizes = {4};
    EXPECT_THROW(make_reducer("topk", ReducerKind::kAllreduce, comm, sizes), InvalidArgument);
    EXPECT_THROW(make_reducer("nosuchcodec", ReducerKind::kDense, comm, sizes), InvalidArgument);
    EXPECT_THROW(parse_reducer_kind("ring"), InvalidArgument);
    EXPECT_EQ(parse_reducer_kind("allgather"), ReducerKind::kAllgather);
    const auto reducer = make_reducer("topk", ReducerKind::kAuto, comm, sizes);
    std::vector<float> g(5);
    std::vector<BucketRef> refs = {{0, g, true}};
    EXPECT_THROW(reducer->reduce(refs, {}), InvalidArgument);
    EXPECT_THROW(reducer->reduce({}, {}), InvalidArgument);
  });
}

}  // namespace
}  // namespace gradcomp::dist
