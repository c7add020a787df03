#include <ATen/Version.h>
#include <gtest/gtest.h>
#include <cstdio>

#include <fstream>
#include <limits>
#include <sstream>

#include "gradcomp/error.h"
#include "gradcomp/registry.h"
#include "train/checkpoint_file.h"
#include "train/trainer.h"
#include "trainer_test_support.h"

namespace gradcomp::train {
namespace {

namespace fs = std::filesystem;

using test::Data;
using test::local;
using test::synthetic;

fs::path train_dir(const std::string& tag) { return test::temp_dir("train", tag); }

TEST(Trainer, ADivergedRunStopsWithAnErrorNamingTheStep) {
  for (const std::string spec : {"none", "ef(topk:ratio=0.1)"}) {
    Data d = synthetic(512, 64, 8);
    TrainConfig cfg;
    cfg.model.name = "mlp";
    cfg.model.mlp_hidden = {32};
    cfg.batch_size = 32;
    cfg.epochs = 20;
    cfg.lr = 1e12;  // diverges within a few steps
    cfg.warmup_steps = 0;
    Trainer t(cfg, std::move(d.train), std::move(d.test), local(spec));
    try {
      (void)t.run();
      ADD_FAILURE() << spec << ": a diverged run finished";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("the run diverged"), std::string::npos)
          << spec << ": " << e.what();
      EXPECT_EQ(std::string(e.what()).rfind("step ", 0), 0u) << e.what();
    }
  }
}

// A non-finite gradient under a finite loss (put there by a hook on one tensor) stops
// the step before the reducer sees it, naming the step, the rank and the tensor, for
// every kind of codec (none of them is left to notice it, or not, on one rank).
TEST(Trainer, ANonFiniteGradientStopsTheStepNamingTheTensor) {
  const float kBad[] = {std::numeric_limits<float>::quiet_NaN(),
                        std::numeric_limits<float>::infinity(),
                        -std::numeric_limits<float>::infinity()};
  const char* kNames[] = {"nan", "inf", "-inf"};
  for (const std::string spec : {"none", "ef(topk:ratio=0.1)", "2bit"}) {
    for (std::size_t v = 0; v < 3; ++v) {
      Data d = synthetic(256, 64, 8);
      TrainConfig cfg;
      cfg.model.name = "mlp";
      cfg.model.mlp_hidden = {32};
      cfg.batch_size = 32;
      cfg.rank = 0;
      Trainer t(cfg, std::move(d.train), std::move(d.test), local(spec));
      const float bad = kBad[v];
      t.model().named_parameters()["fc2.weight"].register_hook([bad](torch::Tensor g) {
        torch::Tensor h = g.clone();
        h.view({-1})[5] = bad;
        return h;
      });
      try {
        (void)t.train_step();
        ADD_FAILURE() << spec << ": a non-finite gradient was reduced";
      } catch (const Error& e) {
        const std::string want = std::string("step 0, rank 0: the gradient of fc2.weight is ") +
                                 kNames[v] + " at element 5 while the loss is finite";
        EXPECT_EQ(std::string(e.what()).rfind(want, 0), 0u) << spec << ": " << e.what();
      }
    }
  }
}

TEST(Trainer, MlpLearnsSyntheticDataWithTopkAndMetrics) {
  Data d = synthetic(2048, 500, 16);
  TrainConfig cfg;
  cfg.model.name = "mlp";
  cfg.model.mlp_hidden = {128, 64};
  cfg.batch_size = 32;
  cfg.epochs = 4;  // 256 steps
  cfg.lr = 0.05;
  cfg.warmup_steps = 20;
  cfg.decay = LrDecay::kCosine;
  cfg.dense_steps = 10;
  cfg.layout.bucket_mb = 0.05;
  cfg.seed = 3;
  const fs::path dir = train_dir("metrics");
  const fs::path metrics = dir / "m.jsonl";
  std::ostringstream progress, errors;
  Report report(progress, errors, metrics);
  cfg.report = &report;
  Trainer t(cfg, std::move(d.train), std::move(d.test), local("ef(topk:ratio=0.1)"));
  const TrainSummary s = t.run();
  EXPECT_EQ(s.steps, 256);
  EXPECT_EQ(s.epochs, 4);
  EXPECT_GT(s.test_accuracy, 0.6) << progress.str();  // chance is 0.1
  EXPECT_GT(s.compression_ratio, 3.0);
  EXPECT_GT(s.encode_seconds, 0.0);
  EXPECT_NE(progress.str().find("epoch 4 step 256"), std::string::npos) << progress.str();
  // The summary's text and JSON lines come from the same values.
  EXPECT_NE(progress.str().find("== gradcomp train report =="), std::string::npos);
  char accuracy[64];
  std::snprintf(accuracy, sizeof accuracy, "test accuracy              %.4f", s.test_accuracy);
  EXPECT_NE(progress.str().find(accuracy), std::string::npos) << progress.str();

  std::ifstream in(metrics);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_NE(lines[0].find("\"type\":\"epoch\""), std::string::npos);
  for (const char* key :
       {"test_accuracy", "test_loss", "bytes_sent_per_worker_per_step", "dense_bytes_per_step",
        "compression_ratio", "step_ms_median", "compute_seconds", "encode_seconds", "comm_seconds",
        "decode_seconds", "blas"}) {
    EXPECT_NE(lines[4].find(std::string{"\""} + key + "\":"), std::string::npos) << key;
  }
  fs::remove_all(dir);
}

TEST(Trainer, LeNet5LearnsSyntheticData) {
  Data d = synthetic(2048, 500, 16);
  TrainConfig cfg;
  cfg.model.name = "lenet5";
  cfg.batch_size = 32;
  cfg.epochs = 4;
  cfg.lr = 0.05;
  cfg.sgd.nesterov = true;
  cfg.sgd.weight_decay = 1e-4;
  cfg.seed = 4;
  Trainer t(cfg, std::move(d.train), std::move(d.test), local("none"));
  const TrainSummary s = t.run();
  EXPECT_GT(s.test_accuracy, 0.5);
  EXPECT_NEAR(s.compression_ratio, 1.0, 0.01);  // "none" adds a 20-byte header per bucket
}

TEST(Trainer, ResumeContinuesTheSameTrajectoryBitForBit) {
  const Data d = synthetic(320, 100, 8);  // 10 steps per epoch at batch 32
  TrainConfig cfg;
  cfg.model.name = "mlp";
  cfg.model.mlp_hidden = {48};
  cfg.batch_size = 32;
  cfg.epochs = 5;
  cfg.lr = 0.1;
  cfg.warmup_steps = 4;
  cfg.decay = LrDecay::kCosine;
  cfg.sgd = SgdOptions{0.9, true, 1e-4};
  cfg.dense_steps = 3;
  cfg.layout.min_elements = 64;
  cfg.seed = 21;
  const std::string spec = "ef(topk:ratio=0.1)";
  constexpr std::int64_t kN = 15;  // stops mid-epoch 2

  TrainConfig straight = cfg;
  straight.max_steps = 2 * kN;
  Trainer a(straight, d.train, d.test, local(spec));
  a.run();
  ASSERT_EQ(a.global_step(), 2 * kN);

  const fs::path dir = train_dir("resume");
  TrainConfig first = cfg;
  first.max_steps = kN;
  first.checkpoint_dir = dir;
  {
    Trainer b(first, d.train, d.test, local(spec));
    b.run();
    ASSERT_EQ(b.global_step(), kN);
  }
  TrainConfig second = first;
  second.max_steps = 2 * kN;
  second.resume = true;
  Trainer c(second, d.train, d.test, local(spec));
  c.run();
  ASSERT_EQ(c.global_step(), 2 * kN);

  const auto pa = a.model().parameters();
  const auto pc = c.model().parameters();
  ASSERT_EQ(pa.size(), pc.size());
  for (std::size_t i = 0; i < pa.size(); ++i) {
    EXPECT_TRUE(torch::equal(pa[i], pc[i])) << "parameter " << i;
    EXPECT_TRUE(torch::equal(dynamic_cast<Sgd&>(a.optimizer()).momentum_buffers()[i],
                             dynamic_cast<Sgd&>(c.optimizer()).momentum_buffers()[i]));
  }
  const auto sa = a.sync().state();
  const auto sc = c.sync().state();
  ASSERT_EQ(sa.size(), sc.size());
  ASSERT_FALSE(sa.empty());
  for (std::size_t i = 0; i < sa.size(); ++i) {
    EXPECT_TRUE(std::equal(sa[i].data.begin(), sa[i].data.end(), sc[i].data.begin())) << sa[i].name;
  }

  // A run with another seed must not resume from this checkpoint.
  TrainConfig wrong = second;
  wrong.seed = 22;
  Trainer w(wrong, d.train, d.test, local(spec));
  EXPECT_THROW(w.load_checkpoint(w.checkpoint_file()), InvalidArgument);
  // Nor a run with another compressor (other memory layout).
  Trainer w2(second, d.train, d.test, local("none"));
  EXPECT_THROW(w2.load_checkpoint(w2.checkpoint_file()), InvalidArgument);
  fs::remove_all(dir);
}

// A save that fails (here: FILE.tmp is a directory) must leave the checkpoints on disk
// as they were: the rotation of FILE to FILE.prev used to come before the write, so a
// failed save lost the current checkpoint and deleted the one before it.
TEST(Trainer, AFailedCheckpointSaveChangesNothingOnDisk) {
  const Data d = synthetic(320, 100, 8);
  TrainConfig cfg;
  cfg.model.name = "mlp";
  cfg.model.mlp_hidden = {16};
  cfg.batch_size = 32;
  cfg.epochs = 1;
  cfg.warmup_steps = 0;
  const fs::path dir = train_dir("failed_save");
  cfg.checkpoint_dir = dir;
  Trainer t(cfg, d.train, d.test, local("none"));
  const fs::path file = t.checkpoint_file();
  const fs::path prev = previous_checkpoint_file(file);
  t.train_step();
  t.save_checkpoint(file);
  t.train_step();
  t.save_checkpoint(file);  // step 2, step 1 rotated to .prev
  ASSERT_EQ(checkpoint_step(file), std::optional<std::uint64_t>(2));
  ASSERT_EQ(checkpoint_step(prev), std::optional<std::uint64_t>(1));
  fs::path tmp = file;
  tmp += ".tmp";
  fs::create_directory(tmp);
  t.train_step();
  EXPECT_THROW(t.save_checkpoint(file), InvalidArgument);
  EXPECT_EQ(checkpoint_step(file), std::optional<std::uint64_t>(2));
  EXPECT_EQ(checkpoint_step(prev), std::optional<std::uint64_t>(1));
  // Once the obstacle is gone the next save rotates as before.
  fs::remove(tmp);
  t.save_checkpoint(file);
  EXPECT_EQ(checkpoint_step(file), std::optional<std::uint64_t>(3));
  EXPECT_EQ(checkpoint_step(prev), std::optional<std::uint64_t>(2));
  fs::remove_all(dir);
}

TEST(Trainer, AdamWResumesBitForBitAndRefusesAnSgdCheckpoint) {
  const Data d = synthetic(320, 100, 8);  // 10 steps per epoch at batch 32
  TrainConfig cfg;
  cfg.model.name = "mlp";
  cfg.model.mlp_hidden = {48};
  cfg.batch_size = 32;
  cfg.epochs = 3;
  cfg.lr = 3e-3;
  cfg.decay = LrDecay::kCosine;
  cfg.optimizer = OptimizerKind::kAdamW;
  cfg.adamw.weight_decay = 0.01;
  cfg.layout.min_elements = 64;
  cfg.seed = 23;
  const std::string spec = "ef(topk:ratio=0.1)";
  constexpr std::int64_t kN = 12;

  TrainConfig straight = cfg;
  straight.max_steps = 2 * kN;
  Trainer a(straight, d.train, d.test, local(spec));
  const TrainSummary sa = a.run();
  // It learns (24 steps on 320 samples: 0.34 measured; ten classes, chance is 0.1). The
  // CLI test (tests/cli/train_test.sh) checks a longer run.
  EXPECT_GT(sa.test_accuracy, 0.25);

  const fs::path dir = train_dir("adamw_resume");
  TrainConfig first = cfg;
  first.max_steps = kN;
  first.checkpoint_dir = dir;
  {
    Trainer b(first, d.train, d.test, local(spec));
    b.run();
  }
  TrainConfig second = first;
  second.max_steps = 2 * kN;
  second.resume = true;
  Trainer c(second, d.train, d.test, local(spec));
  c.run();
  ASSERT_EQ(c.global_step(), 2 * kN);
  auto& oa = dynamic_cast<AdamW&>(a.optimizer());
  auto& oc = dynamic_cast<AdamW&>(c.optimizer());
  const auto pa = a.model().parameters();
  const auto pc = c.model().parameters();
  for (std::size_t i = 0; i < pa.size(); ++i) {
    EXPECT_TRUE(torch::equal(pa[i], pc[i])) << "parameter " << i;
    EXPECT_TRUE(torch::equal(oa.exp_avg()[i], oc.exp_avg()[i])) << i;
    EXPECT_TRUE(torch::equal(oa.exp_avg_sq()[i], oc.exp_avg_sq()[i])) << i;
  }
  EXPECT_TRUE(torch::equal(oa.steps(), oc.steps()));

  // The same run under SGD cannot take the AdamW checkpoint, nor AdamW an SGD one.
  TrainConfig sgd = second;
  sgd.optimizer = OptimizerKind::kSgd;
  Trainer s(sgd, d.train, d.test, local(spec));
  EXPECT_THROW(s.load_checkpoint(s.checkpoint_file()), InvalidArgument);
  fs::remove_all(dir);
}

TEST(Trainer, AdamWRefusesACompressorThatKeepsMomentum) {
  const Data d = synthetic(64, 10, 8);
  TrainConfig cfg;
  cfg.model.mlp_hidden = {8};
  cfg.batch_size = 8;
  cfg.optimizer = OptimizerKind::kAdamW;
  cfg.layout.min_elements = 16;
  // The LocalReducer's method parsed with SGD's momentum: what a library caller could
  // hand the trainer; the optimizer refuses to skip a momentum it does not have.
  const SyncFactory efm = reducer_sync(
      [](std::span<const BucketShape> shapes) {
        return std::make_unique<LocalReducer>(Method::parse("efm(topk:ratio=0.1)"), shapes);
      },
      Method::parse("efm(topk:ratio=0.1)"));
  EXPECT_THROW(Trainer(cfg, d.train, d.test, efm), InvalidArgument);
}

TEST(Trainer, RejectsBadConfigs) {
  const Data d = synthetic(64, 10, 8);
  TrainConfig cfg;
  cfg.model.mlp_hidden = {8};
  cfg.batch_size = 65;
  EXPECT_THROW(Trainer(cfg, d.train, d.test, local("none")), InvalidArgument);
  cfg.batch_size = 8;
  EXPECT_THROW(Trainer(cfg, d.train, d.test, local("nosuchcodec")), InvalidArgument);
}

TEST(Trainer, DescribesItsBlas) {
  const std::string blas = describe_blas();
  EXPECT_FALSE(blas.empty());
  // The pip wheels' torch multiplies on the MKL linked into it, whatever else is mapped.
  if (at::show_config().find("BLAS_INFO=mkl") != std::string::npos) {
    EXPECT_TRUE(blas.starts_with("MKL, inside torch")) << blas;
  } else {
    EXPECT_EQ(blas.find("MKL, inside torch"), std::string::npos) << blas;
  }
  std::cout << "BLAS: " << blas << "\n";
}

}  // namespace
}  // namespace gradcomp::train
