// The allgather reducer (gradcomp/dist/reducers.h) for gradients that live on a device:
// only compressed bytes cross to the host.
//
// One step, every rank in the same order, as the host reducer's allgather mode:
//   encode   each compressed bucket's memory step on the device (error feedback, momentum
//            correction or none, memories kept on the device); the payloads copied to the
//            host in one piece and framed there (the CPU codec's messages, byte for byte);
//   pack     uncompressed buckets (and the dense fallback's) copied to one host fp32
//            buffer: the small tensors dense_share keeps out of compression;
//   comm     the fp32 allreduce, then the message allgather;
//   decode   dense slices * 1/W back to the device; the gathered messages copied to the
//            device in one piece and decoded there, grad = sum over ranks r = 0..W-1 of
//            decode(msg_r) / W in rank order, so every rank ends bit-identical.
// On CPU tensors it computes exactly what the host reducer does (tests hold it to that,
// bit for bit); on CUDA its device codecs are checked against the CPU codecs by
// tests/python/test_device_codec.py on a GPU.
//
// Device work runs on the caller's current stream; reduce() returns when the device work
// that writes the means is queued (it waits for the payloads' copy, and the codecs' own
// checks and top-k's selection sizes wait for the device too: about 1.5 ms a compressed
// bucket on an H100 with ResNet-50, docs/measurements/gpu.md). What runs here: supports().
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

class DeviceReducer {
 public:
  // Whether `method` runs here: a codec with a device implementation (device_codec_names())
  // under the allgather reducer, with error feedback (ef), momentum correction (efm) or no
  // memory (noef). Everything else (linear codecs' allreduce, dgc, schemes) does not, and
  // its callers stage the gradients through the host instead.
  static bool supports(const Method& method);

  // Buckets of the given shapes (in the order reduce() receives them), memories on
  // `device`. InvalidArgument when !supports(method). The communicator must outlive it.
  DeviceReducer(const Method& method, dist::Communicator& comm, std::span<const BucketShape> shapes,
                const at::Device& device);
  ~DeviceReducer();
  DeviceReducer(const DeviceReducer&) = delete;
  DeviceReducer& operator=(const DeviceReducer&) = delete;

  // grads[b]: bucket b as a contiguous 1-D float32 tensor on the device, overwritten with
  // the mean over ranks; compressed[b] false averages it densely this step (memory left
  // untouched). ctx.rank / world / bucket / rows are filled in here.
  void reduce(std::span<const at::Tensor> grads, std::span<const bool> compressed,
              const StepContext& ctx);

  ReduceStats take_stats();
  // "bucket<id>.<name>" as the host memories name theirs ("residual", "momentum"), so a
  // state saved from either restores into the other. Tensors on the device; writable.
  std::vector<std::pair<std::string, at::Tensor>> state();
  std::string describe() const;

 private:
  struct Bucket;
  at::Tensor compress(Bucket& bucket, const at::Tensor& grad, const StepContext& ctx);
  void compress_dense(Bucket& bucket, const at::Tensor& grad, const StepContext& ctx);
  bool dense_is_cheaper(const Bucket& bucket, const StepContext& ctx) const;

  enum class MemoryKind { kNone, kErrorFeedback, kMomentum };
  MemoryKind memory_;
  bool dense_fallback_;
  std::string describe_;
  std::shared_ptr<const Codec> codec_;
  std::unique_ptr<DeviceCodec> device_codec_;
  dist::Communicator& comm_;
  std::vector<Bucket> buckets_;
  std::vector<std::byte> send_;
  std::vector<std::byte> gathered_;
  std::vector<std::size_t> offsets_;
  std::vector<std::span<const std::byte>> spans_;
  std::vector<float> dense_;
  ReduceStats stats_;
};

}  // namespace gradcomp::device
