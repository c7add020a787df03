#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "gradcomp/error.h"
#include "train/optimizer.h"

namespace gradcomp::train {
namespace {

// Two steps with the fixed gradient g = [0.5, 0.25] from p = [1, -2], lr 0.5,
// momentum 0.5, weight decay 0.25. Every intermediate value is a short binary fraction,
// so the float results are exact (worked out by hand in the comments).
std::vector<float> two_steps(bool nesterov, bool skip) {
  torch::Tensor p = torch::tensor({1.0f, -2.0f}).set_requires_grad(true);
  Sgd sgd({p}, SgdOptions{0.5, nesterov, 0.25});
  if (skip) sgd.set_skip_momentum(0, true);
  for (int s = 0; s < 2; ++s) {
    p.mutable_grad() = torch::tensor({0.5f, 0.25f});
    sgd.step(0.5);
  }
  return {p[0].item<float>(), p[1].item<float>()};
}

TEST(Sgd, MomentumMatchesHandComputedTwoSteps) {
  // 1: d = [0.75, -0.25], v = d, p = [0.625, -1.875]
  // 2: d = [0.65625, -0.21875], v = [1.03125, -0.34375], p = [0.109375, -1.703125]
  EXPECT_EQ(two_steps(false, false), (std::vector<float>{0.109375f, -1.703125f}));
}

TEST(Sgd, NesterovMatchesHandComputedTwoSteps) {
  // 1: d = [0.75, -0.25], v = d, d' = d + 0.5 v = [1.125, -0.375], p = [0.4375, -1.8125]
  // 2: d = [0.609375, -0.203125], v = [0.984375, -0.328125],
  //    d' = [1.1015625, -0.3671875], p = [-0.11328125, -1.62890625]
  EXPECT_EQ(two_steps(true, false), (std::vector<float>{-0.11328125f, -1.62890625f}));
}

TEST(Sgd, SkippedMomentumIsPlainSgdWithWeightDecay) {
  // 1: p = [0.625, -1.875]; 2: d = [0.65625, -0.21875], p = [0.296875, -1.765625]
  EXPECT_EQ(two_steps(false, true), (std::vector<float>{0.296875f, -1.765625f}));
}

TEST(Sgd, MatchesLibTorchSgd) {
  torch::manual_seed(3);
  const torch::Tensor init = torch::randn({5, 7});
  const std::vector<torch::Tensor> grads = {torch::randn({5, 7}), torch::randn({5, 7}),
                                            torch::randn({5, 7})};
  for (bool nesterov : {false, true}) {
    torch::Tensor a = init.clone().set_requires_grad(true);
    torch::Tensor b = init.clone().set_requires_grad(true);
    Sgd ours({a}, SgdOptions{0.9, nesterov, 1e-3});
    torch::optim::SGD theirs(
        {b}, torch::optim::SGDOptions(0.05).momentum(0.9).nesterov(nesterov).weight_decay(1e-3));
    for (const torch::Tensor& g : grads) {
      a.mutable_grad() = g.clone();
      b.mutable_grad() = g.clone();
      ours.step(0.05);
      theirs.step();
    }
    EXPECT_TRUE(torch::allclose(a, b, 1e-6, 1e-7)) << "nesterov " << nesterov;
  }
}

TEST(Sgd, RejectsBadOptions) {
  torch::Tensor p = torch::zeros({2});
  EXPECT_THROW(Sgd({p}, SgdOptions{0.0, true, 0.0}), InvalidArgument);
  EXPECT_THROW(Sgd({p}, SgdOptions{-0.1, false, 0.0}), InvalidArgument);
  EXPECT_THROW(Sgd({torch::zeros({2}, torch::kDouble)}, SgdOptions{}), InvalidArgument);
}

TEST(LrSchedule, WarmupThenStepDecay) {
  LrScheduleOptions o;
  o.base_lr = 0.1;
  o.warmup_steps = 4;
  o.decay = LrDecay::kStep;
  o.milestones = {10, 20};
  o.gamma = 0.5;
  const LrSchedule s(o);
  EXPECT_DOUBLE_EQ(s.lr(0), 0.025);
  EXPECT_DOUBLE_EQ(s.lr(1), 0.05);
  EXPECT_DOUBLE_EQ(s.lr(3), 0.1);
  EXPECT_DOUBLE_EQ(s.lr(9), 0.1);
  EXPECT_DOUBLE_EQ(s.lr(10), 0.05);
  EXPECT_DOUBLE_EQ(s.lr(19), 0.05);
  EXPECT_DOUBLE_EQ(s.lr(20), 0.025);
  EXPECT_DOUBLE_EQ(s.lr(1000), 0.025);
}

TEST(LrSchedule, ConstantAndCosine) {
  LrScheduleOptions o;
  o.base_lr = 0.2;
  EXPECT_DOUBLE_EQ(LrSchedule(o).lr(0), 0.2);
  EXPECT_DOUBLE_EQ(LrSchedule(o).lr(12345), 0.2);
  o.decay = LrDecay::kCosine;
  o.warmup_steps = 4;
  o.total_steps = 104;
  const LrSchedule s(o);
  EXPECT_DOUBLE_EQ(s.lr(3), 0.2);
  EXPECT_DOUBLE_EQ(s.lr(4), 0.2);
  EXPECT_NEAR(s.lr(54), 0.1, 1e-12);
  EXPECT_NEAR(s.lr(29), 0.1 * (1 + std::cos(std::numbers::pi / 4)), 1e-12);
  EXPECT_NEAR(s.lr(103), 0.1 * (1 + std::cos(std::numbers::pi * 99 / 100)), 1e-12);
  EXPECT_EQ(s.lr(104), 0.0);
  EXPECT_EQ(s.lr(500), 0.0);
  o.total_steps = 4;
  EXPECT_THROW(LrSchedule{o}, InvalidArgument);
  EXPECT_THROW(parse_lr_decay("linear"), InvalidArgument);
  EXPECT_EQ(parse_lr_decay("cosine"), LrDecay::kCosine);
}

}  // namespace
}  // namespace gradcomp::train
