// The outer loop (local steps + exchanged pseudo-gradients) on 2-3 ranks in one process:
// against closed forms (averaging gives the mean of the replicas, Nesterov DiLoCo's rule),
// its streaming schedule, delayed merges, resume bit for bit, and its refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "dist_test_support.h"
#include "gradcomp/dist/outer_loop.h"
#include "gradcomp/error.h"

namespace gradcomp::dist {
namespace {

using test::run_ranks;

// A model of three tensors: a 40x40 matrix and a 33x65 one (compressed), a bias (dense).
const std::vector<ParamInfo> kParams = {
    {"a.weight", 40 * 40, 2, 40}, {"a.bias", 40, 1, 40}, {"b.weight", 33 * 65, 2, 33}};

struct Replica {
  std::vector<std::vector<float>> w;
  explicit Replica(int rank) {
    for (const ParamInfo& p : kParams) {
      std::vector<float> t(static_cast<std::size_t>(p.numel));
      for (std::size_t i = 0; i < t.size(); ++i) {
        t[i] = static_cast<float>((i * 37 + static_cast<std::size_t>(rank) * 11) % 97) / 97.0f;
      }
      w.push_back(std::move(t));
    }
  }
  std::vector<std::span<float>> spans() {
    std::vector<std::span<float>> out;
    for (auto& t : w) out.emplace_back(t);
    return out;
  }
  // One "inner step": a rank- and step-dependent move of every weight.
  void inner_step(int rank, std::int64_t step) {
    for (std::size_t p = 0; p < w.size(); ++p) {
      for (std::size_t i = 0; i < w[p].size(); ++i) {
        const auto x =
            static_cast<int>((i * 2654435761u + p * 97 + static_cast<std::size_t>(step) * 13 +
                              static_cast<std::size_t>(rank) * 7) %
                             1001);
        w[p][i] -= 0.001f * static_cast<float>(x - 500) / 64.0f;
      }
    }
  }
};

OuterLoopOptions options(std::int64_t h, const std::string& outer, int fragments = 1,
                         std::int64_t delay = 0) {
  OuterLoopOptions o;
  o.sync_every = h;
  o.outer = outer;
  o.fragments = fragments;
  o.delay = delay;
  o.seed = 7;
  return o;
}

Method method(const std::string& spec) { return Method::parse(spec, {.momentum = 0.0}); }

// Averaging with an exact exchange: after each round every replica holds the mean of the
// replicas (up to fp32 summation), and between rounds they drift apart.
TEST(OuterLoop, AveragingMakesEveryReplicaTheMean) {
  constexpr int kWorld = 3;
  std::vector<Replica> before_sync(kWorld, Replica(0));
  std::vector<Replica> after(kWorld, Replica(0));
  run_ranks(kWorld, [&](Communicator& comm) {
    const int r = comm.rank();
    Replica rep(r);
    OuterLoop loop(rep.spans(), kParams, comm, method("none"), options(4, "average"));
    for (std::int64_t s = 1; s <= 4; ++s) {
      rep.inner_step(r, s);
      if (s == 4) before_sync[static_cast<std::size_t>(r)] = rep;
      EXPECT_EQ(loop.after_inner_step(s), s == 4);
    }
    after[static_cast<std::size_t>(r)] = rep;
  });
  for (std::size_t p = 0; p < kParams.size(); ++p) {
    for (std::size_t i = 0; i < after[0].w[p].size(); ++i) {
      double mean = 0;
      for (const Replica& b : before_sync) mean += b.w[p][i];
      mean /= kWorld;
      for (int r = 0; r < kWorld; ++r) {
        ASSERT_NEAR(after[static_cast<std::size_t>(r)].w[p][i], mean, 1e-6) << p << " " << i;
      }
    }
  }
}

// DiLoCo's outer step: x <- x - lr (d + mu m), m <- mu m + d, with d the mean pseudo-
// gradient, over three rounds, against the formula in double precision.
TEST(OuterLoop, NesterovFollowsDiLoCosRule) {
  constexpr int kWorld = 2;
  constexpr double kLr = 0.7, kMu = 0.9;
  std::vector<std::vector<Replica>> locals(3, std::vector<Replica>(kWorld, Replica(0)));
  std::vector<Replica> result(kWorld, Replica(0));
  run_ranks(kWorld, [&](Communicator& comm) {
    const int r = comm.rank();
    Replica rep(r);
    OuterLoop loop(rep.spans(), kParams, comm, method("none"), options(3, "nesterov"));
    for (std::int64_t s = 1; s <= 9; ++s) {
      rep.inner_step(r, s);
      if (s % 3 == 0)
        locals[static_cast<std::size_t>(s / 3 - 1)][static_cast<std::size_t>(r)] = rep;
      loop.after_inner_step(s);
    }
    result[static_cast<std::size_t>(r)] = rep;
  });
  const Replica start(0);  // rank 0's weights, broadcast to every rank
  for (std::size_t p = 0; p < kParams.size(); ++p) {
    for (std::size_t i = 0; i < start.w[p].size(); ++i) {
      double x = start.w[p][i], m = 0;
      for (int round = 0; round < 3; ++round) {
        double d = 0;
        for (const Replica& l : locals[static_cast<std::size_t>(round)]) d += x - l.w[p][i];
        d /= kWorld;
        m = kMu * m + d;
        x -= kLr * (d + kMu * m);
      }
      for (int r = 0; r < kWorld; ++r) {
        ASSERT_NEAR(result[static_cast<std::size_t>(r)].w[p][i], x, 1e-5) << p << " " << i;
      }
    }
  }
}

// Streaming: with 2 fragments every H = 4 steps, one fragment's weights change at steps
// 2, 6, ... and the other's at 4, 8, ...; with a delay of 1 the change lands a step later.
// The fragments are equal within a row: a.weight and b.weight's first 4 rows (1860
// elements), b.weight's other 29 rows (1885); the bias joins the lighter, the first.
TEST(OuterLoop, FragmentsSyncOnAStaggeredScheduleAndMergeAfterTheirDelay) {
  for (const std::int64_t delay : {0, 1}) {
    run_ranks(2, [&](Communicator& comm) {
      const int r = comm.rank();
      Replica rep(r);
      OuterLoop loop(rep.spans(), kParams, comm, method("fp16"), options(4, "average", 2, delay));
      EXPECT_EQ(loop.sync_offset(0), 2);
      EXPECT_EQ(loop.sync_offset(1), 4);
      const std::vector<int>& frag = loop.fragment_of_piece();
      ASSERT_EQ(frag.size(), loop.pieces().size());
      ASSERT_EQ(frag, (std::vector<int>{0, 0, 1, 0}));
      EXPECT_EQ(loop.pieces()[1].name, "b.weight[rows 0:4]");
      EXPECT_EQ(loop.pieces()[2].name, "b.weight[rows 4:33]");
      for (std::int64_t s = 1; s <= 9; ++s) {
        rep.inner_step(r, s);
        const Replica stepped = rep;
        const bool changed = loop.after_inner_step(s);
        const bool due = s > delay && (s - delay) % 2 == 0;
        EXPECT_EQ(changed, due) << "step " << s << " delay " << delay;
        if (!due) continue;
        const auto merged = static_cast<int>(((s - delay) / 2 - 1) % 2);
        for (std::size_t b = 0; b < frag.size(); ++b) {
          for (const BucketPlan::Slot& slot : loop.pieces()[b].slots) {
            const auto begin = static_cast<std::ptrdiff_t>(slot.param_offset);
            const auto end = begin + static_cast<std::ptrdiff_t>(slot.numel);
            const bool moved =
                !std::equal(rep.w[slot.param].begin() + begin, rep.w[slot.param].begin() + end,
                            stepped.w[slot.param].begin() + begin);
            EXPECT_EQ(moved, frag[b] == merged) << "step " << s << " param " << slot.param;
          }
        }
      }
    });
  }
}

// With a delay, the merge keeps what the replica did meanwhile: averaging, an exact
// exchange, H = 4, D = 2: at step 6 each replica becomes its step-6 weights plus the
// round's correction, mean(s) - s_r, with s_r its weights at step 4.
TEST(OuterLoop, ADelayedMergeKeepsTheStepsTakenMeanwhile) {
  constexpr int kWorld = 2;
  std::vector<Replica> at4(kWorld, Replica(0)), at6(kWorld, Replica(0)), merged(kWorld, Replica(0));
  run_ranks(kWorld, [&](Communicator& comm) {
    const int r = comm.rank();
    Replica rep(r);
    OuterLoop loop(rep.spans(), kParams, comm, method("none"), options(4, "average", 1, 2));
    for (std::int64_t s = 1; s <= 6; ++s) {
      rep.inner_step(r, s);
      if (s == 6) at6[static_cast<std::size_t>(r)] = rep;
      EXPECT_EQ(loop.after_inner_step(s), s == 6) << s;
      if (s == 4) at4[static_cast<std::size_t>(r)] = rep;
    }
    merged[static_cast<std::size_t>(r)] = rep;
  });
  for (std::size_t p = 0; p < kParams.size(); ++p) {
    for (std::size_t i = 0; i < at4[0].w[p].size(); ++i) {
      const double mean = (static_cast<double>(at4[0].w[p][i]) + at4[1].w[p][i]) / 2;
      for (std::size_t r = 0; r < kWorld; ++r) {
        ASSERT_NEAR(merged[r].w[p][i], at6[r].w[p][i] + (mean - at4[r].w[p][i]), 1e-5)
            << p << " " << i;
      }
    }
  }
}

// synchronize(): the end of training leaves one model. Averaging with an exact exchange,
// no delay: every replica becomes the mean of the replicas (fragment 0 was synced at step
// 2, fragment 1 not since the start). With a delay and a round in flight, the ranks still
// end bit for bit equal, and training goes on afterwards on the usual schedule.
TEST(OuterLoop, SynchronizeLeavesOneModelOnEveryRank) {
  constexpr int kWorld = 3;
  std::vector<Replica> before(kWorld, Replica(0)), after(kWorld, Replica(0));
  run_ranks(kWorld, [&](Communicator& comm) {
    const int r = comm.rank();
    Replica rep(r);
    OuterLoop loop(rep.spans(), kParams, comm, method("none"), options(4, "average", 2));
    for (std::int64_t s = 1; s <= 3; ++s) {
      rep.inner_step(r, s);
      loop.after_inner_step(s);
    }
    before[static_cast<std::size_t>(r)] = rep;
    loop.synchronize(3);
    after[static_cast<std::size_t>(r)] = rep;
  });
  for (std::size_t p = 0; p < kParams.size(); ++p) {
    for (std::size_t i = 0; i < before[0].w[p].size(); ++i) {
      double mean = 0;
      for (const Replica& b : before) mean += b.w[p][i];
      mean /= kWorld;
      for (std::size_t r = 0; r < kWorld; ++r) {
        ASSERT_NEAR(after[r].w[p][i], mean, 1e-5) << p << " " << i;
      }
    }
  }

  for (const std::string spec : {"fp16", "ef(topk:ratio=0.1)"}) {
    std::vector<Replica> synced(kWorld, Replica(0)), later(kWorld, Replica(0));
    run_ranks(kWorld, [&](Communicator& comm) {
      const int r = comm.rank();
      Replica rep(r);
      OuterLoop loop(rep.spans(), kParams, comm, method(spec), options(4, "nesterov", 2, 1));
      for (std::int64_t s = 1; s <= 6; ++s) {  // fragment 0's round of step 6 in flight
        rep.inner_step(r, s);
        loop.after_inner_step(s);
      }
      loop.synchronize(6);
      synced[static_cast<std::size_t>(r)] = rep;
      for (std::int64_t s = 7; s <= 10; ++s) {
        rep.inner_step(r, s);
        // Step 6's round was merged by synchronize; step 8's merges at 9.
        EXPECT_EQ(loop.after_inner_step(s), s == 9) << s;
      }
      later[static_cast<std::size_t>(r)] = rep;
    });
    for (std::size_t r = 1; r < kWorld; ++r) {
      EXPECT_EQ(synced[r].w, synced[0].w) << spec << " rank " << r;
      EXPECT_NE(later[r].w, later[0].w) << spec << " rank " << r;
    }
  }
}

// A replica the loop cannot read in place (as on a GPU): the loop gets host copies, which
// hold garbage (NaN) except between a fetch and the end of the loop's call, and the
// replica takes only what is published. A missing fetch or publish changes the result.
struct StagedReplica final : ReplicaStaging {
  Replica replica;
  std::vector<std::vector<float>> host;
  std::vector<std::int64_t> fetched, published;  // per parameter
  explicit StagedReplica(int rank)
      : replica(rank), fetched(kParams.size()), published(kParams.size()) {
    for (const auto& w : replica.w) host.emplace_back(w.size());
    poison();
  }
  std::vector<std::span<float>> spans() {
    std::vector<std::span<float>> out;
    for (auto& t : host) out.emplace_back(t);
    return out;
  }
  void poison() {
    for (auto& t : host) std::fill(t.begin(), t.end(), std::nanf(""));
  }
  void fetch(std::span<const std::size_t> params) override {
    for (const std::size_t p : params) {
      host[p] = replica.w[p];
      ++fetched[p];
    }
  }
  void publish(std::span<const std::size_t> params) override {
    for (const std::size_t p : params) {
      replica.w[p] = host[p];
      ++published[p];
    }
  }
};

TEST(OuterLoop, AStagedReplicaTrainsAsOneReadInPlace) {
  struct Config {
    std::string spec, outer;
    int fragments;
    std::int64_t delay;
    double mix;
  };
  // The 2-fragment layouts cut b.weight across both fragments.
  for (const Config& c :
       {Config{"fp16", "nesterov", 1, 0, 0.0}, Config{"ef(topk:ratio=0.1)", "average", 2, 1, 0.25},
        Config{"none", "sgd:lr=0.9,momentum=0.5", 2, 0, 0.5}}) {
    SCOPED_TRACE(c.spec + " " + c.outer);
    constexpr int kWorld = 2;
    std::vector<std::vector<Replica>> plain(kWorld), staged(kWorld);
    std::vector<std::vector<std::int64_t>> copies(kWorld);  // fetches + publishes per step
    for (const bool staging : {false, true}) {
      run_ranks(kWorld, [&](Communicator& comm) {
        const auto r = static_cast<std::size_t>(comm.rank());
        Replica in_place(comm.rank());
        StagedReplica away(comm.rank());
        OuterLoopOptions o = options(4, c.outer, c.fragments, c.delay);
        o.mix = c.mix;
        OuterLoop loop(staging ? away.spans() : in_place.spans(), kParams, comm, method(c.spec), o,
                       staging ? &away : nullptr);
        away.poison();
        Replica& rep = staging ? away.replica : in_place;
        std::vector<Replica>& trace = staging ? staged[r] : plain[r];
        trace.push_back(rep);  // rank 0's weights, broadcast
        for (std::int64_t s = 1; s <= 11; ++s) {
          rep.inner_step(comm.rank(), s);
          std::int64_t before = 0;
          for (std::size_t p = 0; p < kParams.size(); ++p)
            before += away.fetched[p] + away.published[p];
          loop.after_inner_step(s);
          away.poison();
          std::int64_t after = 0;
          for (std::size_t p = 0; p < kParams.size(); ++p)
            after += away.fetched[p] + away.published[p];
          if (staging) copies[r].push_back(after - before);
          trace.push_back(rep);
        }
        loop.synchronize(11);
        trace.push_back(rep);
      });
    }
    for (std::size_t r = 0; r < kWorld; ++r) {
      ASSERT_EQ(plain[r].size(), staged[r].size());
      for (std::size_t t = 0; t < plain[r].size(); ++t) {
        EXPECT_EQ(plain[r][t].w, staged[r][t].w) << "rank " << r << " trace " << t;
      }
      // Copies only at the steps a round starts or merges (H = 4, F fragments, delay D).
      const std::int64_t spacing = 4 / c.fragments;
      for (std::int64_t s = 1; s <= 11; ++s) {
        const bool due =
            s % spacing == 0 || (c.delay > 0 && s > c.delay && (s - c.delay) % spacing == 0);
        EXPECT_EQ(copies[r][static_cast<std::size_t>(s - 1)] > 0, due) << "step " << s;
      }
    }
  }
}

// Over many rounds, averaging with a delay is local SGD whose merges land late: replayed
// here in double (exact exchange, H = 4, D = 3, 3 ranks, 6 rounds): at each round start
// s_r = x_r, m = mean(s); D steps later x_r += m - s_r.
TEST(OuterLoop, DelayedAveragingOverManyRoundsMatchesItsReplay) {
  constexpr int kWorld = 3;
  constexpr std::int64_t kH = 4, kD = 3, kSteps = 6 * kH + kD;
  std::vector<Replica> got(kWorld, Replica(0));
  run_ranks(kWorld, [&](Communicator& comm) {
    const int r = comm.rank();
    Replica rep(r);
    OuterLoop loop(rep.spans(), kParams, comm, method("none"), options(kH, "average", 1, kD));
    for (std::int64_t s = 1; s <= kSteps; ++s) {
      rep.inner_step(r, s);
      loop.after_inner_step(s);
    }
    got[static_cast<std::size_t>(r)] = rep;
  });
  // The replay: every replica starts from rank 0's weights (the loop's broadcast).
  std::vector<std::vector<std::vector<double>>> x(kWorld), start(kWorld);
  std::vector<std::vector<double>> mean;
  for (int r = 0; r < kWorld; ++r) {
    for (const auto& t : Replica(0).w) x[r].emplace_back(t.begin(), t.end());
  }
  for (std::int64_t s = 1; s <= kSteps; ++s) {
    for (int r = 0; r < kWorld; ++r) {
      Replica step(0);  // the move inner_step makes: its result minus its start
      Replica moved = step;
      moved.inner_step(r, s);
      for (std::size_t p = 0; p < x[r].size(); ++p) {
        for (std::size_t i = 0; i < x[r][p].size(); ++i) {
          x[r][p][i] += static_cast<double>(moved.w[p][i]) - step.w[p][i];
        }
      }
    }
    if (s % kH == 0) {
      mean = x[0];
      for (std::size_t p = 0; p < mean.size(); ++p) {
        for (std::size_t i = 0; i < mean[p].size(); ++i) {
          double sum = 0;
          for (int r = 0; r < kWorld; ++r) sum += x[r][p][i];
          mean[p][i] = sum / kWorld;
        }
      }
      for (int r = 0; r < kWorld; ++r) start[r] = x[r];
    }
    if (s > kH && (s - kD) % kH == 0) {
      for (int r = 0; r < kWorld; ++r) {
        for (std::size_t p = 0; p < x[r].size(); ++p) {
          for (std::size_t i = 0; i < x[r][p].size(); ++i) {
            x[r][p][i] += mean[p][i] - start[r][p][i];
          }
        }
      }
    }
  }
  for (int r = 0; r < kWorld; ++r) {
    for (std::size_t p = 0; p < kParams.size(); ++p) {
      for (std::size_t i = 0; i < x[r][p].size(); ++i) {
        ASSERT_NEAR(got[static_cast<std::size_t>(r)].w[p][i], x[r][p][i], 1e-4)
            << "rank " << r << " tensor " << p << " element " << i;
      }
    }
  }
}

// A checkpoint (state() copied out) in the middle of a delayed round, restored into a new
// loop: the run continues bit for bit, error feedback and the outer momentum included.
TEST(OuterLoop, ResumeContinuesBitForBit) {
  constexpr int kWorld = 2;
  const auto opts = options(4, "sparseloco:lr=0.9,decay=0.8", 2, 1);
  const std::string spec = "ef(topk:ratio=0.05)";
  for (const std::int64_t cut : {2, 3, 5}) {
    std::vector<Replica> straight(kWorld, Replica(0)), resumed(kWorld, Replica(0));
    std::vector<std::map<std::string, std::vector<float>>> saved(kWorld);
    std::vector<Replica> at_cut(kWorld, Replica(0));
    run_ranks(kWorld, [&](Communicator& comm) {
      const int r = comm.rank();
      Replica rep(r);
      OuterLoop loop(rep.spans(), kParams, comm, method(spec), opts);
      for (std::int64_t s = 1; s <= 12; ++s) {
        rep.inner_step(r, s);
        loop.after_inner_step(s);
        if (s == cut) {
          for (const StateBuffer& b : loop.state()) {
            saved[static_cast<std::size_t>(r)][b.name].assign(b.data.begin(), b.data.end());
          }
          at_cut[static_cast<std::size_t>(r)] = rep;
        }
      }
      straight[static_cast<std::size_t>(r)] = rep;
    });
    run_ranks(kWorld, [&](Communicator& comm) {
      const int r = comm.rank();
      Replica rep = at_cut[static_cast<std::size_t>(r)];
      OuterLoop loop(rep.spans(), kParams, comm, method(spec), opts);
      rep = at_cut[static_cast<std::size_t>(r)];  // the broadcast wrote rank 0's weights
      const std::vector<StateBuffer> state = loop.state();
      ASSERT_EQ(state.size(), saved[static_cast<std::size_t>(r)].size());
      for (const StateBuffer& b : state) {
        const std::vector<float>& v = saved[static_cast<std::size_t>(r)].at(b.name);
        std::copy(v.begin(), v.end(), b.data.begin());
      }
      loop.resume_at(cut);
      for (std::int64_t s = cut + 1; s <= 12; ++s) {
        rep.inner_step(r, s);
        loop.after_inner_step(s);
      }
      resumed[static_cast<std::size_t>(r)] = rep;
    });
    for (int r = 0; r < kWorld; ++r) {
      EXPECT_EQ(straight[static_cast<std::size_t>(r)].w, resumed[static_cast<std::size_t>(r)].w)
          << "cut at " << cut << ", rank " << r;
    }
  }
}

TEST(OuterLoop, EveryReplicaStartsFromRankZerosWeights) {
  std::vector<Replica> got(2, Replica(0));
  run_ranks(2, [&](Communicator& comm) {
    Replica rep(comm.rank());
    OuterLoop loop(rep.spans(), kParams, comm, method("none"), options(2, "nesterov"));
    got[static_cast<std::size_t>(comm.rank())] = rep;
  });
  EXPECT_EQ(got[0].w, Replica(0).w);
  EXPECT_EQ(got[1].w, Replica(0).w);
}

TEST(OuterLoop, BadOptionsAreRefused) {
  run_ranks(1, [&](Communicator& comm) {
    Replica rep(0);
    const auto refused = [&](const OuterLoopOptions& o, const std::string& spec = "none") {
      EXPECT_THROW(OuterLoop(rep.spans(), kParams, comm, method(spec), o), InvalidArgument)
          << o.sync_every << " " << o.outer << " " << o.fragments << " " << o.delay;
    };
    refused(options(0, "average"));
    refused(options(4, "average", 3));     // fragments do not divide H
    refused(options(4, "average", 2, 2));  // delay >= H / F
    refused(options(4, "average", 1, -1));
    refused(options(4, "adam"));
    refused(options(4, "sparseloco"));          // no error feedback to decay
    refused(options(4, "sparseloco"), "fp16");  // linear: no memory
    auto o = options(4, "average");
    o.mix = 1.0;
    refused(o);
    std::vector<std::span<float>> short_spans = rep.spans();
    short_spans.pop_back();
    EXPECT_THROW(OuterLoop(short_spans, kParams, comm, method("none"), options(4, "average")),
                 InvalidArgument);
  });
}

// A rank that leaves before the round: the others' round fails with CommError, and no
// replica is touched by it.
TEST(OuterLoop, ARoundWithoutAPeerFailsAndChangesNothing) {
  run_ranks(3, [&](Communicator& comm) {
    const int r = comm.rank();
    Replica rep(r);
    OuterLoop loop(rep.spans(), kParams, comm, method("ef(topk:ratio=0.1)"),
                   options(2, "nesterov"));
    if (r == 2) return;  // its communicator closes
    rep.inner_step(r, 1);
    loop.after_inner_step(1);
    rep.inner_step(r, 2);
    const Replica before = rep;
    EXPECT_THROW(loop.after_inner_step(2), CommError);
    EXPECT_EQ(rep.w, before.w);
  });
}

std::string drift_message(std::int64_t rank0, std::int64_t rank1) {
  return "outer loop: ranks disagree on the inner steps before an outer round: rank 0 has " +
         std::to_string(rank0) + ", rank 1 has " + std::to_string(rank1) +
         " (every rank must take the same inner steps between rounds)";
}

// Ranks whose inner steps drifted apart (a skipped batch, uneven data, a state restored on
// one rank): with fragments they would exchange different fragments, of different sizes,
// which Gloo aborts the process on. The round fails instead, on every rank alike, naming
// both counts, and no weight changes.
TEST(OuterLoop, RanksAtDifferentInnerStepsFailTheRoundAlike) {
  run_ranks(2, [&](Communicator& comm) {
    const int r = comm.rank();
    Replica rep(r);
    OuterLoop loop(rep.spans(), kParams, comm, method("fp16"), options(4, "average", 2));
    // A round every 2 steps; rank 1's count starts 2 ahead, so its first round is at 4
    // (fragment 1) when rank 0's is at 2 (fragment 0).
    std::int64_t s = r == 1 ? 3 : 1;
    rep.inner_step(r, s);
    EXPECT_FALSE(loop.after_inner_step(s));
    rep.inner_step(r, ++s);
    const Replica before = rep;
    try {
      loop.after_inner_step(s);
      ADD_FAILURE() << "rank " << r << " passed a round at step " << s;
    } catch (const InvalidArgument& e) {
      EXPECT_EQ(std::string(e.what()), drift_message(2, 4));
    }
    EXPECT_EQ(rep.w, before.w);
  });
}

// Without fragments every round falls on a multiple of H on every rank, so drifted ranks
// still pair their rounds; the end of training does not: synchronize() at different
// counts fails alike too.
TEST(OuterLoop, SynchronizeAtDifferentInnerStepsFailsAlike) {
  run_ranks(2, [&](Communicator& comm) {
    const int r = comm.rank();
    Replica rep(r);
    OuterLoop loop(rep.spans(), kParams, comm, method("fp16"), options(8, "average"));
    const std::int64_t steps = r == 1 ? 5 : 3;
    for (std::int64_t s = 1; s <= steps; ++s) {
      rep.inner_step(r, s);
      EXPECT_FALSE(loop.after_inner_step(s));
    }
    EXPECT_THROW(
        {
          try {
            loop.synchronize(steps);
          } catch (const InvalidArgument& e) {
            EXPECT_EQ(std::string(e.what()), drift_message(3, 5));
            throw;
          }
        },
        InvalidArgument);
  });
}

}  // namespace
}  // namespace gradcomp::dist
