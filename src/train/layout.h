// The trainer's side of the bucket layout (gradcomp/layout.h plans it): parameter
// descriptions from a torch module, and the flat buffers gradients are copied through.
#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "gradcomp/layout.h"
#include "gradcomp/reducer.h"

namespace gradcomp::train {

using gradcomp::bucket_shapes;
using gradcomp::BucketPlan;
using gradcomp::LayoutOptions;
using gradcomp::ParamInfo;
using gradcomp::plan_buckets;

std::vector<ParamInfo> describe_parameters(torch::nn::Module& model);

// A non-finite element found in the gradient buffers (GradientBuffers::find_non_finite).
struct NonFiniteElement {
  std::size_t param = 0;    // index into the parameter list
  std::size_t element = 0;  // flat index within that parameter
  float value = 0;          // NaN, +inf or -inf
};

// One flat fp32 buffer per bucket, allocated once, and the copies between the
// parameters' .grad tensors and those buffers. The BucketRefs point into the buffers.
class GradientBuffers {
 public:
  // params: contiguous CPU float tensors, in the order the plan indexes them.
  GradientBuffers(std::vector<torch::Tensor> params, std::vector<BucketPlan> plan);

  // .grad -> buffers (an undefined .grad counts as zeros).
  void gather();
  // The first NaN or infinity in the buffers (bucket order), or nullopt. One read of the
  // gradient, vectorised (an integer max of the exponent bits), so cheap enough to run
  // after every gather(): a non-finite value must not reach a codec or the other ranks.
  std::optional<NonFiniteElement> find_non_finite() const;
  // buffers -> .grad (an undefined .grad is created).
  void scatter();

  // The buckets for Reducer::reduce; compress == false marks every bucket dense (the
  // dense warm-up), else the dense bucket alone is dense. No allocation.
  std::span<const BucketRef> refs(bool compress);

  // The parameters' values in the same bucket layout (the asynchronous parameter
  // server exchanges weights, not gradients). Allocated on first use.
  void gather_weights();   // parameters -> weight buffers
  void scatter_weights();  // weight buffers -> parameters
  std::span<const std::span<float>> weights();

  const std::vector<BucketPlan>& plan() const { return plan_; }
  std::span<float> bucket(std::size_t i) { return buffers_.at(i); }
  std::size_t total_elements() const { return total_; }

 private:
  std::vector<torch::Tensor> params_;
  std::vector<BucketPlan> plan_;
  std::vector<std::vector<float>> buffers_;
  std::vector<BucketRef> refs_compressed_;
  std::vector<BucketRef> refs_dense_;
  std::vector<std::vector<float>> weight_buffers_;
  std::vector<std::span<float>> weight_spans_;
  std::size_t total_ = 0;
};

}  // namespace gradcomp::train
