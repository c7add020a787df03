// Counter-based random numbers: the value for counter i is a pure function of
// (key, i). Stochastic codecs draw element i's randomness from counter i, so a
// message repeats exactly for the same (seed, step, rank, bucket) whatever the
// thread count or the order elements are visited in.
//
// The generator is a keyed 32-bit integer hash (two rounds of the "lowbias32"
// xorshift-multiply mixer with the key folded in between). It is not
// cryptographic; it is statistically good enough for stochastic rounding and
// sampling, and cheap enough to vectorise (32-bit multiplies) in streaming codecs.
#pragma once

#include <cstdint>

#include "gradcomp/step_context.h"

namespace gradcomp {

// Whether a codec's randomness differs per rank (stochastic rounding) or is shared
// by all ranks (random-k's indices, count-sketch hashes).
enum class RngScope : std::uint8_t { kPerRank, kShared };

namespace detail {

constexpr std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

constexpr std::uint32_t lowbias32(std::uint32_t x) {
  x ^= x >> 16;
  x *= 0x7FEB352Du;
  x ^= x >> 15;
  x *= 0x846CA68Bu;
  x ^= x >> 16;
  return x;
}

}  // namespace detail

class CounterRng {
 public:
  constexpr explicit CounterRng(std::uint64_t key)
      : k0_(static_cast<std::uint32_t>(key)), k1_(static_cast<std::uint32_t>(key >> 32)) {}

  // The generator for one (seed, step, [rank,] bucket); `stream` separates
  // independent uses inside one codec (e.g. sampling vs. rounding).
  static constexpr CounterRng for_step(const StepContext& ctx, RngScope scope,
                                       std::uint32_t stream = 0) {
    std::uint64_t k = detail::splitmix64(ctx.seed);
    k = detail::splitmix64(k ^ ctx.step);
    k = detail::splitmix64(k ^ (scope == RngScope::kPerRank ? std::uint64_t{ctx.rank} + 1 : 0));
    k = detail::splitmix64(k ^ (std::uint64_t{ctx.bucket} << 32 | stream));
    return CounterRng(k);
  }

  // 32 random bits for counter i (i < 2^32; gradients are indexed by uint32).
  constexpr std::uint32_t bits(std::uint32_t i) const {
    return detail::lowbias32(detail::lowbias32(i ^ k0_) + k1_);
  }

  // Uniform float in [0, 1) with 24 random bits (exactly representable).
  constexpr float uniform(std::uint32_t i) const {
    return static_cast<float>(bits(i) >> 8) * 0x1.0p-24f;
  }

  // Uniform integer in [0, bound) (Lemire's multiply-shift; bias < bound / 2^32).
  constexpr std::uint32_t below(std::uint32_t i, std::uint32_t bound) const {
    return static_cast<std::uint32_t>((std::uint64_t{bits(i)} * bound) >> 32);
  }

  constexpr std::uint64_t key() const { return std::uint64_t{k1_} << 32 | k0_; }

 private:
  std::uint32_t k0_;
  std::uint32_t k1_;
};

}  // namespace gradcomp
