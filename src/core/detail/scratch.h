// Per-thread scratch buffers for codecs. Codecs are const and shared; their working
// memory (|p| copies for selection, candidate lists, bitmaps) lives here, grown on
// first use and reused afterwards, so steady-state encoding allocates nothing.
// Each slot is an independent buffer; a codec uses distinct slots for buffers it
// needs at the same time.
#pragma once

#include <cstddef>
#include <memory>
#include <span>

namespace gradcomp::detail {

inline constexpr int kScratchSlots = 4;

// Raw bytes of slot `slot`, at least `bytes` long, 64-byte aligned. Contents are
// unspecified. Valid until the next call with the same slot on this thread.
// The slot also holds at least `reserve` bytes: callers whose need varies from call to
// call (candidate sets of a selection) pass the worst case, so the slot is allocated
// once for a bucket size instead of growing at some later training step. Pages of a
// large allocation that are never touched cost no physical memory.
std::span<std::byte> scratch_bytes(int slot, std::size_t bytes, std::size_t reserve = 0);

template <class T>
std::span<T> scratch(int slot, std::size_t count, std::size_t reserve_count = 0) {
  static_assert(std::is_trivially_copyable_v<T> && alignof(T) <= 64);
  auto raw = scratch_bytes(slot, count * sizeof(T), reserve_count * sizeof(T));
  return {reinterpret_cast<T*>(raw.data()), count};
}

}  // namespace gradcomp::detail
