// How parameter gradients become Reducer buckets: the first stage of the data path
// (layout -> memory -> codec -> reducer -> optimizer). Torch-free, so that the
// trainer and the Python DDP hook decide which tensors stay dense by the same rules.
//
// Rules, in parameter order:
//   - a tensor with dim <= 1 (biases, norms) or numel < min_elements stays dense; all
//     dense tensors share ONE dense bucket (one small collective instead of many);
//   - dense_share > 0: the smallest of the remaining tensors also stay dense, as many as
//     fit together in dense_share of all the model's elements (ties: earlier first).
//     Sending them dense costs at most that share of a dense step; it keeps a small
//     classifier layer (the MLP's 1536 x 10) out of compression, where it costs the most
//     accuracy per byte saved (docs: the accuracy table);
//   - bucket_mb == 0: every other tensor is a bucket of its own (per-layer);
//   - bucket_mb  > 0: consecutive compressed tensors are fused while the bucket stays
//     within bucket_mb MiB (a tensor larger than that is alone in its bucket).
// Ids: compressed buckets 0, 1, ... in parameter order, then the dense bucket. They are
// a pure function of the parameter list and the options, so the same on every rank.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "gradcomp/reducer.h"

namespace gradcomp {

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
    // Elements from the start of the parameter: 0 except in a fragment's piece of a
    // parameter (fragment_pieces below); plan_buckets' slots hold whole parameters.
    std::size_t param_offset = 0;
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

// The order in which backward completes the buckets: the compressible ones from the last
// layer to the first, then the dense bucket (it holds tensors of every layer). Plan
// indices.
std::vector<std::size_t> hand_over_order(std::span<const BucketPlan> plan);

// Exchange groups (GradientExchange): the buckets in hand-over order, cut into runs of at
// least min_group_mb MiB of fp32 (0: a bucket each); a last run below it joins the one
// before (the dense bucket, complete only when backward ends, goes with the first
// layers' bucket, complete at the same time). Each group is one exchange job, so one set
// of collectives per step. A pure function of the plan: the same groups on every rank.
// Throws InvalidArgument for a negative or non-finite min_group_mb.
std::vector<std::vector<std::size_t>> exchange_groups(std::span<const BucketPlan> plan,
                                                      double min_group_mb);

// Streaming outer loops (gradcomp/dist/outer_loop.h): what each of F fragments exchanges,
// as pieces of the plan's buckets. The compressible buckets, in plan order, are laid end to
// end and cut into F runs of equal elements; a cut inside a single-layer bucket moves to the
// nearest row boundary, so that a piece is still a matrix of whole rows (PowerSGD and ATOMO
// factor it). The dense bucket goes whole to the fragment with the fewest elements (the
// lowest index on ties). Why cut buckets: the link carries one fragment per H / F steps, and
// whole-layer fragments are only as even as the layers (the default MLP's largest matrix is
// 2/3 of the model, so one fragment of 2 or 3 carried most of a round's bytes and its
// exchange outlasted the delay: docs/measurements/outer-loop.md).
//
// Returns F lists of pieces, each a BucketPlan of its own: ids 0, 1, ... in plan order
// (with F == 1, or no cut inside a bucket, a piece is that bucket, its id and name
// unchanged; a cut bucket's pieces are named "fc2.weight[rows 0:768]"), slots into the
// parameters with param_offset. A fragment is empty when F exceeds the rows there are.
// A pure function of the plan: the same on every rank. InvalidArgument for fragments < 1.
std::vector<std::vector<BucketPlan>> fragment_pieces(std::span<const BucketPlan> plan,
                                                     int fragments);

// The group size GradientExchange uses when none is given. A dense exchange keeps small
// groups: its allreduces are large enough to pay for themselves, and each one starts while
// backward still runs. A compressed exchange sends messages 10-1000x smaller than the
// gradient, so Gloo's cost per collective (~2 ms plus a ring's latency), not the bytes,
// dominates, and there is little to hide behind backward: it exchanges in groups of up
// to DDP's bucket size. Measured in the network lab (docs/measurements/network-lab.md,
// "Exchange groups"): on two MLPs, 25 MiB against 1 MiB made compressed steps 7-28%
// faster and dense ones 0-8% slower.
inline constexpr double kDenseGroupMb = 1.0;
inline constexpr double kCompressedGroupMb = 25.0;
inline constexpr double default_group_mb(bool dense) {
  return dense ? kDenseGroupMb : kCompressedGroupMb;
}

}  // namespace gradcomp
