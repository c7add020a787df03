// Reducers for gradients that live on a device: the buckets, the memories and the heavy
// arithmetic stay on the device, and only what the collectives carry crosses to the host
// (the communicator is Gloo's, over host memory). Callers (the Python hook's device path,
// python/src/exchanger_bindings.cc, and GradientExchange's, src/torch/, both through
// gradcomp/device/groups.h) see this interface only; which reducer runs follows from the
// method:
//   allgather   a codec with a device implementation (device_codec_names()) under the
//               allgather reducer, with ef, efm or noef (src/device/allgather.cc), or the
//               dgc memory (src/device/dgc.cc): the host allgather reducer's step, only
//               compressed messages crossing;
//   scatter     a device codec under the scatter reducer, with ef, efm or noef
//               (src/device/scatter.cc): the host scatter reducer's two phases
//               (src/dist/scatter_reducer.cc), the frames laid out by the same code
//               (src/dist/scatter_frames.h), only messages crossing;
//   powersgd    the PowerSGD scheme (src/device/powersgd.cc): the host scheme's step
//               (src/dist/powersgd.cc), only the P and Q factors and the dense buckets
//               crossing.
// Each computes what its host reducer computes, with the same collectives in the same
// order (so the same bytes on the wire), and keeps its memories under the host's names
// (so a checkpoint from either path restores into the other). How close the results are:
// the allgather reducer's are the host's bit for bit on CPU tensors
// (tests/python/test_hook.py, tests/device/dgc_device_test.cc; DGC's clipping off the CPU
// agrees to rounding); PowerSGD's products are ATen matrix multiplications, whose
// summation order is not the host kernels' (kernels/low_rank.h), so its results agree to
// rounding (tests/device/powersgd_device_test.cc, test_hook.py).
//
// Device work runs on the caller's current stream. reduce() waits for the device where a
// collective needs its bytes on the host (each implementation says where).
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "gradcomp/device/codec.h"
#include "gradcomp/dist/communicator.h"
#include "gradcomp/method.h"
#include "gradcomp/reducer.h"

namespace gradcomp::device {

class Reducer {
 public:
  // Whether `method` runs on the device: an allgather or a scatter of a device codec under
  // ef, efm or noef, an allgather of dgc, or powersgd (any of its parameters). Everything else
  // (linear codecs' allreduce, the sketch schemes) does not, and its callers stage the gradients
  // through the host instead.
  static bool supports(const Method& method);

  virtual ~Reducer() = default;
  Reducer() = default;
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  // grads[b]: bucket b as a contiguous 1-D float32 tensor on the device, overwritten with
  // the mean over ranks (PowerSGD: its estimate of the mean); compressed[b] false averages
  // it densely this step (memory left untouched). Every rank calls it with the same
  // buckets in the same order, as the host Reducer::reduce. ctx.rank / world / bucket /
  // rows are filled in here.
  virtual void reduce(std::span<const at::Tensor> grads, std::span<const bool> compressed,
                      const StepContext& ctx) = 0;

  virtual ReduceStats take_stats() = 0;
  // "bucket<id>.<name>" as the host reducer names its buffers ("residual", "momentum",
  // "q"), in the host's order, so a state saved from either restores into the other.
  // Tensors on the device; writable (a restore copies into them).
  virtual std::vector<std::pair<std::string, at::Tensor>> state() = 0;
  // What runs, and where: "allgather(efm(topk:...)) on cuda:0", "powersgd:rank=2,... on cpu".
  virtual std::string describe() const = 0;
};

// The reducer that runs `method` for buckets of the given shapes (in the order reduce()
// receives them), memories on `device`. InvalidArgument when !Reducer::supports(method),
// or for shapes the host reducer refuses. The communicator must outlive it.
std::unique_ptr<Reducer> make_device_reducer(const Method& method, dist::Communicator& comm,
                                             std::span<const BucketShape> shapes,
                                             const at::Device& device);

}  // namespace gradcomp::device
