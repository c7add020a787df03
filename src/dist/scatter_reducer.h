// The scatter reducer (ReducerKind::kScatter): a compressed reduce-scatter followed by a
// compressed allgather, for any codec. Internal to gradcomp_dist; make_reducer builds it.
#pragma once

#include <memory>
#include <span>

#include "gradcomp/dist/communicator.h"
#include "gradcomp/method.h"
#include "gradcomp/reducer.h"

namespace gradcomp::dist {

// Point-to-point tags of the two phases (the parameter server uses 11 to 14).
inline constexpr int kTagScatterSlices = 21;
inline constexpr int kTagScatterSums = 22;

std::unique_ptr<Reducer> make_scatter_reducer(const Method& method, Communicator& comm,
                                              std::span<const BucketShape> shapes);

}  // namespace gradcomp::dist
