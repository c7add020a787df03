// The groups of an exchange whose buffers live on a device: one device Reducer
// (gradcomp/device/reducer.h) per group key, built on first sight and held to the same
// buckets afterwards, and each group's step queued on a dist::Exchanger's thread
// (submit_task), in order with its other jobs. Both callers of the device reducers use
// it: the Python DDP hook's device path (python/src/exchanger_bindings.cc) and
// GradientExchange (src/torch/gradient_exchange.cc).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Stream.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "gradcomp/device/reducer.h"
#include "gradcomp/dist/exchanger.h"

namespace gradcomp::device {

class Groups {
 public:
  // One bucket of a group: its shape and where it starts in the group's buffer.
  struct Slot {
    BucketShape shape;
    std::size_t offset = 0;
  };
  // Run on the exchange thread around the group's step, with `stream` current (when
  // given): `before` ahead of the reducer (e.g. waiting for the gradients' copies, a
  // check of them), `after` once it returned (e.g. recording an event the consumer of
  // the means waits for). What either throws fails the job.
  struct Hooks {
    std::optional<c10::Stream> stream;
    std::function<void()> before;
    std::function<void()> after;
  };

  // The exchanger runs the jobs (its method is the groups'); the communicator is its own.
  // Both must outlive this.
  Groups(dist::Exchanger& exchanger, dist::Communicator& comm);
  Groups(const Groups&) = delete;
  Groups& operator=(const Groups&) = delete;

  // The group's reducer: built now for these buckets and `device` if the key is new;
  // InvalidArgument if the key was built for other buckets (or, from the factory, for a
  // method the device does not run).
  Reducer& group(std::uint64_t key, std::span<const Slot> slots, const at::Device& device);

  // Queues one step of group `key` (group() first, here): `buffer` a contiguous 1-D
  // float32 tensor holding its buckets at their offsets, overwritten with the means.
  // A bucket is compressed when `compress` and it is compressible. `done` as the
  // exchanger's; the buffer is held until it has run.
  void submit(std::uint64_t key, const at::Tensor& buffer, std::span<const Slot> slots,
              bool compress, const StepContext& ctx, dist::Exchanger::Done done, Hooks hooks = {});

  // The group's memories, live ("bucket<id>.<name>", on the device); empty for a key
  // never built. The exchanger must be drained.
  std::vector<std::pair<std::string, at::Tensor>> state(std::uint64_t key);
  // Builds the group if needed and copies `saved` into its memories by name; every saved
  // name must exist with its size (InvalidArgument naming it otherwise).
  void restore(std::uint64_t key, std::span<const Slot> slots, const at::Device& device,
               const std::map<std::string, at::Tensor>& saved);

  bool has(std::uint64_t key) const { return groups_.count(key) > 0; }
  void drop(std::uint64_t key) { groups_.erase(key); }
  // The first group's describe() ("allgather(...) on cuda:0"); empty when none exists.
  std::string describe() const;

 private:
  struct Group {
    std::vector<BucketShape> shapes;
    std::unique_ptr<Reducer> reducer;
  };
  dist::Exchanger& exchanger_;
  dist::Communicator& comm_;
  std::map<std::uint64_t, Group> groups_;  // node-stable: queued jobs hold the reducers
};

}  // namespace gradcomp::device
