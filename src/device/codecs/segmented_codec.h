// A device codec whose encodes are all one function over a batch of segments (fp16, 2bit,
// efsign): the one-tensor calls are batches of one, so a batch shares the host syncs its
// encode needs (a threshold, a finiteness check) by construction.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <span>

#include "checked_decode.h"

namespace gradcomp::device {

class SegmentedCodec : public CheckedDecodeCodec {
 public:
  using CheckedDecodeCodec::CheckedDecodeCodec;

 protected:
  // The payloads of a's segments (sizes, back to back) holding x_s = a_s + b_s (b
  // undefined: a_s); where write, a_s <- x_s - decode(payload_s), the error-feedback step.
  // InvalidArgument as the CPU codec refuses a segment, for the first segment refused.
  virtual EncodedBatch encode_segments(const at::Tensor& a, const at::Tensor& b,
                                       std::span<const std::int64_t> sizes, bool write) const = 0;

  at::Tensor encode_impl(const at::Tensor& g, const StepContext& /*ctx*/) const final {
    const std::int64_t n[] = {g.numel()};
    return encode_segments(g, {}, n, /*write=*/false).payloads;
  }
  at::Tensor encode_with_residual_impl(const at::Tensor& g, const at::Tensor& e,
                                       const StepContext& /*ctx*/) const final {
    const std::int64_t n[] = {e.numel()};
    return encode_segments(e, g, n, /*write=*/true).payloads;
  }
  at::Tensor encode_feedback_impl(const at::Tensor& p, const StepContext& /*ctx*/) const final {
    const std::int64_t n[] = {p.numel()};
    return encode_segments(p, {}, n, /*write=*/true).payloads;
  }
  EncodedBatch encode_batch_impl(const at::Tensor& flat, std::span<const std::int64_t> sizes,
                                 std::span<const StepContext> /*ctxs*/, bool feedback) const final {
    return encode_segments(flat, {}, sizes, feedback);
  }
  EncodedBatch encode_batch_with_residual_impl(const at::Tensor& g, const at::Tensor& e,
                                               std::span<const std::int64_t> sizes,
                                               std::span<const StepContext> /*ctxs*/) const final {
    return encode_segments(e, g, sizes, /*write=*/true);
  }
};

}  // namespace gradcomp::device
