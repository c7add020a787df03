#include "train/layout.h"

#include <algorithm>
#include <cstring>

#include "gradcomp/error.h"
#include "gradcomp/finite.h"

namespace gradcomp::train {

std::vector<ParamInfo> describe_parameters(torch::nn::Module& model) {
  std::vector<ParamInfo> out;
  for (const auto& item : model.named_parameters()) {
    const torch::Tensor& t = item.value();
    out.push_back({item.key(), t.numel(), t.dim(), t.dim() > 0 ? t.size(0) : 0});
  }
  return out;
}

GradientBuffers::GradientBuffers(std::vector<torch::Tensor> params, std::vector<BucketPlan> plan)
    : params_(std::move(params)), plan_(std::move(plan)) {
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const torch::Tensor& p = params_[i];
    if (!p.device().is_cpu() || p.scalar_type() != torch::kFloat || !p.is_contiguous()) {
      throw InvalidArgument("gradient buffers: parameter " + std::to_string(i) +
                            " is not a contiguous CPU float32 tensor");
    }
  }
  buffers_.reserve(plan_.size());
  for (const BucketPlan& b : plan_) {
    for (const BucketPlan::Slot& s : b.slots) {
      if (s.param >= params_.size() ||
          static_cast<std::int64_t>(s.numel) != params_[s.param].numel() ||
          s.offset + s.numel > b.numel) {
        throw InvalidArgument("gradient buffers: bucket " + std::to_string(b.id) +
                              " does not match the parameter list");
      }
    }
    buffers_.emplace_back(b.numel, 0.0f);
    total_ += b.numel;
  }
  for (std::size_t i = 0; i < plan_.size(); ++i) {
    refs_compressed_.push_back({plan_[i].id, buffers_[i], plan_[i].compressible});
    refs_dense_.push_back({plan_[i].id, buffers_[i], false});
  }
}

void GradientBuffers::gather() {
  for (std::size_t b = 0; b < plan_.size(); ++b) {
    float* dst = buffers_[b].data();
    for (const BucketPlan::Slot& s : plan_[b].slots) {
      const torch::Tensor& g = params_[s.param].grad();
      if (!g.defined()) {
        std::memset(dst + s.offset, 0, s.numel * sizeof(float));
      } else {
        // .grad of a contiguous parameter is contiguous unless someone replaced it.
        const torch::Tensor c = g.is_contiguous() ? g : g.contiguous();
        std::memcpy(dst + s.offset, c.data_ptr<float>(), s.numel * sizeof(float));
      }
    }
  }
}

std::optional<NonFiniteElement> GradientBuffers::find_non_finite() const {
  for (std::size_t b = 0; b < plan_.size(); ++b) {
    if (gradcomp::find_non_finite(buffers_[b]) == buffers_[b].size()) continue;
    for (const BucketPlan::Slot& s : plan_[b].slots) {
      const std::span<const float> g(buffers_[b].data() + s.offset, s.numel);
      const std::size_t i = gradcomp::find_non_finite(g);
      if (i < g.size()) return NonFiniteElement{s.param, i, g[i]};
    }
  }
  return std::nullopt;
}

void GradientBuffers::scatter() {
  for (std::size_t b = 0; b < plan_.size(); ++b) {
    const float* src = buffers_[b].data();
    for (const BucketPlan::Slot& s : plan_[b].slots) {
      torch::Tensor& p = params_[s.param];
      if (!p.grad().defined() || !p.grad().is_contiguous()) {
        p.mutable_grad() = torch::empty_like(p);
      }
      std::memcpy(p.mutable_grad().data_ptr<float>(), src + s.offset, s.numel * sizeof(float));
    }
  }
}

std::span<const std::span<float>> GradientBuffers::weights() {
  if (weight_spans_.empty() && !plan_.empty()) {
    weight_buffers_.reserve(plan_.size());
    for (const BucketPlan& b : plan_) weight_buffers_.emplace_back(b.numel, 0.0f);
    for (auto& w : weight_buffers_) weight_spans_.emplace_back(w);
  }
  return weight_spans_;
}

void GradientBuffers::gather_weights() {
  (void)weights();
  for (std::size_t b = 0; b < plan_.size(); ++b) {
    float* dst = weight_buffers_[b].data();
    for (const BucketPlan::Slot& s : plan_[b].slots) {
      std::memcpy(dst + s.offset, params_[s.param].data_ptr<float>(), s.numel * sizeof(float));
    }
  }
}

void GradientBuffers::scatter_weights() {
  (void)weights();
  torch::NoGradGuard no_grad;
  for (std::size_t b = 0; b < plan_.size(); ++b) {
    const float* src = weight_buffers_[b].data();
    for (const BucketPlan::Slot& s : plan_[b].slots) {
      std::memcpy(params_[s.param].data_ptr<float>(), src + s.offset, s.numel * sizeof(float));
    }
  }
}

std::span<const BucketRef> GradientBuffers::refs(bool compress) {
  return compress ? refs_compressed_ : refs_dense_;
}

}  // namespace gradcomp::train
