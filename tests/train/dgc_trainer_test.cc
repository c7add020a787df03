// DGC in the trainer: the optimizer skips its momentum exactly for the parameters of
// compressed buckets (DGC's memory carries it) and keeps it for dense ones; at density 1
// without masking DGC is SGD with momentum; a resumed run matches an uninterrupted one
// bit for bit (u and v are checkpointed); DGC learns.
#include <gtest/gtest.h>

#include <sstream>

#include "gradcomp/registry.h"
#include "train/trainer.h"
#include "trainer_test_support.h"

namespace gradcomp::train {
namespace {

namespace fs = std::filesystem;

using test::Data;
using test::local;
using test::synthetic;

TrainConfig small_config() {
  TrainConfig cfg;
  cfg.model.name = "mlp";
  cfg.model.mlp_hidden = {48};  // 64x48 (3072, compressed) and 48x10 + biases (dense)
  cfg.batch_size = 32;
  cfg.epochs = 5;
  cfg.lr = 0.1;
  cfg.warmup_steps = 4;
  cfg.decay = LrDecay::kCosine;
  cfg.layout.min_elements = 1024;
  cfg.seed = 21;
  return cfg;
}

// Parameter index -> whether its bucket is compressed.
std::vector<bool> compressed_params(Trainer& t) {
  std::vector<bool> out(t.optimizer().params().size(), false);
  for (const BucketPlan& b : t.sync().buckets()) {
    for (const BucketPlan::Slot& s : b.slots) out[s.param] = b.compressible;
  }
  return out;
}

TEST(DgcTrainer, OptimizerSkipsMomentumExactlyForCompressedParameters) {
  const Data d = synthetic(320, 100, 8);
  Trainer t(small_config(), d.train, d.test, local("dgc:density=0.01,warmup_epochs=1"));
  EXPECT_TRUE(t.sync().momentum_in_memory());
  const std::vector<bool> compressed = compressed_params(t);
  ASSERT_EQ(std::count(compressed.begin(), compressed.end(), true), 1);  // fc1.weight
  for (int i = 0; i < 6; ++i) t.train_step();
  for (std::size_t i = 0; i < compressed.size(); ++i) {
    EXPECT_EQ(t.optimizer().skip_momentum(i), compressed[i]) << "parameter " << i;
    const double buffer =
        dynamic_cast<Sgd&>(t.optimizer()).momentum_buffers()[i].abs().sum().item<double>();
    if (compressed[i]) {
      EXPECT_EQ(buffer, 0.0) << "parameter " << i << ": its momentum is DGC's";
    } else {
      EXPECT_GT(buffer, 0.0) << "parameter " << i << ": dense, the optimizer's momentum";
    }
  }
  // DGC's own momentum is live.
  bool any = false;
  for (const StateBuffer& s : t.sync().state()) {
    if (s.name.find("momentum") == std::string::npos) continue;
    for (float x : s.data) any = any || x != 0.0f;
  }
  EXPECT_TRUE(any);

  // Without momentum correction the optimizer keeps its momentum everywhere.
  Trainer plain(small_config(), d.train, d.test, local("dgc:density=0.01,correction=0"));
  EXPECT_FALSE(plain.sync().momentum_in_memory());
  for (std::size_t i = 0; i < compressed.size(); ++i) {
    EXPECT_FALSE(plain.optimizer().skip_momentum(i)) << i;
  }
  // Nor does error feedback take it over.
  Trainer ef(small_config(), d.train, d.test, local("topk:ratio=0.01"));
  for (std::size_t i = 0; i < compressed.size(); ++i) EXPECT_FALSE(ef.optimizer().skip_momentum(i));
}

// --dense-steps bypass the memories: the optimizer applies momentum to every parameter
// until compression starts, then hands the compressed ones over to DGC.
TEST(DgcTrainer, DenseStepsKeepTheOptimizersMomentumUntilCompressionStarts) {
  const Data d = synthetic(320, 100, 8);
  TrainConfig cfg = small_config();
  cfg.dense_steps = 4;
  Trainer t(cfg, d.train, d.test, local("dgc:density=0.01,warmup_epochs=1"));
  const std::vector<bool> compressed = compressed_params(t);
  const auto fc1 = static_cast<std::size_t>(std::find(compressed.begin(), compressed.end(), true) -
                                            compressed.begin());
  ASSERT_LT(fc1, compressed.size());
  for (int i = 0; i < 4; ++i) t.train_step();
  EXPECT_FALSE(t.optimizer().skip_momentum(fc1));
  EXPECT_GT(dynamic_cast<Sgd&>(t.optimizer()).momentum_buffers()[fc1].abs().sum().item<double>(),
            0.0);
  t.train_step();  // the first compressed step
  EXPECT_TRUE(t.optimizer().skip_momentum(fc1));
  EXPECT_EQ(dynamic_cast<Sgd&>(t.optimizer()).momentum_buffers()[fc1].abs().sum().item<double>(),
            0.0);
}

// density 1, no masking: v = u_t is sent whole each step and u keeps running, so
// p -= lr * u_t with u_t = m u + g: PyTorch's SGD momentum (up to the fma's rounding;
// weight decay is off because DGC applies it outside the momentum).
TEST(DgcTrainer, AtDensityOneWithoutMaskingItIsSgdWithMomentum) {
  const Data d = synthetic(320, 100, 8);
  TrainConfig cfg = small_config();
  cfg.max_steps = 25;
  Trainer a(cfg, d.train, d.test, local("none"));
  Trainer b(cfg, d.train, d.test,
            local("dgc:density=1,masking=0,warmup_epochs=0,select=exact,momentum=0.9"));
  // With masking, density 1 zeroes u every step: no momentum at all.
  Trainer c(cfg, d.train, d.test, local("dgc:density=1,warmup_epochs=0,select=exact"));
  for (int i = 0; i < 25; ++i) {
    a.train_step();
    b.train_step();
    c.train_step();
  }
  const auto pa = a.model().parameters();
  const auto pb = b.model().parameters();
  const auto pc = c.model().parameters();
  for (std::size_t i = 0; i < pa.size(); ++i) {
    EXPECT_TRUE(torch::allclose(pa[i], pb[i], 1e-4, 1e-6)) << "parameter " << i;
  }
  const std::vector<bool> compressed = compressed_params(a);
  for (std::size_t i = 0; i < pa.size(); ++i) {
    if (compressed[i]) {
      EXPECT_FALSE(torch::allclose(pa[i], pc[i], 1e-3, 1e-5)) << i;
    }
  }
}

TEST(DgcTrainer, ResumeContinuesTheSameTrajectoryBitForBit) {
  const Data d = synthetic(320, 100, 8);  // 10 steps per epoch at batch 32
  TrainConfig cfg = small_config();
  cfg.sgd = SgdOptions{0.9, false, 1e-4};
  cfg.layout.min_elements = 64;  // both weight matrices compressed
  cfg.dense_steps = 3;           // the optimizer's momentum first, then DGC's
  // Warm-up over 2 epochs (stages of 5 steps), the resume point inside it.
  const std::string spec = "dgc:density=0.01,warmup_epochs=2,clip=10";
  constexpr std::int64_t kN = 13;

  TrainConfig straight = cfg;
  straight.max_steps = 2 * kN;
  Trainer a(straight, d.train, d.test, local(spec));
  a.run();
  ASSERT_EQ(a.global_step(), 2 * kN);

  const fs::path dir = test::temp_dir("dgc", "resume");
  TrainConfig first = cfg;
  first.max_steps = kN;
  first.checkpoint_dir = dir;
  {
    Trainer b(first, d.train, d.test, local(spec));
    b.run();
  }
  // The same checkpoint without its u and v (loaded before c overwrites the file).
  TrainConfig fresh = cfg;
  fresh.max_steps = 2 * kN;
  Trainer f(fresh, d.train, d.test, local(spec));
  f.load_checkpoint(dir / "rank-0.ckpt");
  ASSERT_EQ(f.global_step(), kN);
  for (StateBuffer& s : f.sync().state()) std::fill(s.data.begin(), s.data.end(), 0.0f);

  TrainConfig second = first;
  second.max_steps = 2 * kN;
  second.resume = true;
  Trainer c(second, d.train, d.test, local(spec));
  c.run();
  ASSERT_EQ(c.global_step(), 2 * kN);

  const auto pa = a.model().parameters();
  const auto pc = c.model().parameters();
  for (std::size_t i = 0; i < pa.size(); ++i) {
    EXPECT_TRUE(torch::equal(pa[i], pc[i])) << "parameter " << i;
  }
  const auto sa = a.sync().state();
  const auto sc = c.sync().state();
  ASSERT_EQ(sa.size(), 6u);  // two compressed buckets: u, v and the rate v is formed at
  ASSERT_EQ(sc.size(), sa.size());
  for (std::size_t i = 0; i < sa.size(); ++i) {
    EXPECT_EQ(sa[i].name, sc[i].name);
    EXPECT_TRUE(std::equal(sa[i].data.begin(), sa[i].data.end(), sc[i].data.begin())) << sa[i].name;
  }

  // Without the checkpoint's u and v the run diverges: the state matters.
  f.run();
  bool differs = false;
  const auto pf = f.model().parameters();
  for (std::size_t i = 0; i < pa.size(); ++i) differs = differs || !torch::equal(pa[i], pf[i]);
  EXPECT_TRUE(differs);
  fs::remove_all(dir);
}

TEST(DgcTrainer, LearnsSyntheticData) {
  Data d = synthetic(2048, 500, 16);
  TrainConfig cfg;
  cfg.model.name = "mlp";
  cfg.model.mlp_hidden = {128, 64};
  cfg.batch_size = 32;
  cfg.epochs = 4;  // 256 steps
  cfg.lr = 0.05;
  cfg.warmup_steps = 20;
  cfg.decay = LrDecay::kCosine;
  cfg.seed = 3;
  std::ostringstream progress, errors;
  Report report(progress, errors);
  cfg.report = &report;
  Trainer t(cfg, std::move(d.train), std::move(d.test), local("dgc:density=0.01,warmup_epochs=1"));
  const TrainSummary s = t.run();
  EXPECT_GT(s.test_accuracy, 0.6) << progress.str();  // chance is 0.1
  EXPECT_GT(s.compression_ratio, 3.0);
}

}  // namespace
}  // namespace gradcomp::train
