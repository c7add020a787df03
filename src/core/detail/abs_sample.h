// The mean |x| of a large tensor from a fixed stratified sample: 2bit's adaptive threshold
// (tau = scale * mean |p|) on messages too large for a pass of their own. Summing all of p
// first costs a full read of g and e before the packing pass can start (two passes, ~53%
// of memcpy's throughput); the sample costs ~1/400 of that at 25 M values, so the packing
// pass runs alone at the one-pass speed of a fixed threshold.
#pragma once

#include <cstddef>

namespace gradcomp::detail {

struct Pending;  // detail/pending.h

// The sample: x is cut into kAbsStrata strata of s = floor(n / kAbsStrata) values (the
// last n mod kAbsStrata values belong to none); stratum j contributes the kAbsRun
// consecutive values starting at
//   j * s + kAbsRun * (splitmix64(n * 0x9E3779B97F4A7C15 + j) mod floor(s / kAbsRun)).
// A fixed function of n: every rank, run and path draws the same positions, and strata
// keep a layer's structure (zero border pixels, dead units) from biasing the mean.
inline constexpr std::size_t kAbsStrata = 4096;
inline constexpr std::size_t kAbsRun = 16;  // one 64-byte line of floats
inline constexpr std::size_t kAbsSampleCount = kAbsStrata * kAbsRun;
// Below this many values the mean is exact (abs_sum): the sample would be more than 1/16
// of x, and x is small enough that its second pass stays in cache.
inline constexpr std::size_t kAbsSampleMinN = std::size_t{1} << 20;

// Start of stratum j's run (n >= kAbsSampleMinN, j < kAbsStrata).
std::size_t abs_sample_start(std::size_t n, std::size_t j);

// sum |x_i| over the sample (kAbsSampleCount values) in double: strata in order, each run
// into 16 lanes, the lanes combined as abs_sum combines them. n >= kAbsSampleMinN. With a
// pending (detail/pending.h) the runs are peeked: nothing is filled. A non-finite sample
// value gives a non-finite sum.
double sampled_abs_sum(const float* x, std::size_t n, const Pending* pending = nullptr);

}  // namespace gradcomp::detail
