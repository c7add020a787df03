#include "train/optimizer.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>

#include "gradcomp/error.h"

namespace gradcomp::train {

OptimizerKind parse_optimizer_kind(std::string_view s) {
  if (s == "sgd") return OptimizerKind::kSgd;
  if (s == "adamw") return OptimizerKind::kAdamW;
  throw InvalidArgument("--optimizer: " + std::string(s) + " is not one of sgd, adamw");
}

const char* to_string(OptimizerKind kind) {
  return kind == OptimizerKind::kAdamW ? "adamw" : "sgd";
}

Optimizer::Optimizer(std::vector<torch::Tensor> params) : params_(std::move(params)) {}

void Optimizer::check_params(const char* who) const {
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const torch::Tensor& p = params_[i];
    if (!p.defined() || !p.device().is_cpu() || p.scalar_type() != torch::kFloat ||
        !p.is_contiguous()) {
      throw InvalidArgument(std::string(who) + ": parameter " + std::to_string(i) +
                            " is not a contiguous CPU float32 tensor");
    }
  }
}

void Optimizer::zero_grad() {
  for (torch::Tensor& p : params_) {
    torch::Tensor g = p.mutable_grad();
    if (g.defined()) g.zero_();
  }
}

Sgd::Sgd(std::vector<torch::Tensor> params, SgdOptions options)
    : Optimizer(std::move(params)), skip_momentum_(params_.size(), 0), options_(options) {
  if (!(options_.momentum >= 0.0) || !(options_.weight_decay >= 0.0)) {
    throw InvalidArgument("sgd: momentum " + std::to_string(options_.momentum) +
                          " and weight decay " + std::to_string(options_.weight_decay) +
                          " must be >= 0");
  }
  if (options_.nesterov && options_.momentum == 0.0) {
    throw InvalidArgument("sgd: nesterov needs momentum > 0");
  }
  check_params("sgd");
  momentum_.reserve(params_.size());
  for (const torch::Tensor& p : params_) momentum_.push_back(torch::zeros_like(p));
}

std::vector<OptimizerState> Sgd::state(const std::vector<std::string>& param_names) {
  if (param_names.size() != params_.size()) {
    throw InvalidArgument("sgd: " + std::to_string(param_names.size()) + " names for " +
                          std::to_string(params_.size()) + " parameters");
  }
  std::vector<OptimizerState> out;
  out.reserve(params_.size());
  for (std::size_t i = 0; i < params_.size(); ++i) {
    out.push_back({"momentum/" + param_names[i], momentum_[i]});
  }
  return out;
}

void Sgd::set_skip_momentum(std::size_t i, bool skip) {
  if (i >= params_.size()) {
    throw InvalidArgument("sgd: parameter index " + std::to_string(i) +
                          " >= " + std::to_string(params_.size()));
  }
  skip_momentum_[i] = skip ? 1 : 0;
  if (skip) momentum_[i].zero_();
}

void Sgd::step(double lr) {
  torch::NoGradGuard no_grad;
  const double m = options_.momentum;
  const double wd = options_.weight_decay;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    torch::Tensor& p = params_[i];
    torch::Tensor g = p.mutable_grad();
    if (!g.defined()) continue;
    if (wd != 0.0) g.add_(p, wd);  // d = g + wd * p
    if (m != 0.0 && skip_momentum_[i] == 0) {
      torch::Tensor& v = momentum_[i];
      v.mul_(m).add_(g);  // v = m * v + d
      if (options_.nesterov) {
        g.add_(v, m);  // d = d + m * v
        p.add_(g, -lr);
      } else {
        p.add_(v, -lr);
      }
    } else {
      p.add_(g, -lr);
    }
  }
}

AdamW::AdamW(std::vector<torch::Tensor> params, AdamWOptions options)
    : Optimizer(std::move(params)), options_(options) {
  const AdamWOptions& o = options_;
  // Written so that NaN fails every comparison.
  if (!(o.beta1 >= 0.0 && o.beta1 < 1.0) || !(o.beta2 >= 0.0 && o.beta2 < 1.0)) {
    throw InvalidArgument("adamw: betas " + std::to_string(o.beta1) + ", " +
                          std::to_string(o.beta2) + " must be in [0, 1)");
  }
  if (!(std::isfinite(o.eps) && o.eps > 0.0)) {
    throw InvalidArgument("adamw: eps " + std::to_string(o.eps) + " must be > 0");
  }
  if (!(std::isfinite(o.weight_decay) && o.weight_decay >= 0.0)) {
    throw InvalidArgument("adamw: weight decay " + std::to_string(o.weight_decay) +
                          " must be >= 0");
  }
  check_params("adamw");
  exp_avg_.reserve(params_.size());
  exp_avg_sq_.reserve(params_.size());
  for (const torch::Tensor& p : params_) {
    exp_avg_.push_back(torch::zeros_like(p));
    exp_avg_sq_.push_back(torch::zeros_like(p));
  }
  steps_ = torch::zeros({static_cast<std::int64_t>(params_.size())}, torch::kLong);
}

