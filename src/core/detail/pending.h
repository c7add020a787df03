// A tensor that its consumer forms block by block: the fused error-feedback paths
// (Codec::encode_with_residual, codec.h) hand a kernel the residual e and a Pending whose
// fill turns e[begin, end) into p = e + g (or momentum correction's form) just before the
// kernel reads that range, while it is in L1. The kernel then makes one pass over g and e
// instead of an accumulation pass followed by its own.
//
// Contract for kernels taking a `const Pending*` (nullptr: x is already final):
//   - fill(begin, end) is called exactly once for every element of [0, n), including on
//     every early return and before any exception is thrown (the residual must hold all of
//     p, as the unfused path leaves it); ranges are disjoint and may run on several threads;
//   - x[i] is read only after fill has covered i, except through peek(begin, end, dst),
//     which writes what fill will make x[begin, end) into dst and changes nothing.
#pragma once

#include <cstddef>
#include <functional>
#include <span>

#include "gradcomp/codec.h"

namespace gradcomp::detail {

// Elements per fill call: g, e (and efm's u) blocks of 8 KiB each stay in L1.
inline constexpr std::size_t kFillBlock = 2048;

struct Pending {
  std::function<void(std::size_t begin, std::size_t end)> fill;
  std::function<void(std::size_t begin, std::size_t end, float* dst)> peek;

  // fill over [begin, end) in kFillBlock pieces, calling f(b, e) on each piece after
  // filling it. f sees the pieces in order; piece starts are multiples of kFillBlock
  // relative to begin.
  template <class F>
  void blocks(std::size_t begin, std::size_t end, const F& f) const {
    for (std::size_t b = begin; b < end; b += kFillBlock) {
      const std::size_t e = end - b < kFillBlock ? end : b + kFillBlock;
      fill(b, e);
      f(b, e);
    }
  }
};

// Fills all of [0, n) (for paths that need the whole tensor before reading it).
inline void fill_all(const Pending* pending, std::size_t n) {
  if (pending != nullptr && n > 0) pending->fill(0, n);
}

// The residual e as a pending tensor: fill applies `update` (ResidualUpdate::apply),
// peek previews it. Both reference update and e, which must outlive the Pending.
inline Pending residual_pending(const ResidualUpdate& update, std::span<float> e) {
  float* data = e.data();
  return {[&update, data](std::size_t b, std::size_t end) { update.apply(data, b, end); },
          [&update, data](std::size_t b, std::size_t end, float* dst) {
            update.peek(data, b, end, dst);
          }};
}

}  // namespace gradcomp::detail
