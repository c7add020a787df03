// The scatter reducer (ReducerKind::kScatter): a compressed reduce-scatter followed by a
// compressed allgather, for any codec. Internal to gradcomp_dist; make_reducer builds it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "gradcomp/dist/communicator.h"
#include "gradcomp/method.h"
#include "gradcomp/reducer.h"

namespace gradcomp::dist {

// Point-to-point tags of the two phases (the parameter server uses 11 to 14).
inline constexpr int kTagScatterSlices = 21;
inline constexpr int kTagScatterSums = 22;

// The RNG key (StepContext::bucket) of a slice's message: a stochastic codec must not draw
// the same numbers for the W slices of a bucket, nor the owner for its mean as for its own
// slice. A 64-bit mix of (bucket, owner, slice), cut to 32 bits.
inline std::uint32_t scatter_slice_stream(std::uint32_t bucket, std::size_t slice, bool owner) {
  std::uint64_t k = (std::uint64_t{bucket} << 32) | (std::uint64_t{owner} << 31) | slice;
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  return static_cast<std::uint32_t>(k);
}

std::unique_ptr<Reducer> make_scatter_reducer(const Method& method, Communicator& comm,
                                              std::span<const BucketShape> shapes);

}  // namespace gradcomp::dist
