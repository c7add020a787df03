// The trainer's optimizers, written out so that the trainer owns their state (it goes
// into checkpoints) and so that a parameter can skip SGD's momentum (DGC's momentum
// correction keeps the velocity in its Memory instead). --optimizer picks one: sgd (the
// default) or adamw.
//
// SGD with momentum / Nesterov and weight decay.
//
// Per parameter p with gradient g (PyTorch's torch.optim.SGD with dampening 0):
//   d = g + weight_decay * p
//   v = momentum * v + d                 (v starts at 0, so the first v is d)
//   d = d + momentum * v  (nesterov)  |  d = v  (otherwise)
//   p = p - lr * d
// With momentum skipped (or momentum == 0): p = p - lr * (g + weight_decay * p).
//
// AdamW (PyTorch's torch.optim.AdamW without amsgrad; the same operations in the same
// order as LibTorch's torch::optim::AdamW, so that the two agree to rounding):
//   p = p * (1 - lr * weight_decay)      (decoupled weight decay, before the moments)
//   t = t + 1                            (per parameter, counted only when it has a grad)
//   m = beta1 * m + (1 - beta1) * g
//   v = beta2 * v + (1 - beta2) * g * g
//   p = p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
// AdamW has no momentum a compressor could carry for it: a compressor that keeps SGD's
// momentum in its memory (efm, dgc, sketched-sgd, fetchsgd) cannot run under it
// (set_skip_momentum(i, true) throws; gradcomp train refuses the flags first).
//
// The learning-rate schedule (LrSchedule) is separate: step() takes the rate.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gradcomp::train {

enum class OptimizerKind { kSgd, kAdamW };
OptimizerKind parse_optimizer_kind(std::string_view s);  // "sgd" | "adamw"
const char* to_string(OptimizerKind kind);

// A piece of an optimizer's state, named for checkpoints (checkpoint.h): float32 or int64,
// contiguous, writable in place.
struct OptimizerState {
  std::string name;
  torch::Tensor tensor;
};

// What the trainer drives: one update per step with the step's learning rate.
class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual OptimizerKind kind() const = 0;
  // One update with learning rate lr from each parameter's .grad (parameters whose grad
  // is undefined are left alone). Allocates nothing: the gradient is used as scratch, so
  // its values afterwards are the optimizer's business.
  virtual void step(double lr) = 0;
  // Sets every defined gradient to zero in place (the buffers are kept for the next step).
  void zero_grad();
  // DGC: parameter i is updated without momentum. Only SGD has momentum to skip.
  virtual void set_skip_momentum(std::size_t i, bool skip) = 0;
  virtual bool skip_momentum(std::size_t i) const = 0;
  const std::vector<torch::Tensor>& params() const { return params_; }
  // The state, in a fixed order, named from the parameters' names (one per parameter,
  // model order): SGD "momentum/<name>" per parameter (the names checkpoints always had),
  // AdamW "adamw.exp_avg/<name>", then "adamw.exp_avg_sq/<name>", then "adamw.step".
  virtual std::vector<OptimizerState> state(const std::vector<std::string>& param_names) = 0;

 protected:
  explicit Optimizer(std::vector<torch::Tensor> params);
  // Throws InvalidArgument unless every parameter is a contiguous CPU float32 tensor.
  void check_params(const char* who) const;
  std::vector<torch::Tensor> params_;
};

struct SgdOptions {
  double momentum = 0.9;
  bool nesterov = false;
  double weight_decay = 0.0;
};

class Sgd final : public Optimizer {
 public:
  // Every parameter must be a contiguous CPU float tensor. Throws InvalidArgument if not,
  // or for nesterov without momentum / negative coefficients.
  Sgd(std::vector<torch::Tensor> params, SgdOptions options);

  OptimizerKind kind() const override { return OptimizerKind::kSgd; }
  // The gradient holds the applied direction d afterwards.
  void step(double lr) override;

  // DGC: parameter i is updated without momentum (its buffer stays zero).
  void set_skip_momentum(std::size_t i, bool skip) override;
  bool skip_momentum(std::size_t i) const override { return skip_momentum_.at(i) != 0; }
  std::vector<OptimizerState> state(const std::vector<std::string>& param_names) override;

  const SgdOptions& options() const { return options_; }
  // One buffer per parameter (same shape), for checkpoints: writable in place.
  std::vector<torch::Tensor>& momentum_buffers() { return momentum_; }

 private:
  std::vector<torch::Tensor> momentum_;
  std::vector<char> skip_momentum_;
  SgdOptions options_;
};

// torch.optim.AdamW's defaults, except weight_decay (theirs is 0.01): gradcomp train's
// --weight-decay is both optimizers' and defaults to 0.
struct AdamWOptions {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
};

class AdamW final : public Optimizer {
 public:
  // Throws InvalidArgument for a parameter that is not a contiguous CPU float tensor, or
  // betas outside [0, 1), eps <= 0, weight decay < 0 (or any of them not finite).
  AdamW(std::vector<torch::Tensor> params, AdamWOptions options);

  OptimizerKind kind() const override { return OptimizerKind::kAdamW; }
  // The gradient holds the denominator sqrt(v) / sqrt(1 - beta2^t) + eps afterwards.
  void step(double lr) override;
  // Throws InvalidArgument for skip = true: AdamW has no SGD momentum to hand over.
  void set_skip_momentum(std::size_t i, bool skip) override;
  bool skip_momentum(std::size_t) const override { return false; }
  std::vector<OptimizerState> state(const std::vector<std::string>& param_names) override;

  const AdamWOptions& options() const { return options_; }
  // Per parameter (same shape as it): the first and second moments; writable in place.
  std::vector<torch::Tensor>& exp_avg() { return exp_avg_; }
  std::vector<torch::Tensor>& exp_avg_sq() { return exp_avg_sq_; }
  // Steps taken per parameter (int64, one element per parameter): the bias correction's t.
  torch::Tensor& steps() { return steps_; }

 private:
  std::vector<torch::Tensor> exp_avg_;
  std::vector<torch::Tensor> exp_avg_sq_;
  torch::Tensor steps_;
  AdamWOptions options_;
};

// The optimizer `kind` over params: Sgd(params, sgd) or AdamW(params, adamw).
std::unique_ptr<Optimizer> make_optimizer(OptimizerKind kind, std::vector<torch::Tensor> params,
                                          const SgdOptions& sgd, const AdamWOptions& adamw);

enum class LrDecay { kConstant, kStep, kCosine };
LrDecay parse_lr_decay(std::string_view s);  // "constant" | "step" | "cosine"

struct LrScheduleOptions {
  double base_lr = 0.1;
  std::int64_t warmup_steps = 0;  // linear ramp over the first W steps
  LrDecay decay = LrDecay::kConstant;
  std::vector<std::int64_t> milestones;  // kStep: global steps where lr *= gamma
  double gamma = 0.1;
  std::int64_t total_steps = 0;  // kCosine: lr reaches 0 at this step
};

// lr(step) for global step s >= 0:
//   s < W:   base * (s + 1) / W
//   then     constant: base
//            step:     base * gamma^(number of milestones <= s)
//            cosine:   base * (1 + cos(pi * (s - W) / (T - W))) / 2, 0 from T on
class LrSchedule {
 public:
  explicit LrSchedule(LrScheduleOptions options);  // validates (InvalidArgument)
  double lr(std::int64_t step) const;
  const LrScheduleOptions& options() const { return options_; }

 private:
  LrScheduleOptions options_;
};

}  // namespace gradcomp::train
