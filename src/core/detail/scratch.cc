#include "detail/scratch.h"

#include <cstdlib>
#include <new>
#include <string>

#include "gradcomp/error.h"

namespace gradcomp::detail {

namespace {

struct FreeDeleter {
  void operator()(std::byte* p) const { std::free(p); }
};

struct Slot {
  std::unique_ptr<std::byte, FreeDeleter> data;
  std::size_t capacity = 0;
};

}  // namespace

std::span<std::byte> scratch_bytes(int slot, std::size_t bytes) {
  thread_local Slot slots[kScratchSlots];
  if (slot < 0 || slot >= kScratchSlots) {
    throw InvalidArgument("scratch: slot " + std::to_string(slot) + " out of range");
  }
  Slot& s = slots[slot];
  if (s.capacity < bytes) {
    // Grow geometrically so buckets of slightly different sizes do not reallocate.
    std::size_t cap = s.capacity == 0 ? 4096 : s.capacity;
    while (cap < bytes) cap *= 2;
    void* p = std::aligned_alloc(64, cap);
    if (p == nullptr) throw std::bad_alloc();
    s.data.reset(static_cast<std::byte*>(p));
    s.capacity = cap;
  }
  return {s.data.get(), bytes};
}

}  // namespace gradcomp::detail
