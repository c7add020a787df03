// Reductions over float gradients for the quantizers' scales (terngrad, 2bit, signsgd):
// scalar references and AVX2 / OpenMP fast paths (reductions.cc) that tests hold equal
// bit for bit, whatever the SIMD width or thread count.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gradcomp::detail {

struct Pending;  // detail/pending.h

// max_i of the bit pattern of |x_i| (sign cleared). Order-independent and exact; a result
// >= 0x7F800000 means some x_i is inf or NaN.
std::uint32_t abs_max_bits_ref(const float* x, std::size_t n);
std::uint32_t abs_max_bits(const float* x, std::size_t n);

// Deterministic double sums, the same whatever the SIMD width or thread count: x is cut
// into blocks of kSumBlock values; in a block, lane l (0..15) sums the values at offsets
// = l (mod 16) in order; the lanes combine as ((l0+l8)+(l4+l12)) etc. (see reductions.cc);
// blocks are added in order. The blocks' partial sums use scratch slot kSumScratchSlot.
inline constexpr std::size_t kSumBlock = std::size_t{1} << 16;
// The fixed combination of 16 lanes: ((l[k] + l[k+8]) + (l[k+4] + l[k+12])) for k < 4,
// then (s0 + s2) + (s1 + s3) — what a 4-vector-of-4-doubles reduction does.
double combine16(const double* l);
inline constexpr int kSumScratchSlot = 3;
double abs_sum_ref(const float* x, std::size_t n);  // sum |x_i|
// With a pending (detail/pending.h), x is formed block by block inside the sum's pass.
double abs_sum(const float* x, std::size_t n, const Pending* pending = nullptr);
struct Moments {
  double sum = 0;                  // sum x_i
  double sum_sq = 0;               // sum x_i^2 (each square is exact in double)
  std::uint32_t abs_max_bits = 0;  // abs_max_bits(x, n), in the same pass
};
Moments moments_ref(const float* x, std::size_t n);
Moments moments(const float* x, std::size_t n);

}  // namespace gradcomp::detail
