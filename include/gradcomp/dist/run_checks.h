// What a compressor spec will do in this run, in words: its effective schedule (DGC's
// density warm-up, bounded by the run's length) for the run's header, and one-line
// warnings when the spec's settings cannot do what was asked in this run. Torch-free
// (library gradcomp_scheme_descriptions): `gradcomp train` prints them (job.cc),
// GradientExchange returns them (take_warnings), the Python package emits them with
// warnings.warn.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace gradcomp::dist {

struct RunShape {
  std::uint64_t steps_per_epoch = 0;  // 0: unknown
  std::uint64_t total_steps = 0;      // steps of the whole run; 0: unknown
  // Elements of every bucket that is exchanged compressed (the layout's compressible
  // buckets), for the sketch geometry check.
  std::vector<std::size_t> compressed_sizes;
};

// One line for the run's header, empty when the spec has no schedule. dgc:
//   "dgc warm-up: 58 steps of 468 (4 epochs capped at 1/8 of the run), 4 stages of
//    14.6 steps at density 0.25, 0.0625, 0.015625, 0.00390625, then 0.001"
// powersgd with warmup_steps > 0:
//   "powersgd warm-up: 100 dense steps of 702, then rank 4"
// The spec must be valid (InvalidArgument otherwise).
std::string describe_schedule(std::string_view spec, const RunShape& run);

// The start-of-run warnings, one line each:
// - dgc: a warm-up longer than 1/8 of the run (capped: says from what to what), or a
//   warm-up that is off because the steps per epoch are unknown;
// - sketched-sgd / fetchsgd: a sketch with fewer columns than the candidates it must rank
//   (sketched-sgd: p2*k, fetchsgd: k) in some bucket: every row then has collisions
//   among them whatever the hashes;
// - ef(sketch) / efm(sketch): error feedback on count-sketch estimates can diverge;
// - powersgd: a warmup_steps that covers the whole run (nothing is ever compressed).
std::vector<std::string> start_warnings(std::string_view spec, const RunShape& run);

// The runtime check of a fixed 2-bit threshold (2bit:threshold=T, T > 0, bare or inside
// ef/efm/noef): at step kThresholdCheckStep (after the first steps, whose gradients are
// the largest) the compressed buckets' gradients are compared with T.
inline constexpr std::uint64_t kThresholdCheckStep = 10;
// "Far above": T > this many times the largest bucket's mean |g|. An entry of typical
// size then waits that many steps in the residual before it is sent once.
inline constexpr double kThresholdFarAbove = 10.0;

// T of the spec's fixed 2-bit threshold; 0 when the spec has none (adaptive 2bit, other
// codecs).
double fixed_2bit_threshold(std::string_view spec);

// A warning when T > kThresholdFarAbove * max over grads of mean |g| (empty spans and
// non-finite means ignored); nullopt otherwise or when the spec has no fixed threshold.
std::optional<std::string> threshold_warning(std::string_view spec,
                                             std::span<const std::span<const float>> grads,
                                             std::uint64_t step);

}  // namespace gradcomp::dist
