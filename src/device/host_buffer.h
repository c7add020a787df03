// Host memory that a device reducer's copies go through, kept across steps (internal to
// gradcomp_device): pinned where the device is CUDA, so that the copy engine reads and
// writes it directly, where pageable memory goes through the driver's staging buffer in
// chunks; grown to the largest size asked for (by half again, so that sizes that creep up,
// as sampled top-k's messages do, reallocate a few times, not every step). On the CPU (CI's
// runs of the device path) plain memory with the same bookkeeping.
#pragma once

#include <ATen/ATen.h>

#include <cstddef>
#include <cstdint>

namespace gradcomp::device {

class HostBuffer {
 public:
  HostBuffer(at::ScalarType type, const at::Device& device)
      : type_(type), pinned_(device.is_cuda()) {}

  // n elements of the buffer as a CPU tensor. Its contents are those the last take() left
  // while n stays within what is allocated; a larger n reallocates and loses them.
  at::Tensor take(std::int64_t n) {
    if (!memory_.defined() || memory_.numel() < n) {
      const std::int64_t grown = memory_.defined() ? memory_.numel() + memory_.numel() / 2 : 0;
      memory_ = at::empty({grown > n ? grown : n},
                          at::TensorOptions().dtype(type_).pinned_memory(pinned_));
      ++allocations_;
    }
    return memory_.narrow(0, 0, n);
  }

  // Buffers allocated so far (tests check that steps reuse them).
  std::size_t allocations() const { return allocations_; }
  bool pinned() const { return pinned_; }

 private:
  at::ScalarType type_;
  bool pinned_;
  at::Tensor memory_;
  std::size_t allocations_ = 0;
};

}  // namespace gradcomp::device
