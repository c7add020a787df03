#include <gtest/gtest.h>

#include <fstream>

#include "gradcomp/error.h"
#include "train/checkpoint.h"
#include "train/checkpoint_file.h"
#include "train/models.h"

namespace gradcomp::train {
namespace {

namespace fs = std::filesystem;

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("gradcomp_ckpt_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  static std::shared_ptr<Model> model(const std::string& name, std::int64_t hidden = 16) {
    ModelConfig cfg;
    cfg.name = name;
    cfg.mlp_hidden = {hidden};
    cfg.in_c = 1;
    cfg.in_h = 12;
    cfg.in_w = 12;
    cfg.seed = 7;
    return make_model(cfg);
  }

  static std::vector<std::byte> read(const fs::path& f) {
    std::ifstream in(f, std::ios::binary);
    std::vector<char> c((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::vector<std::byte> out(c.size());
    std::memcpy(out.data(), c.data(), c.size());
    return out;
  }
  static void write(const fs::path& f, const std::vector<std::byte>& b) {
    std::ofstream out(f, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  }

  fs::path dir_;
};

std::vector<torch::Tensor> snapshot(torch::nn::Module& m) {
  std::vector<torch::Tensor> out;
  for (const auto& p : m.parameters()) out.push_back(p.detach().clone());
  for (const auto& b : m.buffers()) out.push_back(b.clone());
  return out;
}

bool same(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!torch::equal(a[i], b[i])) return false;
  }
  return true;
}

TEST_F(CheckpointTest, RoundTripRestoresEverything) {
  for (const char* name : {"mlp", "resnet20"}) {  // resnet20: BatchNorm's int64 buffers
    auto m = model(name);
    Sgd opt(m->parameters(), SgdOptions{0.9, true, 1e-4});
    // randn_like, not normal_(): GCC 12 warns (-Wmaybe-uninitialized) inside
    // c10::optional<Generator> under ASan.
    for (auto& v : opt.momentum_buffers()) v.copy_(torch::randn_like(v));
    for (auto& b : m->buffers()) {
      if (b.scalar_type() == torch::kLong) b.fill_(42);
    }
    std::vector<float> residual(100), velocity(7);
    for (std::size_t i = 0; i < residual.size(); ++i) residual[i] = static_cast<float>(i) * 0.5f;
    for (std::size_t i = 0; i < velocity.size(); ++i) velocity[i] = -static_cast<float>(i);
    const std::vector<StateBuffer> state = {{"bucket0.residual", residual},
                                            {"bucket3.velocity", velocity}};
    const auto before = snapshot(*m);
    const auto momentum_before = opt.momentum_buffers()[0].clone();
    const fs::path file = dir_ / "rank-0.ckpt";
    save_checkpoint(file, CheckpointMeta{123, 4, 99, 1, 2}, *m, opt, state);
    EXPECT_FALSE(fs::exists(dir_ / "rank-0.ckpt.tmp"));

    {
      torch::NoGradGuard g;
      for (auto& p : m->parameters()) p.zero_();
      for (auto& b : m->buffers()) b.zero_();
    }
    for (auto& v : opt.momentum_buffers()) v.zero_();
    std::fill(residual.begin(), residual.end(), 0.0f);
    std::fill(velocity.begin(), velocity.end(), 0.0f);
    const CheckpointMeta meta = load_checkpoint(file, *m, opt, state);
    EXPECT_EQ(meta.step, 123u);
    EXPECT_EQ(meta.epoch, 4u);
    EXPECT_EQ(meta.seed, 99u);
    EXPECT_EQ(meta.rank, 1u);
    EXPECT_EQ(meta.world, 2u);
    EXPECT_TRUE(same(snapshot(*m), before)) << name;
    EXPECT_TRUE(torch::equal(opt.momentum_buffers()[0], momentum_before));
    EXPECT_EQ(residual[99], 49.5f);
    EXPECT_EQ(velocity[6], -6.0f);
  }
}

TEST_F(CheckpointTest, AdamWStateRoundTripsAndAnSgdCheckpointIsRefused) {
  auto m = model("mlp");
  AdamW opt(m->parameters(), AdamWOptions{});
  for (auto& v : opt.exp_avg()) v.copy_(torch::randn_like(v));
  for (auto& v : opt.exp_avg_sq()) v.copy_(torch::rand_like(v));
  opt.steps().fill_(17);
  const auto m_before = opt.exp_avg()[1].clone();
  const auto v_before = opt.exp_avg_sq()[0].clone();
  const auto params_before = snapshot(*m);
  const fs::path file = dir_ / "adamw.ckpt";
  save_checkpoint(file, CheckpointMeta{17, 0, 1, 0, 1}, *m, opt, {});
  for (auto& v : opt.exp_avg()) v.zero_();
  for (auto& v : opt.exp_avg_sq()) v.zero_();
  opt.steps().zero_();
  {
    torch::NoGradGuard g;
    for (auto& p : m->parameters()) p.zero_();
  }
  EXPECT_EQ(load_checkpoint(file, *m, opt, {}).step, 17u);
  EXPECT_TRUE(torch::equal(opt.exp_avg()[1], m_before));
  EXPECT_TRUE(torch::equal(opt.exp_avg_sq()[0], v_before));
  EXPECT_TRUE(torch::equal(opt.steps(), torch::full_like(opt.steps(), 17)));
  EXPECT_TRUE(same(snapshot(*m), params_before));
  // The evaluator reads the model out of an AdamW checkpoint too.
  auto fresh = model("mlp");
  EXPECT_NO_THROW(load_model_from_checkpoint(file, *fresh));

  // An SGD run's checkpoint under AdamW, and the other way round: one line naming both
  // optimizers, and nothing restored.
  const fs::path sgd_file = dir_ / "sgd.ckpt";
  Sgd sgd(m->parameters(), SgdOptions{});
  save_checkpoint(sgd_file, CheckpointMeta{}, *m, sgd, {});
  opt.steps().fill_(3);
  try {
    load_checkpoint(sgd_file, *m, opt, {});
    FAIL() << "an sgd checkpoint loaded into adamw";
  } catch (const InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("written by an --optimizer sgd run, this run's is adamw"),
              std::string::npos)
        << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
  EXPECT_TRUE(torch::equal(opt.steps(), torch::full_like(opt.steps(), 3)));
  try {
    load_checkpoint(file, *m, sgd, {});
    FAIL() << "an adamw checkpoint loaded into sgd";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("--optimizer adamw run, this run's is sgd"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(CheckpointTest, RejectsCorruptTruncatedAndMismatchedFiles) {
  auto m = model("mlp");
  Sgd opt(m->parameters(), SgdOptions{});
  std::vector<float> residual(50, 1.0f);
  const std::vector<StateBuffer> state = {{"bucket0.residual", residual}};
  const fs::path good = dir_ / "good.ckpt";
  save_checkpoint(good, CheckpointMeta{}, *m, opt, state);
  const std::vector<std::byte> bytes = read(good);
  const fs::path bad = dir_ / "bad.ckpt";
  const auto before = snapshot(*m);

  auto expect_rejected = [&](const std::vector<std::byte>& b, const std::string& what) {
    write(bad, b);
    try {
      load_checkpoint(bad, *m, opt, state);
      ADD_FAILURE() << what << ": accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(bad.string()), std::string::npos) << e.what();
    }
    EXPECT_TRUE(same(snapshot(*m), before)) << what << ": model changed";
    EXPECT_EQ(residual[0], 1.0f) << what;
  };
  // Truncation at every length of the header and meta, and a sample of the rest.
  for (std::size_t len = 0; len < bytes.size(); len += (len < 80 ? 1 : 997)) {
    expect_rejected(
        std::vector<std::byte>(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(len)),
        "truncated to " + std::to_string(len));
  }
  // One flipped bit anywhere: magic, version, CRC, length or body.
  for (std::size_t at : {std::size_t{0}, std::size_t{9}, std::size_t{13}, std::size_t{17},
                         std::size_t{30}, bytes.size() / 2, bytes.size() - 1}) {
    auto b = bytes;
    b[at] ^= std::byte{0x10};
    expect_rejected(b, "bit flip at " + std::to_string(at));
  }
  auto longer = bytes;
  longer.push_back(std::byte{0});
  expect_rejected(longer, "trailing byte");

  // A valid file for a different model / memory layout.
  auto other = model("mlp", 17);
  Sgd other_opt(other->parameters(), SgdOptions{});
  save_checkpoint(bad, CheckpointMeta{}, *other, other_opt, state);
  EXPECT_THROW(load_checkpoint(bad, *m, opt, state), InvalidArgument);
  auto lenet = model("lenet5");
  Sgd lenet_opt(lenet->parameters(), SgdOptions{});
  save_checkpoint(bad, CheckpointMeta{}, *lenet, lenet_opt, state);
  EXPECT_THROW(load_checkpoint(bad, *m, opt, state), InvalidArgument);
  save_checkpoint(bad, CheckpointMeta{}, *m, opt, {});
  EXPECT_THROW(load_checkpoint(bad, *m, opt, state), InvalidArgument);
  EXPECT_TRUE(same(snapshot(*m), before));
  EXPECT_THROW(load_checkpoint(dir_ / "missing.ckpt", *m, opt, state), InvalidArgument);
  // And the original still loads.
  EXPECT_NO_THROW(load_checkpoint(good, *m, opt, state));
}

// A checkpoint of another run's arrays (here: another memory, as after a change of
// --compressor) is refused naming where the two lists part.
TEST_F(CheckpointTest, AnotherRunsArraysAreNamed) {
  const fs::path f = dir_ / "a.ckpt";
  float x[3] = {1, 2, 3}, y[2] = {4, 5}, z[2] = {6, 7};
  const std::vector<ArrayView> written = {
      {"param/w", ArrayType::kFloat32, x, 3},
      {"memory/bucket0.momentum", ArrayType::kFloat32, y, 2},
      {"memory/bucket0.accumulator", ArrayType::kFloat32, z, 2}};
  write_checkpoint(f, CheckpointMeta{}, written);
  const auto message = [&](const std::vector<ArrayView>& want) {
    try {
      read_checkpoint(f, want);
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string other = message({{"param/w", ArrayType::kFloat32, x, 3},
                                     {"memory/bucket0.residual", ArrayType::kFloat32, y, 2}});
  EXPECT_NE(other.find("3 arrays, the model and optimizer expect 2: the file's array 1 is "
                       "'memory/bucket0.momentum', this run's is 'memory/bucket0.residual'"),
            std::string::npos)
      << other;
  EXPECT_NE(other.find("another --compressor"), std::string::npos) << other;
  const std::string fewer = message({{"param/w", ArrayType::kFloat32, x, 3}});
  EXPECT_NE(fewer.find("the file has 'memory/bucket0.momentum' beyond this run's arrays"),
            std::string::npos)
      << fewer;
  const std::string more =
      message({written[0], written[1], written[2], {"memory/extra", ArrayType::kFloat32, y, 2}});
  EXPECT_NE(more.find("the file ends before this run's 'memory/extra'"), std::string::npos) << more;
}

}  // namespace
}  // namespace gradcomp::train
