// find_non_finite against the obvious scalar loop: every size from 0 to 67 (vector tails),
// NaN, +inf and -inf at every position, and the largest finite values and subnormals,
// which share bits with infinity's exponent pattern only partly and must not be flagged.
#include "gradcomp/finite.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace gradcomp {
namespace {

std::size_t scalar_reference(const std::vector<float>& x) {
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (!std::isfinite(x[i])) return i;
  }
  return x.size();
}

TEST(FindNonFinite, FiniteValuesOfEveryKindAreFinite) {
  const float edge[] = {0.0f,
                        -0.0f,
                        std::numeric_limits<float>::max(),
                        -std::numeric_limits<float>::max(),
                        std::numeric_limits<float>::min(),
                        std::numeric_limits<float>::denorm_min(),
                        1.0f,
                        -3.5e-20f};
  for (std::size_t n = 0; n <= 67; ++n) {
    std::vector<float> x(n);
    for (std::size_t i = 0; i < n; ++i) x[i] = edge[i % std::size(edge)];
    EXPECT_EQ(find_non_finite(x), n) << "n " << n;
  }
}

TEST(FindNonFinite, FindsTheFirstNanOrInfinityAtEveryPosition) {
  const float bad[] = {std::numeric_limits<float>::quiet_NaN(),
                       std::numeric_limits<float>::infinity(),
                       -std::numeric_limits<float>::infinity()};
  for (std::size_t n : {1u, 2u, 7u, 16u, 31u, 64u, 67u}) {
    for (std::size_t at = 0; at < n; ++at) {
      for (const float v : bad) {
        std::vector<float> x(n, 0.25f);
        x[at] = v;
        if (at + 2 < n) x[at + 2] = bad[0];  // a later one must not win
        EXPECT_EQ(find_non_finite(x), scalar_reference(x)) << "n " << n << " at " << at;
        EXPECT_EQ(find_non_finite(x), at);
      }
    }
  }
}

}  // namespace
}  // namespace gradcomp
