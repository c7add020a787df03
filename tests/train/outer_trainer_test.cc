// The trainer with local steps and an outer loop (outer_sync: gradcomp's public DiLoCo):
// a run stopped at a checkpoint and resumed continues bit for bit (the outer state, error
// feedback and a merge still due included); with H = 1, plain averaging and SGD without
// momentum it is synchronous data-parallel SGD. Ranks are threads over Gloo on 127.0.0.1.
#include <gtest/gtest.h>

#include <mutex>
#include <string>
#include <vector>

#include "dist/dist_test_support.h"
#include "train/trainer.h"
#include "trainer_test_support.h"

namespace gradcomp::train {
namespace {

using dist::Communicator;
using dist::test::run_ranks;
using test::synthetic;

constexpr int kWorld = 2;

TrainConfig config(int rank) {
  TrainConfig cfg;
  cfg.model.name = "mlp";
  cfg.model.mlp_hidden = {48, 40};
  cfg.batch_size = 16;
  cfg.epochs = 1;
  cfg.lr = 0.05;
  cfg.sgd.momentum = 0.9;
  cfg.layout.min_elements = 1024;
  cfg.seed = 17;
  cfg.rank = rank;
  cfg.world = kWorld;
  return cfg;
}

using Params = std::vector<std::vector<torch::Tensor>>;

// Trains `steps` steps on every rank (from a checkpoint at `resume_from` when given, which
// the trainer loads; saving one at the end when `save_to` is given); the parameters.
Params train(const std::string& spec, const dist::OuterLoopOptions& outer, TrainConfig base,
             int steps, const std::filesystem::path& save_to = {},
             const std::filesystem::path& resume_from = {}) {
  Params out(kWorld);
  std::mutex model_init;
  run_ranks(kWorld, [&](Communicator& comm) {
    const int r = comm.rank();
    const test::Data all = synthetic(512, 64, 8);
    TrainConfig cfg = base;
    cfg.rank = r;
    // The model is made before the sync, and the outer loop's constructor broadcasts rank
    // 0's weights: the lock is released in between, or rank 0 would wait in the broadcast
    // while holding it.
    std::unique_lock init(model_init);
    const SyncFactory make_outer = outer_sync(comm, spec, ReducerKind::kAuto, outer);
    Trainer t(cfg, data::shard(all.train, r, kWorld), all.test, [&](const SyncSetup& setup) {
      init.unlock();
      return make_outer(setup);
    });
    if (!resume_from.empty()) t.load_checkpoint(resume_from / ("rank-" + std::to_string(r)));
    for (int i = 0; i < steps; ++i) t.train_step();
    if (!save_to.empty()) t.save_checkpoint(save_to / ("rank-" + std::to_string(r)));
    for (const torch::Tensor& p : t.model().parameters()) {
      out[static_cast<std::size_t>(r)].push_back(p.detach().clone());
    }
  });
  return out;
}

dist::OuterLoopOptions outer(std::int64_t h, const std::string& rule, int fragments,
                             std::int64_t delay) {
  dist::OuterLoopOptions o;
  o.sync_every = h;
  o.outer = rule;
  o.fragments = fragments;
  o.delay = delay;
  return o;
}

TEST(OuterTrainer, ResumedRunContinuesBitForBit) {
  const std::filesystem::path dir = test::temp_dir("outer", "resume");
  const auto o = outer(4, "sparseloco:lr=0.8,decay=0.9", 2, 1);
  const std::string spec = "ef(topk:ratio=0.05)";
  // Step 6 is a round of fragment 0 (2 + 4) whose merge is due at step 7: the checkpoint
  // holds a round in flight.
  const Params straight = train(spec, o, config(0), 11);
  (void)train(spec, o, config(0), 6, dir);
  const Params resumed = train(spec, o, config(0), 5, {}, dir);
  for (int r = 0; r < kWorld; ++r) {
    for (std::size_t i = 0; i < straight[static_cast<std::size_t>(r)].size(); ++i) {
      EXPECT_TRUE(torch::equal(straight[static_cast<std::size_t>(r)][i],
                               resumed[static_cast<std::size_t>(r)][i]))
          << "rank " << r << " param " << i;
    }
  }
  std::filesystem::remove_all(dir);
}

// The end of training (run() to its last step) leaves one model on every rank. 32 steps
// an epoch, H = 6, 2 fragments, delay 2: the round of step 30 merges at step 32, after
// steps 31 and 32 that each replica took alone; yet the ranks end bit for bit equal. A
// --max-steps stop is not the end: there the replicas stay apart, for the resumed run.
TEST(OuterTrainer, TheEndOfTrainingLeavesOneModel) {
  for (const std::int64_t max_steps : {0, 20}) {
    Params params(kWorld);
    std::mutex model_init;
    run_ranks(kWorld, [&](Communicator& comm) {
      const int r = comm.rank();
      const test::Data all = synthetic(1024, 64, 8);
      TrainConfig cfg = config(r);
      cfg.max_steps = max_steps;
      std::unique_lock init(model_init);
      const SyncFactory make_outer =
          outer_sync(comm, "fp16", ReducerKind::kAuto, outer(6, "nesterov", 2, 2));
      Trainer t(cfg, data::shard(all.train, r, kWorld), all.test, [&](const SyncSetup& setup) {
        init.unlock();
        return make_outer(setup);
      });
      (void)t.run();
      for (const torch::Tensor& p : t.model().parameters()) {
        params[static_cast<std::size_t>(r)].push_back(p.detach().clone());
      }
    });
    bool same = true;
    for (std::size_t i = 0; i < params[0].size(); ++i) {
      same = same && torch::equal(params[0][i], params[1][i]);
    }
    EXPECT_EQ(same, max_steps == 0) << "max_steps " << max_steps;
  }
}

// H = 1 with plain averaging, an exact exchange and SGD without momentum: every step
// averages x - lr g_r over the ranks, which is x - lr mean(g): the per-step dense exchange.
TEST(OuterTrainer, AveragingEveryStepIsSynchronousSgd) {
  TrainConfig base = config(0);
  base.sgd.momentum = 0.0;
  const Params local = train("none", outer(1, "average", 1, 0), base, 6);
  Params dense(kWorld);
  std::mutex model_init;
  run_ranks(kWorld, [&](Communicator& comm) {
    const int r = comm.rank();
    const test::Data all = synthetic(512, 64, 8);
    TrainConfig cfg = base;
    cfg.rank = r;
    std::unique_lock init(model_init);
    Trainer t(cfg, data::shard(all.train, r, kWorld), all.test,
              exchange_sync(comm, "none", ReducerKind::kAuto));
    init.unlock();
    for (int i = 0; i < 6; ++i) t.train_step();
    for (const torch::Tensor& p : t.model().parameters()) {
      dense[static_cast<std::size_t>(r)].push_back(p.detach().clone());
    }
  });
  for (int r = 0; r < kWorld; ++r) {
    for (std::size_t i = 0; i < dense[0].size(); ++i) {
      EXPECT_TRUE(torch::allclose(local[static_cast<std::size_t>(r)][i], dense[0][i], 1e-5, 1e-6))
          << "rank " << r << " param " << i << " max diff "
          << (local[static_cast<std::size_t>(r)][i] - dense[0][i]).abs().max().item<float>();
    }
  }
}

}  // namespace
}  // namespace gradcomp::train