void AdamW::set_skip_momentum(std::size_t i, bool skip) {
  if (i >= params_.size()) {
    throw InvalidArgument("adamw: parameter index " + std::to_string(i) +
                          " >= " + std::to_string(params_.size()));
  }
  if (skip) {
    throw InvalidArgument(
        "adamw: a compressor that keeps SGD's momentum in its memory (efm, dgc, sketched-sgd, "
        "fetchsgd) cannot run under AdamW");
  }
}

void AdamW::step(double lr) {
  torch::NoGradGuard no_grad;
  const double b1 = options_.beta1;
  const double b2 = options_.beta2;
  const double wd = options_.weight_decay;
  std::int64_t* steps = steps_.data_ptr<std::int64_t>();
  for (std::size_t i = 0; i < params_.size(); ++i) {
    torch::Tensor& p = params_[i];
    torch::Tensor g = p.mutable_grad();
    if (!g.defined()) continue;
    // LibTorch's operations and their order (torch/csrc/api/src/optim/adamw.cpp), so that
    // the two round alike; the denominator goes into g instead of a new tensor.
    if (wd != 0.0) p.mul_(1.0 - lr * wd);
    const std::int64_t t = ++steps[i];
    const double bias1 = 1.0 - std::pow(b1, static_cast<double>(t));
    const double bias2 = 1.0 - std::pow(b2, static_cast<double>(t));
    torch::Tensor& m = exp_avg_[i];
    torch::Tensor& v = exp_avg_sq_[i];
    m.mul_(b1).add_(g, 1.0 - b1);
    v.mul_(b2).addcmul_(g, g, 1.0 - b2);
    torch::sqrt_out(g, v).div_(std::sqrt(bias2)).add_(options_.eps);
    p.addcdiv_(m, g, -lr / bias1);
  }
}

std::vector<OptimizerState> AdamW::state(const std::vector<std::string>& param_names) {
  if (param_names.size() != params_.size()) {
    throw InvalidArgument("adamw: " + std::to_string(param_names.size()) + " names for " +
                          std::to_string(params_.size()) + " parameters");
  }
  std::vector<OptimizerState> out;
  out.reserve(2 * params_.size() + 1);
  for (std::size_t i = 0; i < params_.size(); ++i) {
    out.push_back({"adamw.exp_avg/" + param_names[i], exp_avg_[i]});
  }
  for (std::size_t i = 0; i < params_.size(); ++i) {
    out.push_back({"adamw.exp_avg_sq/" + param_names[i], exp_avg_sq_[i]});
  }
  out.push_back({"adamw.step", steps_});
  return out;
}

std::unique_ptr<Optimizer> make_optimizer(OptimizerKind kind, std::vector<torch::Tensor> params,
                                          const SgdOptions& sgd, const AdamWOptions& adamw) {
  if (kind == OptimizerKind::kAdamW) return std::make_unique<AdamW>(std::move(params), adamw);
  return std::make_unique<Sgd>(std::move(params), sgd);
}

LrDecay parse_lr_decay(std::string_view s) {
  if (s == "constant") return LrDecay::kConstant;
  if (s == "step") return LrDecay::kStep;
  if (s == "cosine") return LrDecay::kCosine;
  throw InvalidArgument("--lr-decay " + std::string(s) +
                        ": unknown (known: constant, step, cosine)");
}

LrSchedule::LrSchedule(LrScheduleOptions options) : options_(std::move(options)) {
  if (!(options_.base_lr >= 0.0) || !std::isfinite(options_.base_lr)) {
    throw InvalidArgument("lr schedule: base lr " + std::to_string(options_.base_lr) +
                          " must be finite and >= 0");
  }
  if (options_.warmup_steps < 0) {
    throw InvalidArgument("lr schedule: warm-up steps " + std::to_string(options_.warmup_steps) +
                          " < 0");
  }
  if (!std::is_sorted(options_.milestones.begin(), options_.milestones.end())) {
    throw InvalidArgument("lr schedule: milestones must be increasing");
  }
  if (options_.decay == LrDecay::kCosine && options_.total_steps <= options_.warmup_steps) {
    throw InvalidArgument("lr schedule: cosine needs total steps " +
                          std::to_string(options_.total_steps) + " > warm-up steps " +
                          std::to_string(options_.warmup_steps));
  }
}

double LrSchedule::lr(std::int64_t step) const {
  const double base = options_.base_lr;
  const std::int64_t w = options_.warmup_steps;
  if (step < w) return base * static_cast<double>(step + 1) / static_cast<double>(w);
  switch (options_.decay) {
    case LrDecay::kConstant:
      return base;
    case LrDecay::kStep: {
      const auto passed =
          std::upper_bound(options_.milestones.begin(), options_.milestones.end(), step) -
          options_.milestones.begin();
      return base * std::pow(options_.gamma, static_cast<double>(passed));
    }
    case LrDecay::kCosine: {
      const std::int64_t t = options_.total_steps;
      if (step >= t) return 0.0;
      const double frac = static_cast<double>(step - w) / static_cast<double>(t - w);
      return base * 0.5 * (1.0 + std::cos(std::numbers::pi * frac));
    }
  }
  return base;
}

}  // namespace gradcomp::train
