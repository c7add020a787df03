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
  std::uint32_t world = 1;   // workers taking part (DGC scales its clipping by world^-1/2)
  // Steps in one epoch; 0 when unknown (schedules counted in epochs, such as DGC's
  // density warm-up, are then off).
  std::uint64_t steps_per_epoch = 0;
  // Steps in the whole run (the step the run ends at, e.g. epochs * steps_per_epoch);
  // 0 when unknown. Schedules bounded by the run's length read it (DGC caps its density
  // warm-up at a share of the run); 0 keeps them as they are without it.
  std::uint64_t total_steps = 0;
  // The learning rate this step's update will be applied with. Methods that work in
  // parameter units (FetchSGD's error, EF-signSGD's p = lr*g + e) scale by it.
  float lr = 1.0f;
  // The optimizer's momentum m and Nesterov flag. Memories that carry momentum for the
  // optimizer (efm) apply it; everything else ignores them.
  float momentum = 0.0f;
  bool nesterov = false;
  // The bucket's matrix view: rows of its layer (the first dimension; a conv kernel
  // (o,i,k,k) has o rows of i*k*k). 0 for a flat or fused bucket. Shape-aware codecs
  // (ATOMO's spectral atoms) read it; the rest ignore it.
  std::uint32_t rows = 0;
};

}  // namespace gradcomp
