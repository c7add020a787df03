// Codecs on the gradients' own device. A DeviceCodec is one built-in codec's encode and
// decode written in ATen operations, so that it runs wherever the tensors live: on a CUDA
// device for a GPU job (only the message crosses PCIe), on the CPU in CI, where its
// messages are checked byte for byte against the CPU codec's (codec.h).
//
// The split: the device writes the payload (the bytes after the 24-byte header) into a
// uint8 tensor on its own device; the host frames it (frame_message: header and CRC-32C,
// computed over the few compressed bytes after they crossed), so a device message is the
// CPU codec's message, decodable by either. Received messages are opened on the host
// (open_payload: framing, checksum, codec, spec, n), their payloads copied to the device
// and decoded there; each device codec validates its payload's length and contents as the
// CPU codec does before writing anything.
//
// Memories (error feedback) stay on the device: encode_payload_with_residual is the
// residual step of Codec::encode_with_residual for plain error feedback (p = e + g).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "gradcomp/codec.h"
#include "gradcomp/step_context.h"

namespace gradcomp::device {

class DeviceCodec {
 public:
  explicit DeviceCodec(const Codec& codec) : codec_(codec) {}
  virtual ~DeviceCodec() = default;
  DeviceCodec(const DeviceCodec&) = delete;
  DeviceCodec& operator=(const DeviceCodec&) = delete;

  // The CPU codec whose messages this one writes (spec, wire id, config tag).
  const Codec& codec() const { return codec_; }

  // The public entry points are non-virtual (as Codec's): they check the arguments, naming
  // the codec (InvalidArgument), and call the codec's hooks below.

  // The payload of codec().encode(g): a 1-D uint8 tensor on g's device. g is a contiguous
  // 1-D float32 tensor. Throws InvalidArgument where the CPU codec does (non-finite input).
  at::Tensor encode_payload(const at::Tensor& g, const StepContext& ctx) const;

  // One error-feedback step on the residual e (float32, g's device and size): e <- e + g,
  // returns the payload of encode(e), leaves e <- e - decode(payload). Payload and
  // residual equal Codec::encode_with_residual(ResidualUpdate(g), e, ...)'s.
  at::Tensor encode_payload_with_residual(const at::Tensor& g, const at::Tensor& e,
                                          const StepContext& ctx) const;

  // p <- p - decode(payload), returns the payload of encode(p) (Codec::encode_feedback).
  at::Tensor encode_payload_feedback(const at::Tensor& p, const StepContext& ctx) const;

  // out += alpha * decode(payload): payload a 1-D uint8 tensor on out's device, out a
  // contiguous 1-D float32 tensor of n elements (the header, already opened, said n).
  // Throws CorruptMessage naming the codec, with out unchanged, for a payload the CPU
  // codec would refuse.
  void decode_payload_add(const at::Tensor& payload, const at::Tensor& out, float alpha) const;

  // ---- Batches: the tensors of one step encoded, and their messages decoded, together.
  // Each result equals the one-tensor calls' above, tensor by tensor, byte for byte; a codec
  // that batches() shares the launches and host syncs among the tensors (top-k: one
  // selection and two syncs for all, not one selection and two syncs each, which cost
  // ResNet-50's 42 tensors most of the device reducer's time: docs/measurements/gpu.md;
  // the others: one sync for all the decode's checks, and for the adaptive 2-bit's
  // thresholds and fp16's and efsign's finiteness checks, instead of one a tensor). Every
  // built-in device codec batches; the defaults below run the one-tensor calls in a loop.
  virtual bool batches() const { return false; }

