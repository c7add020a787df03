// A Reducer owns the communication of one training step: it turns every worker's
// local gradient buckets into the mean gradient over all workers, in place. Dense
// allreduce, allreduce of linear codec messages, allgather of the rest, a parameter
// server and multi-round schemes (PowerSGD, Sketched-SGD) are all Reducers.
//
// This header is torch-free: buckets are flat fp32 spans the trainer owns (it copies
// parameter gradients in and out of them), so reducers are testable without LibTorch.
// Collectives must be issued in the same order on every rank (Gloo hangs otherwise):
// every rank calls reduce() with the same buckets (ids, sizes, order) every step.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "gradcomp/error.h"
#include "gradcomp/memory.h"
#include "gradcomp/step_context.h"

namespace gradcomp {

// One bucket's gradient: a layer, or a fused group of layers, flattened.
struct BucketRef {
  std::uint32_t id = 0;    // stable across steps and ranks; keys RNG streams and memories
  std::span<float> grad;   // in: this worker's gradient; out: the mean over workers
  bool compressed = true;  // false: exchanged dense (small or 1-D tensors, warm-up)
};

// What a Reducer is built for: one entry per bucket, in the order reduce() receives them.
struct BucketShape {
  std::uint32_t id = 0;
  std::size_t numel = 0;
  bool compressible = true;  // false: the dense bucket (small and 1-D tensors)
  // Rows of the bucket's matrix view when it holds one layer of dim >= 2 (its first
  // dimension); 0 for fused buckets. PowerSGD and ATOMO factor that matrix.
  std::size_t rows = 0;

  bool operator==(const BucketShape&) const = default;
};

// What a step cost, accumulated since the last take_stats().
struct ReduceStats {
  std::uint64_t bytes_sent = 0;      // payload bytes this rank put on the wire
  std::uint64_t bytes_received = 0;  // payload bytes this rank took off the wire
  double encode_seconds = 0;         // Memory::compress (error feedback included)
  double comm_seconds = 0;           // time inside collectives
  double decode_seconds = 0;         // decode_add and averaging
  std::uint64_t steps = 0;
  // Compressed buckets sent dense instead, one count per bucket and step, because their
  // gathered messages would have cost more bytes than the dense allreduce (Memory's
  // dense fallback).
  std::uint64_t dense_fallbacks = 0;
  // Groups whose gradients held NaN or an infinity on some rank and became +inf on
  // every rank, their memories untouched (dist::Exchanger::NonFinite::kSkipStep).
  std::uint64_t non_finite_skips = 0;

  // Adds everything but `steps`, which callers count their own way (distinct steps).
  ReduceStats& add_costs(const ReduceStats& s) {
    bytes_sent += s.bytes_sent;
    bytes_received += s.bytes_received;
    encode_seconds += s.encode_seconds;
    comm_seconds += s.comm_seconds;
    decode_seconds += s.decode_seconds;
    dense_fallbacks += s.dense_fallbacks;
    non_finite_skips += s.non_finite_skips;
    return *this;
  }
};

class Reducer {
 public:
  virtual ~Reducer() = default;

  // Replaces every bucket's local gradient with the mean over all workers.
  // Throws CommError when a peer fails or an operation times out.
  virtual void reduce(std::span<const BucketRef> buckets, const StepContext& ctx) = 0;

  // Statistics since the previous call, then resets them.
  virtual ReduceStats take_stats() = 0;

  // Every per-bucket Memory state in a fixed order (bucket id, then buffer), for
  // checkpoints. Empty for stateless reducers.
  virtual std::vector<StateBuffer> state() = 0;

  // e.g. "allgather(ef(topk:ratio=0.01,...))".
  virtual std::string describe() const = 0;

  // True when the momentum of compressed buckets lives in the reducer's memories (DGC's
  // momentum correction, Sketched-SGD, FetchSGD): the optimizer must then update those
  // buckets' parameters without momentum of its own. Dense buckets keep theirs.
  virtual bool momentum_in_memory() const { return false; }

  // True when every bucket is a plain fp32 mean (sum over ranks, / W) whatever its
  // BucketRef::compressed says, with no state: the dense reducer.
  virtual bool dense_only() const { return false; }
};

}  // namespace gradcomp
