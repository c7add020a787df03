// Finding NaN and infinity in a gradient before it reaches a codec or another rank: a
// dense sum would silently turn every replica into NaN, and only the selecting codecs
// would notice, on the one rank that has it.
#pragma once

#include <cstddef>
#include <span>

namespace gradcomp {

// The index of the first NaN or infinity in x, or x.size() when every value is finite.
// One vectorised read when x is finite (a max over the exponent bits), the exact position
// found by a second, scalar pass only when it is not.
std::size_t find_non_finite(std::span<const float> x);

}  // namespace gradcomp
