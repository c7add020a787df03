// The device reducers behind gradcomp/device/reducer.h, one file each; reducer.cc picks
// one for a method. Internal to gradcomp_device.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <span>

#include "gradcomp/device/reducer.h"

namespace gradcomp::device {

// allgather.cc: an allgather of a device codec under ef, efm or noef, or of dgc (dgc.cc).
bool allgather_runs(const Method& method);
std::unique_ptr<Reducer> make_allgather_reducer(const Method& method, dist::Communicator& comm,
                                                std::span<const BucketShape> shapes,
                                                const at::Device& device);

// powersgd.cc: the powersgd scheme, whatever its parameters.
bool powersgd_runs(const Method& method);
std::unique_ptr<Reducer> make_powersgd_reducer(const Method& method, dist::Communicator& comm,
                                               std::span<const BucketShape> shapes,
                                               const at::Device& device);

// scatter.cc: the scatter reducer of a device codec under ef, efm or noef.
bool scatter_runs(const Method& method);
std::unique_ptr<Reducer> make_scatter_reducer(const Method& method, dist::Communicator& comm,
                                              std::span<const BucketShape> shapes,
                                              const at::Device& device);

}  // namespace gradcomp::device
