// The device reducers behind gradcomp/device/reducer.h, one file each; reducer.cc picks
// one for a method. Internal to gradcomp_device.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <span>
#include <string>

#include "codecs/codecs.h"
#include "gradcomp/device/reducer.h"
#include "gradcomp/error.h"

namespace gradcomp::device {

// Every device reducer's first check of reduce()'s arguments: a gradient and a flag for each
// of its `buckets` buckets, grads[b] a contiguous 1-D float32 tensor of numel(b) values;
// InvalidArgument in one line, starting with `op`, otherwise.
template <typename Numel>
void check_reduce_args(const std::string& op, std::span<const at::Tensor> grads,
                       std::span<const bool> compressed, std::size_t buckets, const Numel& numel) {
  if (grads.size() != buckets || compressed.size() != buckets) {
    throw InvalidArgument(op + ": " + std::to_string(grads.size()) +
                          " buckets, reducer built for " + std::to_string(buckets));
  }
  for (std::size_t b = 0; b < grads.size(); ++b) {
    check_floats(grads[b], op.c_str());
    const auto expected = static_cast<std::int64_t>(numel(b));
    if (grads[b].numel() != expected) {
      throw InvalidArgument(op + ": bucket " + std::to_string(b) + " has " +
                            std::to_string(grads[b].numel()) + " elements, expected " +
                            std::to_string(expected));
    }
  }
}

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
