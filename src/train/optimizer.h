// SGD with momentum / Nesterov and weight decay, written out so that the trainer owns
// its state (momentum buffers go into checkpoints) and so that a parameter can skip
// momentum (DGC's momentum correction keeps the velocity in its Memory instead).
//
// Per parameter p with gradient g (PyTorch's torch.optim.SGD with dampening 0):
//   d = g + weight_decay * p
//   v = momentum * v + d                 (v starts at 0, so the first v is d)
//   d = d + momentum * v  (nesterov)  |  d = v  (otherwise)
//   p = p - lr * d
// With momentum skipped (or momentum == 0): p = p - lr * (g + weight_decay * p).
//
// The learning-rate schedule (LrSchedule) is separate: step() takes the rate.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace gradcomp::train {

struct SgdOptions {
  double momentum = 0.9;
  bool nesterov = false;
  double weight_decay = 0.0;
};

class Sgd {
 public:
  // Every parameter must be a contiguous CPU float tensor. Throws InvalidArgument if not,
  // or for nesterov without momentum / negative coefficients.
  Sgd(std::vector<torch::Tensor> params, SgdOptions options);

  // One update with learning rate lr from each parameter's .grad (parameters whose grad
  // is undefined are left alone). Allocates nothing: the gradient is used as scratch and
  // holds the applied direction d afterwards.
  void step(double lr);

  // Sets every defined gradient to zero in place (the buffers are kept for the next step).
  void zero_grad();

  // DGC: parameter i is updated without momentum (its buffer stays zero).
  void set_skip_momentum(std::size_t i, bool skip);
  bool skip_momentum(std::size_t i) const { return skip_momentum_.at(i) != 0; }

  const SgdOptions& options() const { return options_; }
  const std::vector<torch::Tensor>& params() const { return params_; }
  // One buffer per parameter (same shape), for checkpoints: writable in place.
  std::vector<torch::Tensor>& momentum_buffers() { return momentum_; }

 private:
  std::vector<torch::Tensor> params_;
  std::vector<torch::Tensor> momentum_;
  std::vector<char> skip_momentum_;
  SgdOptions options_;
};

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
