// Everything an encode may depend on besides the gradient itself. Nothing in the
// training loop reads files or the environment: it arrives here.
#pragma once

#include <cstdint>

namespace gradcomp {

struct StepContext {
  std::uint64_t seed = 0;    // run seed, the same on every rank
  std::uint64_t step = 0;    // global step number
  std::uint32_t rank = 0;    // this worker's rank
  std::uint32_t bucket = 0;  // bucket (layer or fused group) id, the same on every rank
};

}  // namespace gradcomp
