// The trainer over gradcomp's public GradientExchange (exchange_sync: buckets exchanged by
// gradient-accumulator hooks while backward runs), against the trainer over one Reducer
// called after backward (reducer_sync with make_reducer, the exchange the trainer used
// before): the same buckets in the same order on every rank, so the same weights bit for
// bit, for a summable codec, an allgathered one with error feedback and momentum, and a
// multi-round scheme. Ranks are threads over Gloo on 127.0.0.1.
#include <gtest/gtest.h>

#include <limits>
#include <mutex>
#include <string>
#include <vector>

#include "dist/dist_test_support.h"
#include "gradcomp/dist/reducers.h"
#include "gradcomp/registry.h"
#include "train/trainer.h"
#include "trainer_test_support.h"

namespace gradcomp::train {
namespace {

using dist::Communicator;
using dist::test::run_ranks;
using test::synthetic;

TrainConfig two_layer_config(int rank, int world) {
  TrainConfig cfg;
  cfg.model.name = "mlp";
  cfg.model.mlp_hidden = {48, 40};  // 64x48, 48x40 compressed; 40x10 and biases dense
  cfg.batch_size = 16;
  cfg.epochs = 1;
  cfg.max_steps = 6;
  cfg.lr = 0.05;
  cfg.sgd.momentum = 0.9;
  cfg.dense_steps = 1;
  cfg.layout.min_elements = 1024;
  cfg.seed = 17;
  cfg.rank = rank;
  cfg.world = world;
  return cfg;
}

// Every rank's parameters after max_steps steps, rank-major.
std::vector<std::vector<torch::Tensor>> train_ranks(const std::string& spec, bool hooks) {
  constexpr int kWorld = 2;
  std::vector<std::vector<torch::Tensor>> out(kWorld);
  std::mutex model_init;
  run_ranks(kWorld, [&](Communicator& comm) {
    const int r = comm.rank();
    const test::Data all = synthetic(512, 64, 8);
    const data::Dataset shard = data::shard(all.train, r, kWorld);
    const SyncFactory sync =
        hooks ? exchange_sync(comm, spec, ReducerKind::kAuto)
              : reducer_sync(
                    [&](std::span<const BucketShape> shapes) {
                      return dist::make_reducer(spec, dist::ReducerKind::kAuto, comm, shapes,
                                                builtin_registry());
                    },
                    Method::parse(spec));
    // One at a time: the models draw their initial weights from LibTorch's global
    // generator (seeded by the trainer), which two threads would interleave.
    std::unique_lock init(model_init);
    Trainer t(two_layer_config(r, kWorld), shard, all.test, sync);
    init.unlock();
    for (int i = 0; i < 6; ++i) t.train_step();
    for (const torch::Tensor& p : t.model().parameters()) {
      out[static_cast<std::size_t>(r)].push_back(p.detach().clone());
    }
  });
  return out;
}

class ExchangeTrainer : public ::testing::TestWithParam<std::string> {};

TEST_P(ExchangeTrainer, HooksDuringBackwardEqualOneReducerAfterBackward) {
  const std::string spec = GetParam();
  const auto hooked = train_ranks(spec, true);
  const auto after = train_ranks(spec, false);
  for (std::size_t r = 0; r < hooked.size(); ++r) {
    ASSERT_EQ(hooked[r].size(), after[r].size());
    for (std::size_t i = 0; i < hooked[r].size(); ++i) {
      EXPECT_TRUE(torch::equal(hooked[r][i], after[r][i]))
          << spec << " rank " << r << " param " << i;
      // The replicas agree, whichever way the exchange ran.
      EXPECT_TRUE(torch::equal(hooked[r][i], hooked[0][i])) << spec << " rank " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Specs, ExchangeTrainer,
                         ::testing::Values("none", "efm(topk:ratio=0.05)", "powersgd:rank=2",
                                           "dgc:density=0.05,warmup_epochs=0"),
                         [](const ::testing::TestParamInfo<std::string>& param_info) {
                           std::string n = param_info.param;
                           for (char& c : n) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return n;
                         });

// A NaN put into one gradient by a tensor hook the user registered after the trainer
// (so after the exchange's own hooks were installed) is still caught before it is sent:
// the exchange reads .grad after every tensor hook has run.
TEST(ExchangeTrainer, ANonFiniteGradientStopsTheStepNamingTheTensor) {
  run_ranks(1, [&](Communicator& comm) {
    const test::Data d = synthetic(256, 64, 8);
    TrainConfig cfg = two_layer_config(0, 1);
    Trainer t(cfg, d.train, d.test, exchange_sync(comm, "ef(topk:ratio=0.1)", ReducerKind::kAuto));
    t.model().named_parameters()["fc2.weight"].register_hook([](torch::Tensor g) {
      torch::Tensor h = g.clone();
      h.view({-1})[7] = std::numeric_limits<float>::infinity();
      return h;
    });
    try {
      (void)t.train_step();
      ADD_FAILURE() << "a non-finite gradient was exchanged";
    } catch (const Error& e) {
      const std::string want =
          "step 0, rank 0: the gradient of fc2.weight is inf at element 7 while the loss is finite";
      EXPECT_EQ(std::string(e.what()).rfind(want, 0), 0u) << e.what();
    }
  });
}

}  // namespace
}  // namespace gradcomp::train
