#include "gradcomp/finite.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

namespace gradcomp {

std::size_t find_non_finite(std::span<const float> x) {
  // NaN and infinity are the values whose exponent bits are all ones. An integer max
  // over them vectorises; a float test with an early exit would not.
  constexpr std::uint32_t kExponent = 0x7F800000u;
  std::uint32_t widest = 0;
  for (const float v : x) widest = std::max(widest, std::bit_cast<std::uint32_t>(v) & kExponent);
  if (widest != kExponent) return x.size();
  std::size_t i = 0;
  while (i < x.size() && std::isfinite(x[i])) ++i;
  return i;
}

}  // namespace gradcomp
