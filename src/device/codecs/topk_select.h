// What top-k's selection on the device decides before it touches x, shared by the one-tensor
// path (topk.cc) and the batched one (topk_batch.cc), so that both select exactly what the
// CPU's kernels::select_topk_sampled / select_topk_exact select.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>

#include "gradcomp/rng.h"

namespace gradcomp::device::topk_detail {

// +inf's bit pattern: a pattern at or above it is inf or NaN.
constexpr std::int64_t kNonFiniteBits = 0x7F800000;
// The largest pattern |x| can have (a NaN with every payload bit set).
constexpr std::int64_t kMaxBits = 0x7FFFFFFF;
// select.cc's sampled top-k: lines of 16 floats, at most 10 retries at 0.8 x thr.
constexpr std::int64_t kLine = 16;
constexpr int kMaxRetries = 10;
constexpr std::int64_t kTwo32 = std::int64_t{1} << 32;
// The fused CUDA selection's atomic slot counter contends as candidates get dense: on an
// H200 (docs/measurements/gpu.md, run 4) it beat ATen's nonzero at k = 0.1% of 100 M and lost
// at 1%, and on ResNet-50's many small tensors at 1%. It runs where k <= n / 512.
constexpr std::int64_t kFusedSelectMinSpacing = 512;

// How the min(k, n) of n values are found.
struct SelectPlan {
  enum class Kind {
    kEmpty,    // k = 0 (or n = 0): nothing selected, nothing checked
    kWhole,    // the exact top k of all of x (candidates: every entry)
    kStrided,  // exact: thr from every stride-th of the first `samples` entries; the top k
               // among {u >= thr} when it holds k, else kWhole
    kLines,    // sampled: thr from `lines` lines of kLine drawn out of lines_total, then
               // DGC's corrections (re-selection above 1.3k, 0.8 x thr below 0.8k)
  };
  Kind kind = Kind::kEmpty;
  std::int64_t k = 0;        // min(k, n)
  std::int64_t samples = 0;  // values sampled (kStrided, kLines)
  std::int64_t stride = 0;   // kStrided
  std::int64_t lines = 0;    // kLines
  std::int64_t lines_total = 0;
  std::int64_t rank = 0;  // thr = the rank-th largest sampled pattern
};

// An exact selection's strided sample of s of n values (plan's samples, stride and rank
// set: thr = the rank-th largest, ~1.5k entries at or above it), or false where it would
// not narrow the candidates (k = n, or s too small). Any threshold with at least k entries
// at or above it gives the exact top k from those entries, so the batch (topk_batch.cc)
// picks its own s, smaller, and filters the small tensors the one-tensor path sorts whole.
bool exact_sample(std::int64_t n, std::int64_t k, std::int64_t s, SelectPlan& plan);

// Whether topk's select parameter ("sampled", "exact", "auto") samples for n values.
bool sampled_for(const std::string& select, std::int64_t n);

// The plan for a top-k of k among n values, sampled (select=sampled, or auto from 2^18)
// with `sample` the fraction sampled, or exact.
SelectPlan plan_selection(std::int64_t n, std::int64_t k, bool sampled, double sample);

// |x|'s bit patterns as int32 (abs clears the sign bit on CPU and CUDA, NaNs included).
inline at::Tensor abs_bits(const at::Tensor& x) { return x.abs().view(at::kInt); }

// The fp16 values a values=fp16 payload sends: float_to_fp16_ref's rounding (saturate at
// +-65504, round to nearest even: ATen's cast).
inline at::Tensor sent_halves(const at::Tensor& vals) {
  return vals.clamp(-65504.0, 65504.0).to(at::kHalf);
}

// select_sampled's line starts (element offsets, multiples of kLine) for a kLines plan:
// one uniform draw in each of plan.lines equal strata of the lines, from rng, into out.
void draw_line_starts(const CounterRng& rng, const SelectPlan& plan, std::int64_t* out);

// Whether the fused CUDA selection (src/device/cuda/select.cu) runs for a top-k of k of x.
bool fused_selection(const at::Tensor& x, std::int64_t k);

}  // namespace gradcomp::device::topk_detail
