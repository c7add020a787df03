// A Memory is the stateful side of compression, one per bucket: it decorates a
// (stateless) codec the way BytePS's compressor decorators do. Error feedback keeps
// the residual of earlier steps; DGC's momentum correction keeps velocities. The
// 2-bit codec's "residual" is error feedback's memory: one mechanism, not two.
#pragma once

#include <algorithm>
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "gradcomp/codec.h"
#include "gradcomp/step_context.h"

namespace gradcomp {

// One named piece of a Memory's state, for checkpoints and `gradcomp codec --residual`.
struct StateBuffer {
  std::string name;
  std::span<float> data;
};

class Memory {
 public:
  virtual ~Memory() = default;

  virtual const Codec& codec() const = 0;
  // The spec this memory was built from, e.g. "ef(topk:ratio=0.01,...)".
  virtual std::string spec() const = 0;
  // Elements of the bucket it serves.
  virtual std::size_t size() const = 0;

  // Compresses one step's gradient for this bucket into out (which holds at least
  // max_encoded_bytes()), updating the state. Returns the message size.
  virtual std::size_t compress(std::span<const float> grad, const StepContext& ctx,
                               std::span<std::byte> out) = 0;

  // The state, in a fixed order (empty for stateless memories). Writable so that
  // checkpoints can restore it.
  virtual std::vector<StateBuffer> state() = 0;

  // True for memories that apply momentum themselves (DGC): see
  // Reducer::momentum_in_memory().
  virtual bool carries_momentum() const { return false; }

  std::size_t max_encoded_bytes() const { return codec().max_encoded_bytes(size()); }

  // The dense fallback: a reducer that gathers messages sends a bucket as part of its
  // dense fp32 allreduce instead, for one step, when the message would cost more bytes
  // on the wire than that allreduce (DGC's warm-up densities, or any codec at a world
  // size where (W-1) messages outweigh 2(W-1)/W of the gradient; docs/cost-model.md).
  //
  // The largest message compress() can write at this step (at most max_encoded_bytes();
  // the same on every rank, so that every rank takes the same decision).
  virtual std::size_t step_max_encoded_bytes(const StepContext& /*ctx*/) const {
    return max_encoded_bytes();
  }
  // What the dense fallback weighs: the codec's planned size (Codec::
  // planned_encoded_bytes: its expected message where the size is random), capped by
  // this step's bound. Also the same on every rank.
  std::size_t step_planned_encoded_bytes(const StepContext& ctx) const {
    return std::min(step_max_encoded_bytes(ctx), codec().planned_encoded_bytes(size(), ctx));
  }
  // The step without compression: the state is updated as if the codec had selected and
  // sent every element exactly, and `out` receives what would have been sent (error
  // feedback: out = g + e, e = 0; momentum correction first updates its momentum; DGC
  // sends its whole accumulator and masks all of its momentum). grad and out may be
  // the same span.
  virtual void compress_dense(std::span<const float> grad, const StepContext& ctx,
                              std::span<float> out) = 0;
};

// No state: compress() is codec().encode().
std::unique_ptr<Memory> make_pass_through(std::shared_ptr<const Codec> codec, std::size_t n);

// Error feedback (docs/algorithms/error-feedback.md):
//   p = g + e; msg = encode(p); e = p - decode(msg).
std::unique_ptr<Memory> make_error_feedback(std::shared_ptr<const Codec> codec, std::size_t n);

// Error feedback with momentum correction ("efm(...)", docs/algorithms/error-feedback.md):
// DGC's momentum correction for any codec, without DGC's masking, warm-up or clipping.
// With m = ctx.momentum:
//   u <- m*u + g ;  p <- e + u ;  msg <- encode(p) ;  e <- p - decode(msg)
// (ctx.nesterov: u <- m*(u + g) ; p <- e + u + g, DGC's Nesterov form). The optimizer
// then applies the mean update without momentum of its own (carries_momentum()): the
// momentum lives in u, before compression, so what error feedback delays is the
// momentum's output, not the raw gradient the optimizer would otherwise amplify. With
// m = 0 it is error feedback exactly.
std::unique_ptr<Memory> make_momentum_error_feedback(std::shared_ptr<const Codec> codec,
                                                     std::size_t n);

}  // namespace gradcomp
