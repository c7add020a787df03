// A Reducer for one process that still compresses: each compressed bucket goes through
// its Memory (e.g. error feedback) and the message is decoded back into the bucket,
// exactly what a one-worker allgather would deliver. So compression (and its effect on
// accuracy) applies in single-process runs and in tests, without c10d.
// bytes_sent counts the messages a worker would put on the wire (dense buckets as fp32).
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "gradcomp/memory.h"
#include "gradcomp/method.h"
#include "gradcomp/reducer.h"
#include "gradcomp/registry.h"
#include "train/layout.h"

namespace gradcomp::train {

class LocalReducer final : public Reducer {
 public:
  // One Memory of the method per compressible bucket, built once (and its message buffer
  // with it). A scheme, which needs peers, is refused (InvalidArgument).
  LocalReducer(const Method& method, std::span<const BucketShape> buckets);

  void reduce(std::span<const BucketRef> buckets, const StepContext& ctx) override;
  ReduceStats take_stats() override;
  std::vector<StateBuffer> state() override;
  std::string describe() const override;
  bool momentum_in_memory() const override;

 private:
  struct Slot {
    BucketShape shape;
    std::unique_ptr<Memory> memory;  // null for the dense bucket
    std::vector<std::byte> message;
  };
  std::string compressor_;
  std::vector<Slot> slots_;  // in bucket order
  ReduceStats stats_;
};

}  // namespace gradcomp::train
