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
std::span<std::byte> scratch_bytes(int slot, std::size_t bytes);

template <class T>
std::span<T> scratch(int slot, std::size_t count) {
  static_assert(std::is_trivially_copyable_v<T> && alignof(T) <= 64);
  auto raw = scratch_bytes(slot, count * sizeof(T));
  return {reinterpret_cast<T*>(raw.data()), count};
}

}  // namespace gradcomp::detail