  struct EncodedBatch {
    at::Tensor payloads;              // uint8 on flat's device: the payloads back to back
    std::vector<std::int64_t> bytes;  // each one's length
  };
  // Segment s of flat (contiguous 1-D float32) is the sizes[s] values after segment s - 1;
  // sum(sizes) = flat.numel(), ctxs[s] its step context. feedback: the payloads of
  // encode_payload_feedback(segment s, ctxs[s]), each segment left p - decode(payload);
  // else those of encode_payload(segment s, ctxs[s]), flat unchanged. A non-finite value
  // is refused (InvalidArgument) as the one-tensor call refuses it, for the first
  // segment holding one; flat's other segments may then have been written.
  EncodedBatch encode_batch(const at::Tensor& flat, std::span<const std::int64_t> sizes,
                            std::span<const StepContext> ctxs, bool feedback) const;
  // The error-feedback step of every segment: what encode_payload_with_residual(segment s
  // of g, segment s of e, ctxs[s]) returns and leaves in e, segment by segment (g and e
  // as flat above, of one size and device); e's codecs fuse e + g into their encode's pass.
  EncodedBatch encode_batch_with_residual(const at::Tensor& g, const at::Tensor& e,
                                          std::span<const std::int64_t> sizes,
                                          std::span<const StepContext> ctxs) const;
  // outs[s] = the sum over r = 0, 1, ..., ranks - 1, in that order, of alpha * decode(payload
  // (r, s)), where payload (r, s) is payloads.narrow(0, offsets[i], bytes[i]), i = r * S + s,
  // S = outs.size(): what zeroing outs[s] and then decode_payload_add of each rank's
  // payload in rank order writes. Refusals as decode_payload_add's, the first in
  // segment-major order; the outs are then unspecified.
  void decode_batch(const at::Tensor& payloads, std::span<const std::int64_t> offsets,
                    std::span<const std::int64_t> bytes, std::span<const at::Tensor> outs,
                    float alpha) const;

 protected:
  // The hooks, called with checked arguments.
  virtual at::Tensor encode_impl(const at::Tensor& g, const StepContext& ctx) const = 0;
  // The default adds g to e, then calls encode_feedback_impl; a codec may fuse the passes.
  virtual at::Tensor encode_with_residual_impl(const at::Tensor& g, const at::Tensor& e,
                                               const StepContext& ctx) const;
  // The default encodes, then decodes with alpha -1.
  virtual at::Tensor encode_feedback_impl(const at::Tensor& p, const StepContext& ctx) const;
  // Validates the payload's length and contents before writing anything.
  virtual void decode_add_impl(const at::Tensor& payload, const at::Tensor& out,
                               float alpha) const = 0;
  // The defaults loop over the one-tensor hooks; arguments checked.
  virtual EncodedBatch encode_batch_impl(const at::Tensor& flat,
                                         std::span<const std::int64_t> sizes,
                                         std::span<const StepContext> ctxs, bool feedback) const;
  virtual EncodedBatch encode_batch_with_residual_impl(const at::Tensor& g, const at::Tensor& e,
                                                       std::span<const std::int64_t> sizes,
                                                       std::span<const StepContext> ctxs) const;
  virtual void decode_batch_impl(const at::Tensor& payloads, std::span<const std::int64_t> offsets,
                                 std::span<const std::int64_t> bytes,
                                 std::span<const at::Tensor> outs, float alpha) const;

 private:
  const Codec& codec_;
};

// The device codec of a built-in codec, or nullptr where it has none yet (which codecs
// have one: device_codec_names()). It keeps a reference to `codec`, which must outlive it.
std::unique_ptr<DeviceCodec> make_device_codec(const Codec& codec);

// The codec names with a device implementation, e.g. {"fp16", "topk", ...}.
std::vector<std::string> device_codec_names();

// The fused CUDA kernels (src/device/cuda/: 1bit, signsgd, 2bit and top-k's selection, each
// encode one pass over g and e): whether this build has them (a CUDA torch and nvcc, or
// -DGRADCOMP_CUDA_KERNELS=ON), and whether the codecs use them on CUDA tensors. They do by
// default; GRADCOMP_DEVICE_KERNELS=0 in the environment or set_cuda_kernels(false) keeps
// the ATen operations, the reference the GPU tests hold the kernels to, byte for byte.
// set_cuda_kernels returns whether they were in use.
bool cuda_kernels_built();
bool cuda_kernels_enabled();
bool set_cuda_kernels(bool on);

// The message of `payload` (a CPU uint8 tensor: the device's payload once copied over)
// for n elements: header + payload, byte for byte Codec::encode's message.
std::vector<std::byte> frame_message(const Codec& codec, std::size_t n, const at::Tensor& payload);

// The payload of a received message as a CPU uint8 tensor viewing msg (no copy), after
// open_payload's checks (framing, checksum, codec, spec, n). msg must outlive the tensor.
at::Tensor open_message(std::span<const std::byte> msg, const Codec& codec, std::size_t n);

}  // namespace gradcomp::device
