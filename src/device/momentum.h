// The momentum step the device memories share (efm in allgather.cc, DGC in dgc.cc).
#pragma once

#include <ATen/ATen.h>

#include <string>

#include "gradcomp/error.h"
#include "gradcomp/step_context.h"

namespace gradcomp::device {

// u <- m*u + g in place, one fused multiply-add per entry: what the host memories compute
// (efm's ResidualUpdate::apply, which GCC contracts on FMA targets; DGC's explicit
// std::fma). ATen's add with alpha, add_out(u, g, u, m) = g + m*u, is one fused
// multiply-add on CUDA and in the CPU's vector loop; tests/device holds both reducers to
// the host memories bit for bit. m is a float, exact in double.
inline void add_momentum(const at::Tensor& u, const at::Tensor& g, double m) {
  at::Tensor out = u;
  at::add_out(out, g, u, m);
}

// efm's accumulation, as ResidualUpdate::apply writes it (codec.cc), rounding for rounding:
// u <- m*u + g (one fused multiply-add: add_momentum) ; e <- e + u   (Nesterov:
// u <- m*(u + g) ; e <- e + (u + g)). The device reducers' efm (allgather.cc, scatter.cc).
inline void accumulate_momentum(const at::Tensor& u, const at::Tensor& e, const at::Tensor& g,
                                const StepContext& ctx) {
  if (!(ctx.momentum >= 0.0f && ctx.momentum < 1.0f)) {
    throw InvalidArgument("efm compress: momentum " + std::to_string(ctx.momentum) +
                          " outside [0, 1)");
  }
  const double m = ctx.momentum;
  if (ctx.nesterov) {
    u.add_(g).mul_(m);
    e.add_(u.add(g));
  } else {
    add_momentum(u, g, m);
    e.add_(u);
  }
}

}  // namespace gradcomp::device
