// Which device reducer runs a method (gradcomp/device/reducer.h).
#include "gradcomp/device/reducer.h"

#include "device/reducers.h"
#include "gradcomp/error.h"

namespace gradcomp::device {

bool Reducer::supports(const Method& method) {
  return allgather_runs(method) || scatter_runs(method) || powersgd_runs(method);
}

std::unique_ptr<Reducer> make_device_reducer(const Method& method, dist::Communicator& comm,
                                             std::span<const BucketShape> shapes,
                                             const at::Device& device) {
  if (powersgd_runs(method)) return make_powersgd_reducer(method, comm, shapes, device);
  if (allgather_runs(method)) return make_allgather_reducer(method, comm, shapes, device);
  if (scatter_runs(method)) return make_scatter_reducer(method, comm, shapes, device);
  throw InvalidArgument("device reducer: " + method.canonical() +
                        " does not run on the device (an allgather or a scatter of a device " +
                        "codec under ef, efm or noef does, an allgather of dgc, and powersgd)");
}

}  // namespace gradcomp::device
