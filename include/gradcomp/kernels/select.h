// Selection kernels for the sparsifying codecs (top-k, gradient dropping, masking) and,
// later, DGC and count-sketch heavy-hitter extraction.
//
// All kernels rank elements by |x| through the IEEE bit pattern of |x|: for non-negative
// floats the uint32 pattern orders exactly like the float (and +inf < NaN patterns sit
// above every finite value), so selection is integer radix work with no float compares.
// Non-finite inputs (|x| pattern >= 0x7F800000) are rejected with InvalidArgument
// "<op>: non-finite value at index i" naming the FIRST such index.
//
// Output indices are always strictly ascending. Ties at the threshold are broken by lower
// index (docs/algorithms/sparsification.md), so the result is a pure function of the input.
//
// Sizes: n < 2^32 (indices are uint32, as on the wire).
//
// Scratch: the kernels use detail::scratch slots 1, 2 and 3 internally. Their output
// span may live in slot 0 (or anywhere else the caller owns).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "gradcomp/rng.h"

namespace gradcomp::detail {
struct Pending;  // src/core/detail/pending.h: fused error feedback, private to the core
}  // namespace gradcomp::detail

namespace gradcomp::kernels {

inline constexpr std::uint32_t kNonFiniteBits = 0x7F800000u;

// |v| as its bit pattern (ordered like |v| for every float, NaNs above +inf).
inline std::uint32_t abs_bits(float v) { return std::bit_cast<std::uint32_t>(v) & 0x7FFFFFFFu; }

// ceil(fraction * n) for fraction in (0, 1], robust to representation error: 0.07 * 100
// is 7.000000000000001 in double and must give 7, not 8. A product within a relative
// 1e-12 above an integer counts as that integer (decimal fractions parsed from a spec
// carry ~1e-16 relative error). Clamped to [1, n] for n >= 1; 0 for n == 0.
std::size_t count_for_fraction(double fraction, std::size_t n);

// Exact top-k of |x|: writes the min(k, n) indices of the largest |x| (ties: lower index
// first) in ascending order to out (out.size() >= min(k, n)); returns min(k, n).
// O(n): a histogram pass over the top 10 bits of |x|, a pass gathering the bucket that
// holds the k-th largest, radix refinement of that (small) bucket, then a merge.
// With a pending (detail/pending.h), x is formed inside the histogram pass: two passes
// over x in all, the first of which also forms it.
std::size_t select_topk_exact(std::span<const float> x, std::size_t k, std::span<std::uint32_t> out,
                              std::string_view op, const detail::Pending* pending = nullptr);

// Exact top-k among a subset: `list` holds strictly ascending indices into x whose
// values are finite. Keeps the top min(k, list.size()) of them (ties: lower index) in
// place, still ascending, and returns how many were kept.
std::size_t select_topk_among(std::span<const float> x, std::span<std::uint32_t> list,
                              std::size_t k);

// The bit pattern of the k-th largest |x| (1 <= k <= n). Throws on non-finite input.
std::uint32_t kth_largest_abs_bits(std::span<const float> x, std::size_t k, std::string_view op);

// Indices i with abs_bits(x[i]) >= thr_bits, ascending, into out (out.size() >= the
// number selected; n always suffices); returns the count. thr_bits <= kNonFiniteBits
// (so that every non-finite value is seen and rejected).
std::size_t select_at_least(std::span<const float> x, std::uint32_t thr_bits,
                            std::span<std::uint32_t> out, std::string_view op);

// Largest count select_topk_sampled may return for k: max(k, floor(1.3 k)).
constexpr std::size_t sampled_max_count(std::size_t k) {
  const std::size_t hi = k / 10 * 13 + (k % 10) * 13 / 10;  // floor(13k/10) without overflow
  return hi > k ? hi : k;
}

// DGC's sampled top-k (docs/algorithms/sparsification.md "Sampled threshold"), density = k / n:
//   sample ~`sample` of |x| (at least ceil(2 / density) values); thr = the smallest of
//   the top ceil(density * samples) samples; S = {i : |x_i| >= thr};
//   |S| > 1.3k: exact top-k among S (hierarchical re-selection);
//   |S| < 0.8k: thr *= 0.8 and select again (at most 10 times, then exact top-k);
//   else accept S.
// Returns between ceil(0.8k) and sampled_max_count(k) ascending indices (out.size() must
// hold sampled_max_count(k)), always a valid top set: every selected |x| >= every
// unselected one. When the sample would be (nearly) the whole tensor, the exact top-k is
// returned (sampling buys nothing there). Deterministic in (x, k, sample, rng).
// With a pending (detail/pending.h): the sample is peeked before x exists, and the first
// selection pass forms x block by block and selects in the same pass; the result is the
// same. When that first threshold is accepted (the common case), x is read once in all,
// besides the sample and the selected entries.
std::size_t select_topk_sampled(std::span<const float> x, std::size_t k, double sample,
                                const CounterRng& rng, std::span<std::uint32_t> out,
                                std::string_view op, const detail::Pending* pending = nullptr);

}  // namespace gradcomp::kernels
