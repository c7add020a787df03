// The scatter reducer (ReducerKind::kScatter): a compressed reduce-scatter followed by a
// compressed allgather, for any codec. Internal to gradcomp_dist; make_reducer builds it.
#pragma once

#include <memory>
#include <span>

#include "gradcomp/dist/communicator.h"
#include "gradcomp/method.h"
#include "gradcomp/reducer.h"
#include "scatter_frames.h"

namespace gradcomp::dist {

std::unique_ptr<Reducer> make_scatter_reducer(const Method& method, Communicator& comm,
                                              std::span<const BucketShape> shapes);

}  // namespace gradcomp::dist
