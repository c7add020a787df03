// The fused CUDA kernels (src/device/cuda/kernels.h) as the device codecs call them: on
// ATen tensors, on the tensors' device and its current stream. A codec asks usable(t) and
// runs its ATen composition where the answer is no: the CPU (CI), a build without the
// kernels (torch without CUDA, -DGRADCOMP_CUDA_KERNELS=OFF), or the kernels switched off
// (set_cuda_kernels(false), or GRADCOMP_DEVICE_KERNELS=0 in the environment: the ATen path
// on the GPU, which the GPU tests compare the kernels against).
//
// Tensors are contiguous 1-D; float32 ones `x` (with `b` undefined or of x's size: the
// values x + b), uint8 payload slices, int32 / int64 flags and counts. Each call throws
// InvalidArgument with the CUDA error's text if a launch fails.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace gradcomp::device::fused {

// cuda_kernels_enabled() (gradcomp/device/codec.h) and t is a CUDA tensor.
bool usable(const at::Tensor& t);

// cuda::encode_sign_bits with x = a (+ b); out undefined: no residual update.
// bytes: a fresh payload (whole 32-bit words, word-aligned).
void encode_sign_bits(const at::Tensor& a, const at::Tensor& b, float tau, bool at_least,
                      const at::Tensor& out, float if_set, float if_clear, const at::Tensor& bytes);
void add_sign_bits(const at::Tensor& bytes, float one, float zero, const at::Tensor& out);

// non_finite: a one-element int32 device flag (zeroed) set if any x is inf or NaN, or undefined.
void encode_codes2(const at::Tensor& a, const at::Tensor& b, float tau, const at::Tensor& out,
                   float neg_tau, const at::Tensor& codes, const at::Tensor& non_finite);
// The flags [padding, code 01, nonzero] of a received payload, as an int32 device tensor.
at::Tensor check_codes2(const at::Tensor& codes, std::int64_t n);
void add_codes2(const at::Tensor& codes, const float (&lut)[4], const at::Tensor& out);

// cuda::encode_halves into halves (kHalf or kBFloat16, x's size); returns the one-element
// int32 device flag, 1 if any x is non-finite.
at::Tensor encode_halves(const at::Tensor& a, const at::Tensor& b, float max_finite,
                         const at::Tensor& out, const at::Tensor& halves);

// The candidates {i : |x_i|'s pattern >= thr} (thr: a one-element int32 device tensor),
// ascending, as int64: from the kernel's slots, sorted, when they fit `cap`; else from a
// second pass over x (written to out, or a itself). Syncs once (the count). out: where
// x = a + b is written (out may be a), undefined for none.
at::Tensor select_at_least(const at::Tensor& a, const at::Tensor& b, const at::Tensor& thr,
                           const at::Tensor& out, std::int64_t cap);
// cuda::sample_line_starts on `like`'s device: int64 [lines].
at::Tensor sample_line_starts(std::uint64_t key, std::int64_t lines, std::int64_t lines_total,
                              std::int64_t line, const at::Tensor& like);
// out = a + b (out may be a); returns a one-element int32 device flag, 1 if any sum is
// non-finite. out undefined: the check alone (b undefined: of a).
at::Tensor accumulate(const at::Tensor& a, const at::Tensor& b, const at::Tensor& out);

}  // namespace gradcomp::device::fused
