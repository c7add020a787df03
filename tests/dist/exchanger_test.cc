// The Exchanger (asynchronous, per-group reducers, one exchange thread) against the
// reducers it wraps, run synchronously on the same buckets: bit-identical results.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <future>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "dist_test_support.h"
#include "gradcomp/dist/exchanger.h"
#include "gradcomp/dist/reducers.h"
#include "gradcomp/error.h"

namespace gradcomp::dist {
namespace {

using test::run_ranks;

// Two groups, as DDP would hand over two buckets: a matrix, a vector (dense) and an odd
// matrix; then one matrix alone.
const std::vector<std::vector<BucketShape>> kGroups = {
    {{0, 64 * 33, true, 64}, {1, 33, false, 0}, {2, 7 * 129, true, 7}},
    {{3, 40 * 40, true, 40}},
};

float value(int rank, int step, std::size_t t, std::size_t i) {
  // Deterministic, different per rank/step/tensor, with some exact ties and zeros.
  const auto x = static_cast<int>((i * 2654435761u + t * 97 + static_cast<std::size_t>(step) * 13 +
                                   static_cast<std::size_t>(rank) * 7) %
                                  1001);
  return x % 17 == 0 ? 0.0f : static_cast<float>(x - 500) / 128.0f;
}

// Fills every group's tensors for (rank, step); returns one buffer per tensor.
std::vector<std::vector<std::vector<float>>> gradients(int rank, int step) {
  std::vector<std::vector<std::vector<float>>> out;
  for (const auto& group : kGroups) {
    auto& g = out.emplace_back();
    for (const BucketShape& s : group) {
      auto& t = g.emplace_back(s.numel);
      for (std::size_t i = 0; i < s.numel; ++i) t[i] = value(rank, step, s.id, i);
    }
  }
  return out;
}

std::vector<BucketRef> refs(const std::vector<BucketShape>& shapes,
                            std::vector<std::vector<float>>& data, bool compress) {
  std::vector<BucketRef> out;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    out.push_back({shapes[i].id, data[i], compress && shapes[i].compressible});
  }
  return out;
}

class ExchangerVsReducer : public ::testing::TestWithParam<std::string> {};

TEST_P(ExchangerVsReducer, BitIdenticalOverSteps) {
  const std::string spec = GetParam();
  run_ranks(3, [&](Communicator& comm) {
    Exchanger exchanger(comm, spec);
    std::vector<std::unique_ptr<Reducer>> direct;
    for (const auto& g : kGroups) direct.push_back(make_reducer(spec, ReducerKind::kAuto, comm, g));
    for (int step = 0; step < 4; ++step) {
      const bool compress = step > 0;  // step 0: every tensor dense, memories untouched
      StepContext ctx;
      ctx.seed = 11;
      ctx.step = static_cast<std::uint64_t>(step);
      ctx.lr = 0.1f;
      ctx.momentum = 0.9f;
      auto async_data = gradients(comm.rank(), step);
      std::vector<std::promise<void>> done(kGroups.size());
      for (std::size_t g = 0; g < kGroups.size(); ++g) {
        exchanger.submit(g, kGroups[g], refs(kGroups[g], async_data[g], compress), ctx,
                         [&done, g](std::exception_ptr e) {
                           if (e) {
                             done[g].set_exception(e);
                           } else {
                             done[g].set_value();
                           }
                         });
      }
      for (auto& d : done) d.get_future().get();
      // The same groups through their own reducers, one after the other, on this thread.
      auto sync_data = gradients(comm.rank(), step);
      for (std::size_t g = 0; g < kGroups.size(); ++g) {
        direct[g]->reduce(refs(kGroups[g], sync_data[g], compress), ctx);
      }
      ASSERT_EQ(async_data, sync_data) << spec << " step " << step;
    }
    for (std::size_t g = 0; g < kGroups.size(); ++g) {
      const auto a = exchanger.state(g);
      const auto b = direct[g]->state();
      ASSERT_EQ(a.size(), b.size());
      for (std::size_t k = 0; k < a.size(); ++k) {
        EXPECT_EQ(a[k].name, b[k].name);
        EXPECT_TRUE(
            std::equal(a[k].data.begin(), a[k].data.end(), b[k].data.begin(), b[k].data.end()));
      }
    }
    const ReduceStats stats = exchanger.take_stats();
    EXPECT_EQ(stats.steps, 4u);
    EXPECT_GT(stats.bytes_sent, 0u);
  });
}

INSTANTIATE_TEST_SUITE_P(Specs, ExchangerVsReducer,
                         ::testing::Values("none", "ef(topk:ratio=0.1,select=exact)",
                                           "efm(topk:ratio=0.1,select=exact)", "randomk:ratio=0.1",
                                           "qsgd", "powersgd:rank=2", "fetchsgd",
                                           "dgc:density=0.1,warmup_epochs=0"));

TEST(Exchanger, DenseSubmissionIsTheMean) {
  run_ranks(3, [](Communicator& comm) {
    Exchanger exchanger(comm, "ef(topk:ratio=0.1)");
    std::vector<float> data(1001);
    for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(comm.rank() + i);
    std::promise<void> done;
    exchanger.submit_dense(data, StepContext{}, [&](std::exception_ptr e) {
      if (e) {
        done.set_exception(e);
      } else {
        done.set_value();
      }
    });
    done.get_future().get();
    for (std::size_t i = 0; i < data.size(); ++i) {
      ASSERT_FLOAT_EQ(data[i], static_cast<float>(1 + i)) << i;  // (0 + 1 + 2) / 3 + i
    }
  });
}

// A completion is destroyed outside the Exchanger's queue lock. The Python hook's
// completions take the GIL when they die, while the thread holding the GIL may be
// waiting for that lock in submit(): destroyed under the lock, they deadlocked a run in
// the network lab. Here the completion's destructor submits again, which needs the lock
// (under it, this thread would wait for itself).
TEST(Exchanger, ACompletionIsDestroyedOutsideTheQueueLock) {
  run_ranks(1, [&](Communicator& comm) {
    Exchanger ex(comm, "none");
    std::vector<float> first(4, 1.0f);
    std::vector<float> second(4, 2.0f);
    std::vector<float> third(4, 3.0f);
    std::promise<void> resubmitted;
    struct SubmitWhenDestroyed {
      Exchanger* ex;
      std::vector<float>* data;
      std::promise<void>* done;
      ~SubmitWhenDestroyed() {
        ex->submit_dense(*data, {}, [d = done](std::exception_ptr) { d->set_value(); });
      }
    };
    // The first job's completion holds the exchange thread until the second job (whose
    // completion owns the last reference to the guard) is queued.
    std::promise<void> go;
    std::shared_future<void> go_now = go.get_future().share();
    ex.submit_dense(first, {}, [go_now](std::exception_ptr) { go_now.wait(); });
    {
      auto guard = std::make_shared<SubmitWhenDestroyed>(&ex, &third, &resubmitted);
      ex.submit_dense(second, {}, [guard](std::exception_ptr) {});
    }
    go.set_value();
    ASSERT_EQ(resubmitted.get_future().wait_for(std::chrono::seconds(20)),
              std::future_status::ready);
    ex.drain();
  });
}

// The last owner of an Exchanger may be a job's completion (a Python hook's future
// callback holding its state): then the Exchanger dies on its own exchange thread, which
// cannot join itself (std::terminate before). The jobs queued behind that one still run,
// in order, on that thread; and drain() from a completion is refused, not a hang.
TEST(Exchanger, DestroyedByItsOwnCompletionRunsWhatIsQueuedAndEnds) {
  run_ranks(1, [&](Communicator& comm) {
    auto owned =
        std::make_shared<std::unique_ptr<Exchanger>>(std::make_unique<Exchanger>(comm, "none"));
    Exchanger& ex = **owned;
    std::vector<std::vector<float>> data(4, std::vector<float>(8, 1.0f));
    std::vector<int> order;
    std::promise<void> go;
    std::shared_future<void> go_now = go.get_future().share();
    std::promise<std::string> drain_refused;
    // Job 0 waits until the others are queued; its completion tries drain().
    ex.submit_dense(data[0], {}, [&, go_now](std::exception_ptr) {
      go_now.wait();
      order.push_back(0);
      try {
        ex.drain();
        drain_refused.set_value("");
      } catch (const InvalidArgument& e) {
        drain_refused.set_value(e.what());
      }
    });
    // Job 1's completion destroys the Exchanger; jobs 2 and 3 are still queued.
    ex.submit_dense(data[1], {}, [&, owned](std::exception_ptr) {
      order.push_back(1);
      owned->reset();
    });
    std::promise<void> last;
    ex.submit_dense(data[2], {}, [&](std::exception_ptr e) {
      EXPECT_FALSE(e);
      order.push_back(2);
    });
    ex.submit_dense(data[3], {}, [&](std::exception_ptr e) {
      EXPECT_FALSE(e);
      order.push_back(3);
      last.set_value();
    });
    owned.reset();  // the completion of job 1 now holds the only reference
    go.set_value();
    ASSERT_EQ(last.get_future().wait_for(std::chrono::seconds(20)), std::future_status::ready);
    EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3}));
    EXPECT_NE(drain_refused.get_future().get().find("would wait for that job itself"),
              std::string::npos);
    for (const auto& d : data) EXPECT_EQ(d, std::vector<float>(8, 1.0f));  // a mean of one
  });
}

