#include "detail/atomo_probabilities.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "detail/scratch.h"
#include "gradcomp/kernels/select.h"

namespace gradcomp::detail {

using namespace kernels;  // the selection and half-float kernels

namespace {

// K = min(N, ceil(s)): no atom beyond the K-th largest can saturate, and the loop stops
// at the latest there (see the header). s may exceed 2^32 (then K = N).
std::size_t loop_length(std::size_t n, double s) {
  const double c = std::ceil(s);
  return c >= static_cast<double>(n) ? n : static_cast<std::size_t>(c);
}

// Orders atoms by |lambda| descending, then index ascending: a strict total order.
struct ByMagnitude {
  const float* x;
  bool operator()(std::uint32_t a, std::uint32_t b) const {
    const std::uint32_t ba = abs_bits(x[a]), bb = abs_bits(x[b]);
    return ba != bb ? ba > bb : a < b;
  }
};

double magnitude(float v) { return std::fabs(static_cast<double>(v)); }

}  // namespace

AtomoCut atomo_cut(std::span<const float> lambda, double s) {
  const std::size_t n = lambda.size();
  const std::size_t k = loop_length(n, s);
  const float* x = lambda.data();
  AtomoCut cut;
  if (n == 0) return cut;

  // |x| patterns order like |x|: the K-th largest pattern splits the atoms into
  // certainly-in (above it), certainly-out (below it) and ties, of which the lowest
  // indices are in. (Selected before taking slot 3: the selection uses slots 1-3.)
  const std::uint32_t thr =
      k == 0 || k == n ? 0 : kth_largest_abs_bits(lambda, k, "atomo probabilities");

  // The K largest atoms, gathered in index order into slot 3, and R = the magnitude sum
  // of all the others (index order, one accumulator).
  auto top = scratch<std::uint32_t>(3, k, n);
  double rest = 0.0;
  if (k == n) {
    std::iota(top.begin(), top.end(), 0u);
  } else if (k == 0) {
    for (std::size_t j = 0; j < n; ++j) rest += magnitude(x[j]);
  } else {
    std::size_t above = 0;
    for (std::size_t j = 0; j < n; ++j) above += abs_bits(x[j]) > thr;
    std::size_t ties_in = k - above;
    std::size_t t = 0;
    for (std::size_t j = 0; j < n; ++j) {
      const std::uint32_t b = abs_bits(x[j]);
      if (b > thr || (b == thr && ties_in > 0)) {
        if (b == thr) --ties_in;
        top[t++] = static_cast<std::uint32_t>(j);
      } else {
        rest += magnitude(x[j]);
      }
    }
  }

  // Into loop order, then the tail sums T_i = R + sum_{j >= i} |l_(j)| (slot 2).
  std::sort(top.begin(), top.end(), ByMagnitude{x});
  auto tail = scratch<double>(2, k + 1);
  tail[k] = rest;
  for (std::size_t i = k; i-- > 0;) tail[i] = tail[i + 1] + magnitude(x[top[i]]);

  // The loop of docs/algorithms/low-rank.md over the K largest.
  double budget = s;
  std::size_t i = 0;
  for (; i < k; ++i) {
    if (budget * magnitude(x[top[i]]) <= tail[i]) break;
    budget -= 1.0;  // p = 1
  }
  cut.budget_left = budget;
  // i == k happens only when every atom saturated (k == n): nothing is left. (Were k < n,
  // the loop would have stopped by i = k - 1; the guard keeps T meaningful regardless.)
  cut.tail_sum = i < k ? tail[i] : (k == n ? 0.0 : rest);
  std::sort(top.begin(), top.begin() + static_cast<std::ptrdiff_t>(i));
  cut.saturated = top.first(i);
  return cut;
}

void atomo_probabilities(std::span<const float> lambda, const AtomoCut& cut, std::span<double> p) {
  std::size_t next = 0;  // position in cut.saturated (ascending indices)
  for (std::size_t j = 0; j < lambda.size(); ++j) {
    if (next < cut.saturated.size() && cut.saturated[next] == j) {
      p[j] = 1.0;
      ++next;
    } else {
      p[j] = cut.unsaturated_p(magnitude(lambda[j]));
    }
  }
}

std::vector<double> atomo_probabilities_reference(std::span<const float> lambda, double s) {
  const std::size_t n = lambda.size();
  std::vector<std::uint32_t> order(n);
  std::iota(order.begin(), order.end(), 0u);
  std::sort(order.begin(), order.end(), ByMagnitude{lambda.data()});
  std::vector<double> a(n), tail(n + 1, 0.0);
  for (std::size_t i = 0; i < n; ++i) a[i] = magnitude(lambda[order[i]]);
  for (std::size_t i = n; i-- > 0;) tail[i] = tail[i + 1] + a[i];

  std::vector<double> p(n, 0.0);
  std::size_t i = 0;
  while (i < n) {
    if (s * a[i] <= tail[i]) {
      for (std::size_t j = i; j < n; ++j) {
        p[order[j]] = tail[i] > 0.0 ? std::min(1.0, s * a[j] / tail[i]) : 0.0;
      }
      break;
    }
    p[order[i]] = 1.0;
    s -= 1.0;
    ++i;
  }
  return p;
}

}  // namespace gradcomp::detail
