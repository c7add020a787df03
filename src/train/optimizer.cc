#include "train/optimizer.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>

#include "gradcomp/error.h"

namespace gradcomp::train {

Sgd::Sgd(std::vector<torch::Tensor> params, SgdOptions options)
    : params_(std::move(params)), skip_momentum_(params_.size(), 0), options_(options) {
  if (!(options_.momentum >= 0.0) || !(options_.weight_decay >= 0.0)) {
    throw InvalidArgument("sgd: momentum " + std::to_string(options_.momentum) +
                          " and weight decay " + std::to_string(options_.weight_decay) +
                          " must be >= 0");
  }
  if (options_.nesterov && options_.momentum == 0.0) {
    throw InvalidArgument("sgd: nesterov needs momentum > 0");
  }
  momentum_.reserve(params_.size());
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const torch::Tensor& p = params_[i];
    if (!p.defined() || !p.device().is_cpu() || p.scalar_type() != torch::kFloat ||
        !p.is_contiguous()) {
      throw InvalidArgument("sgd: parameter " + std::to_string(i) +
                            " is not a contiguous CPU float32 tensor");
    }
    momentum_.push_back(torch::zeros_like(p));
  }
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

void Sgd::zero_grad() {
  for (torch::Tensor& p : params_) {
    torch::Tensor g = p.mutable_grad();
    if (g.defined()) g.zero_();
  }
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
