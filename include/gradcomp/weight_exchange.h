// A gradient exchange in which someone else holds the weights and applies the optimizer
// (the asynchronous parameter server's worker): each step the worker hands over its
// gradient and gets the latest weights back, instead of getting the mean gradient back
// from Reducer::reduce() and stepping its own optimizer. A Reducer that works this way
// also implements this interface; the trainer asks for it once, when it builds the
// reducer (dynamic_cast), and skips its own optimizer step when it is there.
//
// Torch-free, like gradcomp/reducer.h: gradients and weights are flat fp32 spans the
// caller owns.
#pragma once

#include <span>

#include "gradcomp/reducer.h"
#include "gradcomp/step_context.h"

namespace gradcomp {

class WeightExchange {
 public:
  virtual ~WeightExchange() = default;

  // Sends this worker's gradient (the buckets, left as they are or consumed) and
  // overwrites `weights` (one span per bucket, the same layout and order) with the
  // latest weights. Throws CommError when a peer fails or an operation times out.
  virtual void exchange_weights(std::span<const BucketRef> grads,
                                std::span<const std::span<float>> weights,
                                const StepContext& ctx) = 0;
};

}  // namespace gradcomp
