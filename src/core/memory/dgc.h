// DGC (Deep Gradient Compression) as a named memory: its registration, the pieces the
// tests check on their own (the density warm-up schedule, the message codec spec), and
// the parameters and per-step rules the device path's DGC (src/device/dgc.cc) shares with
// the host memory, so that the scheme is written once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "gradcomp/codec.h"
#include "gradcomp/registry.h"
#include "gradcomp/step_context.h"

namespace gradcomp {

// Registers the "dgc" memory (docs/algorithms/sparsification.md). Called from
// register_builtin_codecs.
void register_dgc(CodecRegistry& registry);

namespace detail {

// The share of a run DGC's density warm-up may take at most: 1/8. The paper warms up 4
// of 164 epochs on CIFAR-10 (2.4%) and 1 of 90 on ImageNet (1.1%); its 4 epochs are the
// default (warmup_epochs=4) and apply unchanged to runs of 32 epochs or more. On a
// shorter run they would cover a large part of it or all of it (2 epochs: the whole run
// at densities 0.25 .. 0.0039, 1.6x instead of the 0.1% asked), so the warm-up is cut to
// 1/8 of the run: at least 7/8 of the steps run at the density asked, and each of the
// four stages still gets 1/32 of the run, more than the paper's whole warm-up share.
inline constexpr double kDgcWarmupMaxShare = 0.125;

// The warm-up's length in steps: warmup_epochs * steps_per_epoch, capped at
// kDgcWarmupMaxShare * total_steps when total_steps > 0 (0: the run's length is
// unknown, no cap). 0 when warmup_epochs == 0 or steps_per_epoch == 0 (unknown): off.
double dgc_warmup_steps(double warmup_epochs, std::uint64_t steps_per_epoch,
                        std::uint64_t total_steps);

// The exponential density warm-up of DGC (paper §3.4: sparsity 75%, 93.75%, 98.4375%,
// 99.6% over the first four epochs, then the target). With T = dgc_warmup_steps(...)
// steps, stage j = floor(4 * step / T) in 0..3 covers steps [j*T/4, (j+1)*T/4) and uses
// density max(target, 0.25 * 4^-j); from step T on (and whenever T == 0) the target.
double dgc_density(double target, double warmup_epochs, std::uint64_t step,
                   std::uint64_t steps_per_epoch, std::uint64_t total_steps = 0);

// The density of warm-up stage j (0..3) before the target's floor: 0.25 * 4^-j.
double dgc_stage_density(int stage);

// The largest density dgc_density can return for these parameters: the ratio of the
// topk codec its messages are validated against.
double dgc_max_density(double target, double warmup_epochs);

// A DGC memory's parameters (registered in dgc.cc) and the rules of one step that depend
// on nothing but them and the step.
struct DgcOptions {
  double density = 0.001;
  float momentum = 0.9f;
  bool nesterov = false;
  double clip = 0.0;
  double warmup_epochs = 4.0;
  bool exact = false;  // select=exact; else DGC's sampled threshold
  double sample = 0.01;
  bool masking = true;
  bool correction = true;
  bool lr_rescale = true;

  // From the validated parameters of a "dgc:..." spec (Method::memory_params()).
  static DgcOptions from(const Params& p);

  // This step's k for a bucket of n: ceil(density(step) * n) (0 for n = 0).
  std::size_t count(std::size_t n, const StepContext& ctx) const;
  // The largest message compress() writes at this step (Memory::step_max_encoded_bytes):
  // count(n, ctx) entries, up to 1.3x with the sampled selection, capped by the codec's
  // max_encoded_bytes(n).
  std::size_t step_max_encoded_bytes(const Codec& codec, std::size_t n,
                                     const StepContext& ctx) const;
  // Local clipping's factor for a gradient of L2 norm `norm`: min(1, clip * W^-1/2 /
  // norm) as a float; 1 when clipping is off, the norm is within the bound or not finite
  // (the selection then reports the non-finite value).
  float clip_scale(double norm, std::uint32_t world) const;
};

// ||g||_2 as clipping computes it: in double, four accumulators in a fixed order (no
// dependence on vector width or thread count; exact for small integer-valued g whatever
// the order).
double dgc_l2_norm(std::span<const float> g);

}  // namespace detail
}  // namespace gradcomp
