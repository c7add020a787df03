// How parameter gradients become Reducer buckets (docs/architecture.md, "The path of one
// gradient").
//
// Rules, in parameter order:
//   - a tensor with dim <= 1 (biases, norms) or numel < min_elements stays dense; all
//     dense tensors share ONE dense bucket (one small collective instead of many);
//   - dense_share > 0: the smallest of the remaining tensors also stay dense, as many as
//     fit together in dense_share of all the model's elements (ties: earlier first).
//     Sending them dense costs at most that share of a dense step; it keeps a small
//     classifier layer (the MLP's 1536 x 10) out of compression, where it costs the most
//     accuracy per byte saved (docs/measurements/accuracy.md);
//   - bucket_mb == 0: every other tensor is a bucket of its own (per-layer);
//   - bucket_mb  > 0: consecutive compressed tensors are fused while the bucket stays
//     within bucket_mb MiB (a tensor larger than that is alone in its bucket).
// Ids: compressed buckets 0, 1, ... in parameter order, then the dense bucket. They are
// a pure function of the parameter list and the options, so the same on every rank.
#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "gradcomp/reducer.h"

namespace gradcomp::train {

struct ParamInfo {
  std::string name;
  std::int64_t numel = 0;
  std::int64_t dim = 0;
  std::int64_t rows = 0;  // first dimension (0 for a scalar)
};

struct LayoutOptions {
  double bucket_mb = 0.0;            // 0: per-layer buckets; else fused, MiB of fp32
  std::int64_t min_elements = 1024;  // smaller tensors stay dense
  double dense_share = 0.0;          // the smallest tensors within this share stay dense
};

struct BucketPlan {
  struct Slot {
    std::size_t param = 0;   // index into the parameter list
    std::size_t offset = 0;  // elements from the start of the bucket
    std::size_t numel = 0;
  };
  std::uint32_t id = 0;
  bool compressible = true;  // false: the dense bucket
  std::size_t numel = 0;
  std::vector<Slot> slots;
  std::size_t rows = 0;  // a single-tensor bucket: its first dimension; else 0
  std::string name;      // "fc1.weight" or "fc1.weight+fc2.weight" or "dense(6 tensors)"
};

// Throws InvalidArgument for bucket_mb < 0, min_elements < 0 or dense_share outside [0, 1].
std::vector<BucketPlan> plan_buckets(std::span<const ParamInfo> params,
                                     const LayoutOptions& options);

// What a Reducer needs to know about a bucket (gradcomp/reducer.h's BucketShape).
std::vector<BucketShape> bucket_shapes(std::span<const BucketPlan> plan);

std::vector<ParamInfo> describe_parameters(torch::nn::Module& model);

// One flat fp32 buffer per bucket, allocated once, and the copies between the
// parameters' .grad tensors and those buffers. The BucketRefs point into the buffers.
class GradientBuffers {
 public:
  // params: contiguous CPU float tensors, in the order the plan indexes them.
  GradientBuffers(std::vector<torch::Tensor> params, std::vector<BucketPlan> plan);

  // .grad -> buffers (an undefined .grad counts as zeros).
  void gather();
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
