// ATOMO's sampling probabilities (Wang et al., NeurIPS 2018; docs/algorithms/low-rank.md).
//
// Given atom weights lambda_1..lambda_N and a budget s > 0, the probabilities p that
// minimise the variance sum lambda_i^2 / p_i subject to sum p_i = s, 0 <= p_i <= 1 are
// found by water-filling over |lambda| in descending order (ties: lower index first):
//
//   i <- 1
//   while i <= N:
//     if s*|l_i| <= sum_{j>=i} |l_j|:  p_j <- s*|l_j| / sum_{l>=i} |l_l| for j >= i; stop
//     else p_i <- 1; s <- s - 1; i <- i + 1
//
// The result is p_i = 1 for a prefix of the order (the "saturated" atoms) and
// p_j = s' * |l_j| / T for the rest, s' the budget left and T the rest's magnitude sum.
// Properties: sum p = min(s, number of nonzero atoms); 0 <= p <= 1; p = 0 exactly for
// lambda = 0 (zero atoms never saturate: saturation needs s*|l| > T >= |l| > 0); equal
// magnitudes saturate together.
//
// At most ceil(s) - 1 atoms saturate (saturating atom i needs s - (i-1) > 1), so only
// the K = min(N, ceil(s)) largest magnitudes take part in the loop: atomo_cut finds them
// in O(N) and never sorts the rest, which matters for entrywise atoms (N = n).
//
// Numerics (double throughout; input floats are exact in double): the tail sums the loop
// compares against are T_i = R + sum_{j=i..K} |l_(j)|, accumulated from the smallest of
// the K upwards, R being the sum of the other N - K magnitudes taken in index order. All
// terms are non-negative, so no cancellation. A non-saturated atom's p is
// min(1, (s' * |l|) / T) (the min only guards rounding; s'*|l_(i)| <= T_i was checked
// with the same rounded product, so p <= 1 already holds).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "gradcomp/rng.h"

namespace gradcomp::detail {

// The outcome of the loop above, enough to evaluate any atom's p in O(1).
struct AtomoCut {
  // Indices of the atoms with p = 1, ascending (a view into detail::scratch slot 3 for
  // atomo_cut: valid until that slot is used again on this thread).
  std::span<const std::uint32_t> saturated;
  double budget_left = 0.0;  // s' = s - saturated.size()
  double tail_sum = 0.0;     // T, the magnitude sum of the non-saturated atoms (0: all zero)

  // p of an atom that is not saturated, from its magnitude |lambda|.
  double unsaturated_p(double magnitude) const {
    return tail_sum > 0.0 ? std::min(1.0, budget_left * magnitude / tail_sum) : 0.0;
  }
};

// Runs the water-filling loop over |lambda| (non-finite lambda are the caller's to
// reject first). s > 0. O(N) time plus O(K log K) with K = min(N, ceil(s)).
// Scratch: slots 2 and 3 (the returned `saturated` lives in slot 3).
AtomoCut atomo_cut(std::span<const float> lambda, double s);

// p_i for every atom, from a cut computed for the same lambda.
void atomo_probabilities(std::span<const float> lambda, const AtomoCut& cut, std::span<double> p);

// The keep decision for atom i with probability p: a 64-bit uniform x whose high word is
// hi.bits(i) and low word lo.bits(i) (drawn only when the high word ties), kept iff
// x < p * 2^64, so P(keep) = ceil(p * 2^64) / 2^64. 24- or 32-bit uniforms are not
// enough here: their P(u < p) is off by up to 2^-32 absolute, i.e. relative 2^-32 / p,
// and the value sent is lambda / p, so an entrywise atom of p ~ 1e-9 would be biased by
// a factor. p >= 1 always keeps, p <= 0 (or NaN) never does.
inline bool atomo_keep(const CounterRng& hi, const CounterRng& lo, std::uint32_t i, double p) {
  if (p >= 1.0) return true;
  if (!(p > 0.0)) return false;
  const double scaled = p * 0x1.0p32;       // exact, < 2^32
  const double whole = std::floor(scaled);  // the high word's threshold
  const double h = hi.bits(i);
  if (h != whole) return h < whole;
  return static_cast<double>(lo.bits(i)) < (scaled - whole) * 0x1.0p32;  // both sides exact
}

// The textbook form, for tests: full sort by (|lambda| descending, index ascending),
// tail sums accumulated from the back of the sorted order, the loop of docs/algorithms/low-rank.md
// literally. Agrees with atomo_cut + atomo_probabilities up to the summation order of T (relative
// differences of a few ulps).
std::vector<double> atomo_probabilities_reference(std::span<const float> lambda, double s);

}  // namespace gradcomp::detail
