// The stratified sample of |x| (abs_sample.h).
#include "detail/abs_sample.h"

#include <cassert>
#include <cmath>
#include <cstdint>

#include "detail/pending.h"
#include "detail/reductions.h"
#include "gradcomp/rng.h"

namespace gradcomp::detail {

std::size_t abs_sample_start(std::size_t n, std::size_t j) {
  assert(n >= kAbsSampleMinN && j < kAbsStrata);
  const std::size_t stratum = n / kAbsStrata;
  const std::size_t runs = stratum / kAbsRun;  // >= 16 since n >= kAbsSampleMinN
  const std::uint64_t h = splitmix64(static_cast<std::uint64_t>(n) * 0x9E3779B97F4A7C15ull + j);
  return j * stratum + kAbsRun * static_cast<std::size_t>(h % runs);
}

double sampled_abs_sum(const float* x, std::size_t n, const Pending* pending) {
  static_assert(kAbsRun % 16 == 0, "a run fills the 16 lanes evenly");
  double lanes[16] = {};
  float run[kAbsRun];
  for (std::size_t j = 0; j < kAbsStrata; ++j) {
    const std::size_t b = abs_sample_start(n, j);
    const float* v = x + b;
    if (pending != nullptr) {
      pending->peek(b, b + kAbsRun, run);
      v = run;
    }
    for (std::size_t l = 0; l < kAbsRun; ++l) {
      lanes[l % 16] += static_cast<double>(std::fabs(v[l]));
    }
  }
  return combine16(lanes);  // abs_sum's combination of the lanes
}

}  // namespace gradcomp::detail
