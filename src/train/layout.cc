#include "train/layout.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "gradcomp/error.h"

namespace gradcomp::train {

namespace {

// Which tensors stay dense (see the rules in layout.h).
std::vector<char> dense_tensors(std::span<const ParamInfo> params, const LayoutOptions& options) {
  std::vector<char> dense(params.size(), 0);
  double total = 0.0;
  std::vector<std::size_t> candidates;
  for (std::size_t i = 0; i < params.size(); ++i) {
    const ParamInfo& p = params[i];
    if (p.numel < 0) throw InvalidArgument("layout: " + p.name + " has negative numel");
    total += static_cast<double>(p.numel);
    if (p.dim <= 1 || p.numel < options.min_elements) {
      dense[i] = 1;
    } else {
      candidates.push_back(i);
    }
  }
  std::stable_sort(candidates.begin(), candidates.end(),
                   [&](std::size_t a, std::size_t b) { return params[a].numel < params[b].numel; });
  const double budget = options.dense_share * total;
  double used = 0.0;
  for (const std::size_t i : candidates) {
    used += static_cast<double>(params[i].numel);
    if (used > budget) break;
    dense[i] = 1;
  }
  return dense;
}

}  // namespace

std::vector<BucketPlan> plan_buckets(std::span<const ParamInfo> params,
                                     const LayoutOptions& options) {
  if (!(options.bucket_mb >= 0.0) || options.min_elements < 0) {
    throw InvalidArgument("layout: bucket_mb " + std::to_string(options.bucket_mb) +
                          " and min_elements " + std::to_string(options.min_elements) +
                          " must be >= 0");
  }
  if (!(options.dense_share >= 0.0 && options.dense_share <= 1.0)) {
    throw InvalidArgument("layout: dense_share " + std::to_string(options.dense_share) +
                          " must be in [0, 1]");
  }
  const std::vector<char> stays_dense = dense_tensors(params, options);
  const double cap_elements = options.bucket_mb * 1024.0 * 1024.0 / sizeof(float);
  std::vector<BucketPlan> out;
  BucketPlan dense;
  dense.compressible = false;
  BucketPlan* open = nullptr;  // the fused bucket still taking tensors
  for (std::size_t i = 0; i < params.size(); ++i) {
    const ParamInfo& p = params[i];
    const auto n = static_cast<std::size_t>(p.numel);
    if (stays_dense[i]) {
      dense.slots.push_back({i, dense.numel, n});
      dense.numel += n;
      continue;
    }
    const bool fits = open != nullptr && options.bucket_mb > 0.0 &&
                      static_cast<double>(open->numel + n) <= cap_elements;
    if (!fits) {
      out.emplace_back();
      open = &out.back();
      open->id = static_cast<std::uint32_t>(out.size() - 1);
      open->name = p.name;
      open->rows = static_cast<std::size_t>(p.rows);
    } else {
      open->name += "+" + p.name;
      open->rows = 0;  // fused: no single matrix view
    }
    open->slots.push_back({i, open->numel, n});
    open->numel += n;
  }
  if (!dense.slots.empty()) {
    dense.id = static_cast<std::uint32_t>(out.size());
    dense.name = "dense(" + std::to_string(dense.slots.size()) + " tensors)";
    out.push_back(std::move(dense));
  }
  return out;
}

std::vector<BucketShape> bucket_shapes(std::span<const BucketPlan> plan) {
  std::vector<BucketShape> out;
  out.reserve(plan.size());
  for (const BucketPlan& b : plan) out.push_back({b.id, b.numel, b.compressible, b.rows});
  return out;
}

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

namespace {

// Whether x holds a NaN or an infinity: an exponent of all ones. A max over the
// exponent bits is an integer reduction, which the compiler vectorises (a float test
// with early exit would not be).
bool any_non_finite(std::span<const float> x) {
  constexpr std::uint32_t kExponent = 0x7F800000u;
  std::uint32_t widest = 0;
  for (const float v : x) widest = std::max(widest, std::bit_cast<std::uint32_t>(v) & kExponent);
  return widest == kExponent;
}

}  // namespace

std::optional<NonFiniteGradient> GradientBuffers::find_non_finite() const {
  for (std::size_t b = 0; b < plan_.size(); ++b) {
    if (!any_non_finite(buffers_[b])) continue;
    for (const BucketPlan::Slot& s : plan_[b].slots) {
      const float* g = buffers_[b].data() + s.offset;
      for (std::size_t i = 0; i < s.numel; ++i) {
        if (!std::isfinite(g[i])) return NonFiniteGradient{s.param, i, g[i]};
      }
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
