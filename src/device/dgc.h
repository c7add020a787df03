// DGC's memory (src/core/memory/dgc.cc, the "dgc" named memory) for one bucket, on the
// gradients' device: the allgather reducer (allgather.cc) runs it where the host reducer
// runs Dgc::compress, so that only the message crosses to the host. Internal to
// gradcomp_device.
#pragma once

#include <ATen/ATen.h>

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "gradcomp/codec.h"
#include "gradcomp/step_context.h"
#include "memory/dgc.h"

namespace gradcomp::device {

class DgcMemory {
 public:
  // A bucket of n elements, its momentum u, accumulator v and learning rate zero (as the
  // host memory starts), as float32 tensors with `floats`' device.
  DgcMemory(const detail::DgcOptions& options, std::size_t n, const at::TensorOptions& floats);

  // Dgc::compress: one step with the gradient `grad` (contiguous 1-D float32, n elements,
  // read only). Returns the message's payload (topk's fp32 sparse payload, to be framed
  // with the method's message codec); u, v and the rate as the host memory leaves them.
  at::Tensor compress(const at::Tensor& grad, const StepContext& ctx);

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
