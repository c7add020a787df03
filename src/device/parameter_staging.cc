// gradcomp/device/parameter_staging.h. The copies run on the caller's current stream, so
// that they follow the inner optimizer's last update and precede the next forward pass;
// each is a blocking copy (a round waits for its parameters anyway: its pseudo-gradient is
// computed from them on the host). A 16-bit parameter's copies convert on the way
// (copy_ widens it exactly, and rounds the float32 result to nearest-even on the way back).
#include "gradcomp/device/parameter_staging.h"

#include "gradcomp/error.h"

namespace gradcomp::device {

ParameterStaging::ParameterStaging(const std::vector<std::pair<std::string, at::Tensor>>& params,
                                   const std::string& who, bool stage_cpu)
    : who_(who) {
  for (const auto& [name, p] : params) {
    const std::string what = who + ": parameter " + name;
    const at::ScalarType type = p.scalar_type();
    if (type != at::kFloat && type != at::kBFloat16 && type != at::kHalf) {
      throw InvalidArgument(what + " is " + std::string(c10::toString(type)) +
                            ", not float32, bfloat16 or float16");
    }
    if (!p.is_contiguous()) throw InvalidArgument(what + " is not contiguous");
    const bool staged = !p.is_cpu() || type != at::kFloat || stage_cpu;
    names_.push_back(name);
    given_.push_back(p);
    // Written in place, outside autograd; detached, it keeps this memory alive even after
    // the caller's tensor swaps it away.
    params_.push_back(p.detach());
    staged_.push_back(staged ? 1 : 0);
    if (!staged) {
      host_.push_back(params_.back());
      continue;
    }
    ++staged_count_;
    host_.push_back(
        at::empty({p.numel()}, at::TensorOptions().dtype(at::kFloat).pinned_memory(p.is_cuda())));
  }
}

void ParameterStaging::check_unchanged() const {
  for (std::size_t i = 0; i < given_.size(); ++i) {
    const at::Tensor& p = given_[i];
    if (p.data_ptr() == params_[i].data_ptr()) continue;  // params_[i] kept the memory
    throw InvalidArgument(who_ + ": parameter " + names_[i] + " is no longer the tensor " + who_ +
                          " was built on (now " + std::string(c10::toString(p.scalar_type())) +
                          " on " + p.device().str() +
                          "): moving or converting the model afterwards (.to(), .half(), a "
                          ".data assignment) swaps its memory; do that first, then build the " +
                          who_);
  }
}

std::vector<std::span<float>> ParameterStaging::spans() const {
  std::vector<std::span<float>> out;
  for (const at::Tensor& h : host_) {
    out.emplace_back(h.data_ptr<float>(), static_cast<std::size_t>(h.numel()));
  }
  return out;
}

void ParameterStaging::fetch(std::span<const std::size_t> params) {
  for (const std::size_t i : params) {
    if (!staged_[i]) continue;
    host_[i].copy_(params_[i].reshape({-1}));
    ++fetches_;
  }
}

void ParameterStaging::publish(std::span<const std::size_t> params) {
  for (const std::size_t i : params) {
    if (!staged_[i]) continue;
    params_[i].view({-1}).copy_(host_[i]);
    ++publishes_;
  }
}

}  // namespace gradcomp::device
