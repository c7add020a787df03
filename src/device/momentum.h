// The momentum step the device memories share (efm in allgather.cc, DGC in dgc.cc).
#pragma once

#include <ATen/ATen.h>

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

}  // namespace gradcomp::device
