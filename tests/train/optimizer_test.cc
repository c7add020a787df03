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

// AdamW against LibTorch's torch::optim::AdamW on the same parameters and gradients:
// 20 steps with weight decay and a changing learning rate, shapes from a 0-d scalar and
// a 1-element tensor up to a matrix. The two run the same float operations in the same
// order, so they agree to rounding.
TEST(AdamW, MatchesLibTorchAdamWOver20Steps) {
  torch::manual_seed(5);
  const std::vector<std::vector<std::int64_t>> shapes = {{}, {1}, {7}, {5, 3}, {2, 3, 4}};
  std::vector<torch::Tensor> ours, theirs;
  for (const auto& shape : shapes) {
    const torch::Tensor init = torch::randn(shape);
    ours.push_back(init.clone().set_requires_grad(true));
    theirs.push_back(init.clone().set_requires_grad(true));
  }
  const AdamWOptions o{.beta1 = 0.85, .beta2 = 0.995, .eps = 1e-6, .weight_decay = 0.05};
  AdamW mine(ours, o);
  torch::optim::AdamW ref(theirs, torch::optim::AdamWOptions(1e-2)
                                      .betas({o.beta1, o.beta2})
                                      .eps(o.eps)
                                      .weight_decay(o.weight_decay));
  for (int step = 0; step < 20; ++step) {
    const double lr = 1e-2 * (1.0 + 0.1 * step);  // the trainer's schedule changes it
    for (auto& group : ref.param_groups()) group.options().set_lr(lr);
    for (std::size_t i = 0; i < ours.size(); ++i) {
      // Gradients of mixed scale, some exactly 0 (v stays 0 there: eps carries it).
      torch::Tensor g = torch::randn(shapes[i]) * std::pow(10.0, static_cast<double>(i) - 2);
      if (step % 7 == 3) g.zero_();
      ours[i].mutable_grad() = g.clone();
      theirs[i].mutable_grad() = g.clone();
    }
    mine.step(lr);
    ref.step();
    for (std::size_t i = 0; i < ours.size(); ++i) {
      const double diff = (ours[i] - theirs[i]).abs().max().item<double>();
      ASSERT_LT(diff, 1e-6) << "step " << step << ", parameter " << i;
    }
  }
  // Every parameter took 20 steps (the bias correction's t).
  EXPECT_TRUE(torch::equal(mine.steps(), torch::full({5}, 20, torch::kLong)));
}

TEST(AdamW, SkipsParametersWithoutGradientAndCountsStepsPerParameter) {
  torch::Tensor a = torch::ones({3}).set_requires_grad(true);
  torch::Tensor b = torch::ones({2}).set_requires_grad(true);
  AdamW opt({a, b}, AdamWOptions{});
  a.mutable_grad() = torch::ones({3});
  opt.step(0.1);
  EXPECT_TRUE(torch::equal(b, torch::ones({2})));
  EXPECT_EQ(opt.steps()[0].item<std::int64_t>(), 1);
  EXPECT_EQ(opt.steps()[1].item<std::int64_t>(), 0);
  // The first step of Adam moves by lr * g / (|g| + eps'): 0.1 here.
  EXPECT_NEAR(a[0].item<float>(), 0.9f, 1e-6);
}

TEST(AdamW, RejectsBadOptionsAndSkippedMomentum) {
  torch::Tensor p = torch::zeros({2});
  EXPECT_THROW(AdamW({p}, AdamWOptions{.beta1 = 1.0}), InvalidArgument);
  EXPECT_THROW(AdamW({p}, AdamWOptions{.beta2 = -0.1}), InvalidArgument);
  EXPECT_THROW(AdamW({p}, AdamWOptions{.eps = 0.0}), InvalidArgument);
  EXPECT_THROW(AdamW({p}, AdamWOptions{.weight_decay = std::nan("")}), InvalidArgument);
  EXPECT_THROW(AdamW({torch::zeros({2}, torch::kDouble)}, AdamWOptions{}), InvalidArgument);
  AdamW opt({p}, AdamWOptions{});
  EXPECT_THROW(opt.set_skip_momentum(0, true), InvalidArgument);
  EXPECT_NO_THROW(opt.set_skip_momentum(0, false));
  EXPECT_EQ(parse_optimizer_kind("adamw"), OptimizerKind::kAdamW);
  EXPECT_EQ(parse_optimizer_kind("sgd"), OptimizerKind::kSgd);
  EXPECT_THROW(parse_optimizer_kind("adam"), InvalidArgument);
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
