#include "detail/scratch.h"

#include <new>
#include <string>

#include "gradcomp/error.h"

namespace gradcomp::detail {

namespace {

inline constexpr std::align_val_t kScratchAlign{64};

// Scratch comes from the (aligned) global operator new, not aligned_alloc, so that
// allocation counters that replace operator new (the benchmark harness) see its growth.
struct AlignedDeleter {
  void operator()(std::byte* p) const { ::operator delete(p, kScratchAlign); }
};

struct Slot {
  std::unique_ptr<std::byte, AlignedDeleter> data;
  std::size_t capacity = 0;
};

}  // namespace

std::span<std::byte> scratch_bytes(int slot, std::size_t bytes, std::size_t reserve) {
  thread_local Slot slots[kScratchSlots];
  if (slot < 0 || slot >= kScratchSlots) {
    throw InvalidArgument("scratch: slot " + std::to_string(slot) + " out of range");
  }
  Slot& s = slots[slot];
  const std::size_t need = std::max(bytes, reserve);
  if (s.capacity < need) {
    // Grow geometrically so buckets of slightly different sizes do not reallocate.
    std::size_t cap = s.capacity == 0 ? 4096 : s.capacity;
    while (cap < need) cap *= 2;
    s.data.reset();  // release the old buffer first: peak memory stays at the new size
    s.capacity = 0;
    s.data.reset(static_cast<std::byte*>(::operator new(cap, kScratchAlign)));
    s.capacity = cap;
  }
  return {s.data.get(), bytes};
}

}  // namespace gradcomp::detail
