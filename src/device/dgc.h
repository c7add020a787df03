// DGC's memory (src/core/memory/dgc.cc, the "dgc" named memory) for one bucket, on the
// gradients' device: the allgather reducer (allgather.cc) runs it where the host reducer
// runs Dgc::compress, so that only the message crosses to the host. Internal to
// gradcomp_device.
#pragma once

#include <ATen/ATen.h>

#include <cstddef>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "gradcomp/codec.h"
#include "gradcomp/device/codec.h"
#include "gradcomp/step_context.h"
#include "memory/dgc.h"

namespace gradcomp::device {

class DgcMemory {
 public:
  // A bucket of n elements, its momentum u, accumulator v and learning rate zero (as the
  // host memory starts), as float32 tensors with `floats`' device.
  DgcMemory(const detail::DgcOptions& options, std::size_t n, const at::TensorOptions& floats);
  // A bucket whose u and v are the tensors given (zeros; `momentum` undefined when
  // correction=0): the allgather reducer lays its buckets' memories back to back, so that a
  // batch reads them in place.
  DgcMemory(const detail::DgcOptions& options, at::Tensor momentum, at::Tensor accumulator);

  // Dgc::compress: one step with the gradient `grad` (contiguous 1-D float32, n elements,
  // read only). Returns the message's payload (topk's fp32 sparse payload, to be framed
  // with the method's message codec); u, v and the rate as the host memory leaves them.
  at::Tensor compress(const at::Tensor& grad, const StepContext& ctx);

  // compress() for several buckets at once, memories[j] with grads[j] and ctxs[j] (one
  // options' memories): their clipping norms read in one host sync, their selections one
  // top-k batch (topk_batch.h: a few syncs for all of them, where one bucket at a time
  // takes two or more each). `momentum` and `accumulator`: the memories' u and v back to
  // back, where their tensors are views of these in this order; undefined, each bucket's
  // are gathered, and written back after. The payloads are compress()'s, byte for byte, and
  // u, v, the rates end as compress() leaves them.
  static DeviceCodec::EncodedBatch compress_batch(std::span<DgcMemory* const> memories,
                                                  std::span<const at::Tensor> grads,
                                                  std::span<const StepContext> ctxs,
                                                  const at::Tensor& momentum,
                                                  const at::Tensor& accumulator);

  // Dgc::compress_dense: the step sending all of v; grad receives it.
  void compress_dense(const at::Tensor& grad, const StepContext& ctx);

  // Dgc::step_max_encoded_bytes.
  std::size_t step_max_encoded_bytes(const Codec& codec, const StepContext& ctx) const;

  // Appends the host memory's state, prefixed: "momentum" (with correction),
  // "accumulator", "learning_rate" (with lr_rescale). The tensors may be written before
  // the next step (a checkpoint restored).
  void append_state(const std::string& prefix,
                    std::vector<std::pair<std::string, at::Tensor>>& out);

 private:
  void rescale_to(float lr);
  at::Tensor clipped(const at::Tensor& grad, const StepContext& ctx) const;
  void accumulate(const at::Tensor& g);

  detail::DgcOptions o_;
  std::size_t n_;
  at::Tensor u_;   // momentum (undefined with correction=0)
  at::Tensor v_;   // accumulated velocity
  at::Tensor lr_;  // lr_rescale: the rate v is formed at, one float (0: none yet)
  // lr_'s value as this object last wrote it, so that a step reads nothing back from the
  // device; unknown after append_state handed lr_ out, until the next step reads it.
  float lr_formed_ = 0.0f;
  bool lr_known_ = true;
};

}  // namespace gradcomp::device
