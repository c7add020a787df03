// The scatter reducer over real Gloo groups (one thread per rank) against a single-process
// simulation of its two phases: every rank rebuilds all W ranks' slice memories and all W
// owners' memories, encodes every slice, decodes each owner's mean in rank order,
// compresses it and decodes the result. The reducer must match it bit for bit on every
// rank, conserve the gradient through both error feedbacks, and move 2(W-1)/W of a
// message per rank.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "../../src/dist/scatter_reducer.h"
#include "dist_test_support.h"
#include "gradcomp/dist/reducers.h"
#include "gradcomp/error.h"
#include "support/test_support.h"

namespace gradcomp::dist {
namespace {

using test::run_ranks;

const std::vector<std::size_t> kSizes = {0, 1, 7, 1000, 33, 5};
constexpr std::size_t kDenseBucket = 4;  // passed with compressed == false
constexpr int kSteps = 3;
constexpr std::uint64_t kSeed = 99;

std::uint32_t bucket_id(std::size_t b) { return static_cast<std::uint32_t>(3 + b); }

std::vector<float> gradient_of(int rank, int step, std::size_t b) {
  return gradcomp::test::random_gradient(kSizes[b], 7919ull * rank + 31ull * step + b);
}

std::size_t slice_begin(std::size_t n, std::size_t w, std::size_t j) {
  return j * (n / w) + std::min(j, n % w);
}
std::size_t slice_length(std::size_t n, std::size_t w, std::size_t j) {
  return n / w + (j < n % w ? 1 : 0);
}

struct Case {
  std::string spec;
  bool owner_feedback;  // the owners keep a residual
};

void check_case(const Case& c, int world) {
  SCOPED_TRACE(c.spec + " world " + std::to_string(world));
  const auto w = static_cast<std::size_t>(world);
  run_ranks(world, [&](Communicator& comm) {
    const Method method = Method::parse(c.spec, {.reducer = ReducerKind::kScatter});
    std::vector<BucketShape> shapes;
    for (std::size_t b = 0; b < kSizes.size(); ++b)
      shapes.push_back({bucket_id(b), kSizes[b], true, 0});
    const auto reducer = make_reducer(method, comm, shapes);
    ASSERT_EQ(reducer->describe().rfind("scatter(", 0), 0u) << reducer->describe();
    const float inv_w = 1.0f / static_cast<float>(world);
    const auto codec = method.codec();

    // sim_slices[r][b][j]: rank r's memory of slice j; sim_owner[b][j]: owner j's memory.
    std::vector<std::vector<std::vector<std::unique_ptr<Memory>>>> sim_slices(w);
    std::vector<std::vector<std::unique_ptr<Memory>>> sim_owner(kSizes.size());
    for (std::size_t b = 0; b < kSizes.size(); ++b) {
      for (std::size_t j = 0; j < w; ++j) {
        const std::size_t len = slice_length(kSizes[b], w, j);
        sim_owner[b].push_back(c.owner_feedback ? make_error_feedback(codec, len)
                                                : make_pass_through(codec, len));
      }
    }
    for (auto& per_rank : sim_slices) {
      per_rank.resize(kSizes.size());
      for (std::size_t b = 0; b < kSizes.size(); ++b) {
        for (std::size_t j = 0; j < w; ++j) {
          per_rank[b].push_back(method.make_memory(slice_length(kSizes[b], w, j)));
        }
      }
    }

    std::vector<std::vector<float>> sum_got(kSizes.size()), sum_in(kSizes.size());
    for (std::size_t b = 0; b < kSizes.size(); ++b) {
      sum_got[b].assign(kSizes[b], 0.0f);
      sum_in[b].assign(kSizes[b], 0.0f);
    }
    for (int step = 0; step < kSteps; ++step) {
      std::vector<std::vector<float>> grads;
      std::vector<BucketRef> refs;
      for (std::size_t b = 0; b < kSizes.size(); ++b)
        grads.push_back(gradient_of(comm.rank(), step, b));
      for (std::size_t b = 0; b < kSizes.size(); ++b) {
        refs.push_back({bucket_id(b), grads[b], b != kDenseBucket});
      }
      reducer->reduce(refs, {kSeed, static_cast<std::uint64_t>(step), 0, 0});

      for (std::size_t b = 0; b < kSizes.size(); ++b) {
        const std::size_t n = kSizes[b];
        std::vector<float> want(n, 0.0f);
        if (b == kDenseBucket) {
          for (int r = 0; r < world; ++r) {
            const auto g = gradient_of(r, step, b);
            for (std::size_t i = 0; i < n; ++i) want[i] += g[i];
          }
          for (float& x : want) x *= inv_w;
        } else {
          for (std::size_t j = 0; j < w; ++j) {
            const std::size_t len = slice_length(n, w, j);
            if (len == 0) continue;
            const std::size_t at = slice_begin(n, w, j);
            std::vector<float> mean(len, 0.0f);
            for (std::size_t r = 0; r < w; ++r) {
              const auto g = gradient_of(static_cast<int>(r), step, b);
              auto& mem = *sim_slices[r][b][j];
              std::vector<std::byte> msg(mem.max_encoded_bytes());
              const StepContext ctx{
                  kSeed, static_cast<std::uint64_t>(step), static_cast<std::uint32_t>(r),
                  scatter_slice_stream(bucket_id(b), j, false), static_cast<std::uint32_t>(w)};
              msg.resize(mem.compress(std::span<const float>(g).subspan(at, len), ctx, msg));
              codec->decode_add(msg, mean, inv_w);
            }
            auto& owner = *sim_owner[b][j];
            std::vector<std::byte> msg(owner.max_encoded_bytes());
            const StepContext ctx{
                kSeed, static_cast<std::uint64_t>(step), static_cast<std::uint32_t>(j),
                scatter_slice_stream(bucket_id(b), j, true), static_cast<std::uint32_t>(w)};
            msg.resize(owner.compress(mean, ctx, msg));
            codec->decode_add(msg, std::span<float>(want).subspan(at, len), 1.0f);
          }
        }
        for (std::size_t i = 0; i < n; ++i) {
          // The uncompressed bucket too: fp32 slices summed in rank order by their owner.
          ASSERT_EQ(grads[b][i], want[i]) << "step " << step << " bucket " << b << " i " << i;
          sum_got[b][i] += grads[b][i];
        }
        for (int r = 0; r < world; ++r) {
          const auto g = gradient_of(r, step, b);
          for (std::size_t i = 0; i < n; ++i) sum_in[b][i] += g[i] * inv_w;
        }
      }
    }

    // state(): this rank's slice memories then its owner memory, per bucket, named for them.
    const auto state = reducer->state();
    std::vector<std::string> names;
    for (std::size_t b = 0; b < kSizes.size(); ++b) {
      const std::string prefix = "bucket" + std::to_string(bucket_id(b)) + ".";
      for (std::size_t j = 0; j < w; ++j) {
        for (auto& s : sim_slices[static_cast<std::size_t>(comm.rank())][b][j]->state()) {
          names.push_back(prefix + "slice" + std::to_string(j) + "." + s.name);
        }
      }
      for (auto& s : sim_owner[b][static_cast<std::size_t>(comm.rank())]->state()) {
        names.push_back(prefix + "owner." + s.name);
      }
    }
    ASSERT_EQ(state.size(), names.size());
    for (std::size_t k = 0; k < state.size(); ++k) EXPECT_EQ(state[k].name, names[k]);

    // Conservation: what arrived + the owners' residuals + the mean of the ranks' residuals
    // = the mean of what went in (the simulation holds every rank's memories).
    if (c.owner_feedback) {
      for (std::size_t b = 0; b < kSizes.size(); ++b) {
        if (b == kDenseBucket) continue;
        std::vector<float> lhs = sum_got[b];
        for (std::size_t j = 0; j < w; ++j) {
          const std::size_t at = slice_begin(kSizes[b], w, j);
          const auto owner_state = sim_owner[b][j]->state();
          for (std::size_t i = 0; i < owner_state[0].data.size(); ++i)
            lhs[at + i] += owner_state[0].data[i];
          for (std::size_t r = 0; r < w; ++r) {
            const auto st = sim_slices[r][b][j]->state();
            for (std::size_t i = 0; i < st[0].data.size(); ++i)
              lhs[at + i] += st[0].data[i] * inv_w;
          }
        }
        for (std::size_t i = 0; i < kSizes[b]; ++i) {
          ASSERT_NEAR(lhs[i], sum_in[b][i], 1e-4f * kSteps * (1 + std::fabs(sum_in[b][i])))
              << "bucket " << b << " i " << i;
        }
      }
    }

    // Bytes: each rank sends every other rank its slice of each bucket, and its owned slice's
    // mean: in slots of the codec's bound, or of fp32 values for the uncompressed bucket.
    const ReduceStats stats = reducer->take_stats();
    EXPECT_EQ(stats.steps, static_cast<std::uint64_t>(kSteps));
    std::uint64_t per_step = 0;
    const auto me = static_cast<std::size_t>(comm.rank());
    for (std::size_t b = 0; b < kSizes.size(); ++b) {
      const auto slot = [&](std::size_t len) -> std::uint64_t {
        if (len == 0) return 0;
        return b == kDenseBucket ? 4 * len : codec->max_encoded_bytes(len);
      };
      for (std::size_t j = 0; j < w; ++j) {
        if (j != me) per_step += slot(slice_length(kSizes[b], w, j));
      }
      per_step += (w - 1) * slot(slice_length(kSizes[b], w, me));
    }
    EXPECT_EQ(stats.bytes_sent, world > 1 ? kSteps * per_step : 0u);
  });
}

TEST(ScatterReducer, MatchesTheTwoPhaseSimulation) {
  const std::vector<Case> cases = {
      {"int", true},                        // bare biased: error feedback at both ends
      {"ef(int:bits=8,block=5)", true},     //
      {"noef(int:bits=2,block=3)", false},  // no memory anywhere
      {"fp16", false},                      // unbiased, stateless
      {"qsgd:levels=4,bucket=16", false},   // stochastic: per-slice RNG streams
      {"ef(topk:ratio=0.2)", true},         //
      {"2bit", true},                       // variable-size messages in fixed slots
  };
  for (const Case& c : cases) {
    for (int world : {1, 2, 3, 5}) check_case(c, world);
  }
}

TEST(ScatterReducer, TheMethodRefusesWhatItCannotRun) {
  EXPECT_EQ(Method::parse("int", {.reducer = ReducerKind::kScatter}).reducer(),
            ReducerKind::kScatter);
  EXPECT_EQ(parse_reducer_kind("scatter"), ReducerKind::kScatter);
  EXPECT_STREQ(to_string(ReducerKind::kScatter), "scatter");
  try {
    (void)Method::parse("dgc", {.reducer = ReducerKind::kScatter});
    ADD_FAILURE() << "dgc under scatter was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("scatter runs a codec under ef, efm, noef or bare"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW((void)Method::parse("powersgd", {.reducer = ReducerKind::kScatter}),
               InvalidArgument);
}

}  // namespace
}  // namespace gradcomp::dist
