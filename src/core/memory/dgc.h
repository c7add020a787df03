// DGC (Deep Gradient Compression) as a named memory: its registration and the pieces
// the tests check on their own (the density warm-up schedule, the message codec spec).
#pragma once

#include <cstdint>
#include <string>

#include "gradcomp/registry.h"

namespace gradcomp {

// Registers the "dgc" memory (docs/algorithms/sparsification.md). Called from
// register_builtin_codecs.
void register_dgc(CodecRegistry& registry);

namespace detail {

// The exponential density warm-up of DGC (paper §3.4: sparsity 75%, 93.75%, 98.4375%,
// 99.6% over the first four epochs, then the target). With T = warmup_epochs *
// steps_per_epoch steps, stage j = floor(4 * step / T) in 0..3 covers steps
// [j*T/4, (j+1)*T/4) and uses density max(target, 0.25 * 4^-j); from step T on (and
// whenever warmup_epochs == 0 or steps_per_epoch == 0, i.e. unknown) the target.
double dgc_density(double target, double warmup_epochs, std::uint64_t step,
                   std::uint64_t steps_per_epoch);

// The largest density dgc_density can return for these parameters: the ratio of the
// topk codec its messages are validated against.
double dgc_max_density(double target, double warmup_epochs);

}  // namespace detail
}  // namespace gradcomp