TEST(Exchanger, AGroupResubmittedWithOtherShapesIsRefused) {
  run_ranks(1, [](Communicator& comm) {
    Exchanger exchanger(comm, "ef(topk:ratio=0.1)");
    std::vector<float> a(100), b(101);
    const std::vector<BucketShape> sa{{0, 100, true, 0}};
    const std::vector<BucketShape> sb{{0, 101, true, 0}};
    exchanger.submit(7, sa, {{0, a, true}}, StepContext{}, {});
    exchanger.drain();
    EXPECT_THROW(exchanger.submit(7, sb, {{0, b, true}}, StepContext{}, {}), InvalidArgument);
    // A ref that does not match its shape, and a bad spec.
    EXPECT_THROW(exchanger.submit(8, sa, {{0, b, true}}, StepContext{}, {}), InvalidArgument);
    EXPECT_THROW(Exchanger(comm, "topkk"), InvalidArgument);
  });
}

TEST(Exchanger, JobsRunInSubmissionOrderAndDrainWaitsForAll) {
  run_ranks(2, [](Communicator& comm) {
    Exchanger exchanger(comm, "none");
    std::vector<std::vector<float>> data(20, std::vector<float>(257, 1.0f));
    std::vector<int> order;
    std::mutex m;
    for (int j = 0; j < 20; ++j) {
      const std::vector<BucketShape> s{{static_cast<std::uint32_t>(j), 257, false, 0}};
      exchanger.submit(static_cast<std::uint64_t>(j), s,
                       {{static_cast<std::uint32_t>(j), data[static_cast<std::size_t>(j)], false}},
                       StepContext{}, [&, j](std::exception_ptr e) {
                         ASSERT_FALSE(e);
                         std::lock_guard lock(m);
                         order.push_back(j);
                       });
    }
    exchanger.drain();
    ASSERT_EQ(order.size(), 20u);
    for (int j = 0; j < 20; ++j) EXPECT_EQ(order[static_cast<std::size_t>(j)], j);
    exchanger.drain();  // idle: returns at once
  });
}

// Exchanger::NonFinite::kSkipStep (loss scaling, the Python hook's grad_scaler): a NaN in
// one rank's compressed group makes the group +inf on every rank and leaves its memories
// as they were; the next steps run as if the skipped one had never been submitted. A
// dense group needs no agreement (its allreduce carries the NaN to every rank).
TEST(Exchanger, UnderSkipStepANonFiniteGroupOnOneRankIsSkippedOnEveryRank) {
  const std::string spec = "efm(topk:ratio=0.1,select=exact)";
  const std::vector<BucketShape>& shapes = kGroups[0];
  std::vector<std::vector<std::vector<float>>> skipped(2), reference(2);
  run_ranks(2, [&](Communicator& comm) {
    const auto run = [&](bool with_skip) {
      Exchanger ex(comm, spec);
      ex.use_momentum(0.9);
      ex.set_non_finite(Exchanger::NonFinite::kSkipStep);
      const auto step = [&](int s, bool poison) {
        auto data = gradients(comm.rank(), s)[0];
        if (poison && comm.rank() == 1) data[2][5] = std::numeric_limits<float>::quiet_NaN();
        StepContext ctx;
        ctx.step = s;
        ctx.lr = 0.1f;
        ctx.momentum = 0.9f;
        ex.submit(0, shapes, refs(shapes, data, true), ctx, {});
        ex.drain();
        return data;
      };
      auto out = step(0, false);
      if (with_skip) {
        std::vector<float> before;
        for (const StateBuffer& b : ex.state(0))
          before.insert(before.end(), b.data.begin(), b.data.end());
        (void)ex.take_stats();
        for (const auto& t : step(1, true)) {
          for (float v : t) EXPECT_EQ(v, std::numeric_limits<float>::infinity());
        }
        std::vector<float> after;
        for (const StateBuffer& b : ex.state(0))
          after.insert(after.end(), b.data.begin(), b.data.end());
        EXPECT_EQ(before, after) << "memories changed by a skipped step";
        EXPECT_EQ(ex.take_stats().non_finite_skips, 1u);
      }
      for (const auto& t : step(2, false)) out.push_back(t);
      return out;
    };
    skipped[static_cast<std::size_t>(comm.rank())] = run(true);
    reference[static_cast<std::size_t>(comm.rank())] = run(false);

    // A dense group, and a dense method's compressible tensor: one collective, no
    // agreement; the bad value reaches both ranks through the sum.
    const auto one_collective = [&](const std::string& method, bool compressible, int bad_rank,
                                    float bad) {
      Exchanger ex(comm, method);
      ex.set_non_finite(Exchanger::NonFinite::kSkipStep);
      std::vector<float> v(1024, 1.0f);
      if (comm.rank() == bad_rank) v[3] = bad;
      const std::uint64_t ops = comm.counters().operations;
      ex.submit(1, std::vector<BucketShape>{{9, 1024, compressible, 32}}, {{9, v, compressible}},
                StepContext{}, {});
      ex.drain();
      EXPECT_EQ(comm.counters().operations - ops, 1u) << method;
      EXPECT_EQ(std::isnan(v[3]), std::isnan(bad)) << method;
      if (!std::isnan(bad)) {
        EXPECT_EQ(v[3], bad) << method;
      }
      EXPECT_EQ(v[4], 1.0f) << method;
    };
    one_collective(spec, false, 0, std::numeric_limits<float>::quiet_NaN());
    one_collective("none", true, 1, std::numeric_limits<float>::infinity());
  });
  EXPECT_EQ(skipped, reference);
}

}  // namespace
}  // namespace gradcomp::dist
