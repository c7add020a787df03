// topk on the device (src/core/codecs/topk.cc is the CPU codec; src/core/kernels/select.cc
// its selection; src/core/detail/sparse_message.cc the payload). Both selections give the
// CPU's indices exactly, because every step below is integer work on the bit patterns of
// |x| (u = abs_bits, ordered like |x|, NaNs above +inf), never a float reduction:
//
//   sampled (select=sampled, or auto from n = 2^18): the CPU's stratified sample of 16-float
//     lines, its positions drawn from the same CounterRng (on the GPU by a kernel where
//     there is one, else on the host) and gathered on the device; thr = the ks-th largest sampled u
//     (an order statistic: topk's minimum); S = nonzero(u >= thr); then DGC's corrections as the
//     CPU makes them: |S| > 1.3k: exact top-k among S; |S| < 0.8k: thr *= 0.8f (one float
//     multiply, as on the host) and again, at most 10 times, then exact top-k of x.
//     (The CPU's early exit when |S| > max(8k, 4096) switches to exact top-k of x, which
//     is exact top-k among S: S holds the top k. So the device skips that cap.)
//   exact: thr = an order statistic of a strided sample of u, chosen so that S = {u >=
//     thr} holds ~1.5k entries; exact top-k among S when |S| >= k (S then holds the top k:
//     the k-th largest is >= thr), the whole tensor otherwise (rare; also small n).
//   exact top-k among candidates: unique int64 keys u * 2^32 + (2^32 - 1 - index), so
//     at::topk has no ties to break and larger u, then lower index, wins: the CPU's rule.
//
// The selection and the payload are free functions (codecs.h: select_topk,
// sparse_fp32_payload): DGC's memory on the device (src/device/dgc.cc) runs them on its
// accumulator with its own k per step. What the selection decides before it reads x (the
// plan) is topk_select.h's, shared with the batches (topk_batch.cc: many tensors selected
// at once, as the device reducer encodes a step).
//
// Non-finite input: thr <= +inf's pattern, so S holds every non-finite entry; the first of
// them in S is the first in x, the index the CPU's InvalidArgument names.
//
// Host syncs per encode (common case): 2 (the candidates' count; the non-finite check of
// S). Each DGC retry adds one, the exact top-k of the whole tensor one more.
// Passes over the full tensor per encode, on CUDA where k <= n / 512: one fused kernel
// (src/device/cuda/select.cu) reads x (e and g with error feedback, writing e + g) and
// keeps the indices at or above thr. Otherwise: p = e + g, u = |x| (read x, write u),
// u >= thr (a bool mask), nonzero. The rest touches the sample and the <= 1.3k selected.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "codecs.h"
#include "device/fused_kernels.h"
#include "gradcomp/error.h"
#include "gradcomp/kernels/select.h"
#include "gradcomp/rng.h"
#include "topk_batch.h"
#include "topk_select.h"

namespace gradcomp::device {

namespace topk_detail {

namespace {
// topk.cc's select=auto switch to the sampled threshold.
constexpr std::int64_t kAutoSampledFrom = 262144;
// Exact mode samples only from here on: below it the exact top-k of all of x is cheap.
constexpr std::int64_t kExactSampleFrom = 131072;
}  // namespace

bool sampled_for(const std::string& select, std::int64_t n) {
  return select == "sampled" || (select == "auto" && n >= kAutoSampledFrom);
}

SelectPlan plan_selection(std::int64_t n, std::int64_t k, bool sampled, double sample) {
  SelectPlan p;
  p.k = std::min(k, n);
  if (p.k <= 0) return p;
  if (sampled && p.k < n) {
    // select_topk_sampled's sample: at least 2n/k values (so that ~2 land above thr), in
    // whole lines; k * samples < 2^64 as both are < 2^32 (select.cc), unsigned.
    const auto un = static_cast<std::size_t>(n);
    const std::int64_t min_samples = (2 * n + p.k - 1) / p.k;
    const std::int64_t want =
        std::max(static_cast<std::int64_t>(kernels::count_for_fraction(sample, un)), min_samples);
    p.lines_total = n / kLine;
    p.lines = (want + kLine - 1) / kLine;
    if (p.lines < p.lines_total) {
      p.kind = SelectPlan::Kind::kLines;
      p.samples = p.lines * kLine;
      // thr = the ks-th largest sampled pattern, ks = ceil(density * samples).
      const auto uk = static_cast<std::uint64_t>(p.k);
      const auto us64 = static_cast<std::uint64_t>(p.samples);
      p.rank =
          static_cast<std::int64_t>(std::clamp<std::uint64_t>((uk * us64 + un - 1) / un, 1, us64));
      return p;
    }
  }
  p.kind = SelectPlan::Kind::kWhole;
  if (p.k == n || n < kExactSampleFrom) return p;
  // A strided sample of s values; its r-th largest has about 1.5 k entries of x at or
  // above it (r - 16 of s, the 16 a margin: a shortfall below k is then many standard
  // deviations away, and only costs the whole-tensor path).
  const std::int64_t s = std::min(n / 8, std::max<std::int64_t>(65536, 256 * (n / p.k)));
  if (!exact_sample(n, p.k, s, p)) return p;
  p.kind = SelectPlan::Kind::kStrided;
  return p;
}

bool exact_sample(std::int64_t n, std::int64_t k, std::int64_t s, SelectPlan& plan) {
  if (k <= 0 || k >= n || s <= 0) return false;
  const auto r =
      static_cast<std::int64_t>(std::ceil(1.5 * static_cast<double>(k) * static_cast<double>(s) /
                                          static_cast<double>(n))) +
      16;
  if (r >= s / 2) return false;
  plan.samples = s;
  plan.stride = n / s;
  plan.rank = r;
  return true;
}

void draw_line_starts(const CounterRng& rng, const SelectPlan& plan, std::int64_t* out) {
  for (std::int64_t j = 0; j < plan.lines; ++j) {
    const std::int64_t begin = j * plan.lines_total / plan.lines;
    const std::int64_t end = (j + 1) * plan.lines_total / plan.lines;
    const std::int64_t line =
        begin + rng.below(static_cast<std::uint32_t>(j), static_cast<std::uint32_t>(end - begin));
    out[j] = line * kLine;
  }
}

bool fused_selection(const at::Tensor& x, std::int64_t k) {
  return fused::usable(x) && k * kFusedSelectMinSpacing <= x.numel();
}

}  // namespace topk_detail

namespace {

using namespace topk_detail;  // NOLINT: this file's own details

at::Tensor no_indices(const at::Tensor& x) { return at::empty({0}, x.options().dtype(at::kLong)); }

// The values selected from: x = a + b where b is defined (the error-feedback step e + g,
// not yet added: the first full pass over x writes it into a), else a.
struct Source {
  at::Tensor a;
  at::Tensor b;
};

// a <- a + b now, where the first pass is not the fused selection; returns x.
const at::Tensor& materialise(Source& x) {
  if (x.b.defined()) {
    x.a.add_(x.b);
    x.b = at::Tensor();
  }
  return x.a;
}

// x at `pos` (the sample), without a pass over x.
at::Tensor values_at(const Source& x, const at::Tensor& pos) {
  const at::Tensor v = x.a.index_select(0, pos);
  return x.b.defined() ? v.add_(x.b.index_select(0, pos)) : v;
}

// The candidates {i : |x_i|'s pattern >= thr}, ascending (int64), for a top-k of k. On
// CUDA, for sparse k, one fused pass (src/device/cuda/select.cu) that also writes a
// pending e + g; up to 2k + 4096 candidates come from its slots, more from a second pass.
// Elsewhere |x| >= thr, then nonzero.
at::Tensor candidates(Source& x, const at::Tensor& thr, std::int64_t k) {
  const std::int64_t n = x.a.numel();
  if (fused_selection(x.a, k)) {
    const std::int64_t slots = std::min(n, 2 * k + 4096);
    const at::Tensor out = x.b.defined() ? x.a : at::Tensor();
    at::Tensor idx = fused::select_at_least(x.a, x.b, thr, out, slots);
    x.b = at::Tensor();
    return idx;
  }
  return at::nonzero(abs_bits(materialise(x)).ge(thr)).view(-1);
}

// The top k (0 < k < idx.numel()) of candidates idx (int64, ascending) whose patterns are
// u (int32, finite): larger u first, ties to the lower index; returned ascending.
at::Tensor top_among(const at::Tensor& idx, const at::Tensor& u, std::int64_t k) {
  const at::Tensor keys = u.to(at::kLong).mul(kTwo32).add(idx.neg().add(kTwo32 - 1));
  const at::Tensor top = std::get<0>(at::topk(keys, k, 0, /*largest=*/true, /*sorted=*/false));
  return std::get<0>(at::sort(top.bitwise_and(kTwo32 - 1).neg().add(kTwo32 - 1)));
}

// The host's draws of select_sampled's line starts, on `device` (from pinned memory
// without a sync where it is a GPU).
at::Tensor host_line_starts(const CounterRng& rng, const SelectPlan& plan,
                            const at::Device& device) {
  at::Tensor starts =
      at::empty({plan.lines}, at::TensorOptions().dtype(at::kLong).pinned_memory(device.is_cuda()));
  draw_line_starts(rng, plan, starts.data_ptr<std::int64_t>());
  return starts.to(device, /*non_blocking=*/true);
}

// InvalidArgument "<op>: non-finite value at index i" naming the first non-finite entry
// if any of the candidates (which hold every non-finite entry of x) is one. One host sync.
void check_finite(const at::Tensor& idx, const at::Tensor& u, const char* op) {
  const at::Tensor bad = u.ge(kNonFiniteBits);
  if (bad.any().item<bool>()) {
    throw InvalidArgument(std::string(op) + ": non-finite value at index " +
                          std::to_string(idx.masked_select(bad)[0].item<std::int64_t>()));
  }
}

// select_topk_exact's path for every entry: the k largest |x|, ties to the lower index.
at::Tensor select_whole(const at::Tensor& x, std::int64_t k, const char* op) {
  const std::int64_t n = x.numel();
  const at::Tensor u = abs_bits(x);
  const at::Tensor all = at::arange(n, x.options().dtype(at::kLong));
  check_finite(all, u, op);
  return k == n ? all : top_among(all, u, k);
}

// A kStrided plan: the exact top k from the candidates above the strided sample's
// threshold, or from all of x when they are fewer than k.
at::Tensor select_strided(const at::Tensor& x, const SelectPlan& plan, const char* op) {
  const at::Tensor sample = abs_bits(x.slice(0, 0, plan.samples * plan.stride, plan.stride));
  const at::Tensor thr = std::get<0>(at::topk(sample, plan.rank, 0, true, false))
                             .min()
                             .clamp_max(kNonFiniteBits)
                             .reshape({1});
  Source source{x, {}};
  const at::Tensor idx = candidates(source, thr, plan.k);
  const std::int64_t c = idx.numel();
  if (c < plan.k) return select_whole(x, plan.k, op);
  const at::Tensor us = abs_bits(x.index_select(0, idx));
  check_finite(idx, us, op);
  return c == plan.k ? idx : top_among(idx, us, plan.k);
}

// select_topk_exact: the min(k, n) largest |x|, ties to the lower index.
at::Tensor select_exact(const at::Tensor& x, std::int64_t k, const char* op) {
  const SelectPlan plan = plan_selection(x.numel(), k, /*sampled=*/false, 0.0);
  switch (plan.kind) {
    case SelectPlan::Kind::kEmpty:
      return no_indices(x);
    case SelectPlan::Kind::kStrided:
      return select_strided(x, plan, op);
    default:
      return select_whole(x, plan.k, op);
  }
}

// A kLines plan: select_topk_sampled with the CPU's sample positions.
at::Tensor select_sampled(Source& x, const SelectPlan& plan, const StepContext& ctx,
                          const char* op) {
  const std::int64_t k = plan.k;
  // The lines' first elements, one uniform draw in each of `lines` equal strata: drawn
  // on the GPU by a kernel where there is one, else here.
  const CounterRng rng = CounterRng::for_step(ctx, RngScope::kPerRank);
  const at::Tensor starts =
      fused::usable(x.a)
          ? fused::sample_line_starts(rng.key(), plan.lines, plan.lines_total, kLine, x.a)
          : host_line_starts(rng, plan, x.a.device());
  const at::Tensor pos =
      starts.unsqueeze(1).add(at::arange(kLine, x.a.options().dtype(at::kLong))).view(-1);
  // Clamped to +inf's pattern so that the selection meets every non-finite entry.
  at::Tensor thr = std::get<0>(at::topk(abs_bits(values_at(x, pos)), plan.rank, 0, true, false))
                       .min()
                       .clamp_max(kNonFiniteBits)
                       .reshape({1});

  for (int attempt = 0;; ++attempt) {
    const at::Tensor idx = candidates(x, thr, k);  // writes x on the first
    const std::int64_t c = idx.numel();
    at::Tensor us;
    if (attempt == 0 || 10 * c > 13 * k) us = abs_bits(x.a.index_select(0, idx));
    // Later attempts' lower thresholds add only finite entries.
    if (attempt == 0) check_finite(idx, us, op);
    if (10 * c > 13 * k) return top_among(idx, us, k);  // hierarchical re-selection
    if (10 * c < 8 * k) {
      // Too few: thr *= 0.8f (DGC's rule) in float, as the host computes it.
      if (attempt == kMaxRetries) return select_exact(x.a, k, op);
      thr = thr.view(at::kFloat).mul(0.8).view(at::kInt);
      continue;
    }
    return idx;
  }
}

// The selected indices of x (min(k, n) of them exactly, or the sampled threshold's
// 0.8k..1.3k), ascending (int64 on x's device). x is written (a <- a + b) on the way.
at::Tensor select(Source& x, std::int64_t k, bool sampled, double sample, const StepContext& ctx,
                  const char* op) {
  const SelectPlan plan = plan_selection(x.a.numel(), k, sampled, sample);
  switch (plan.kind) {
    case SelectPlan::Kind::kEmpty:
      return no_indices(materialise(x));
    case SelectPlan::Kind::kWhole:
      return select_whole(materialise(x), plan.k, op);
    case SelectPlan::Kind::kStrided:
      return select_strided(materialise(x), plan, op);
    case SelectPlan::Kind::kLines:
      return select_sampled(x, plan, ctx, op);
  }
  return {};
}

// write_sparse's payload for indices idx (ascending) and their values, fp32 or (fp16)
// halves.
struct Encoded {
  at::Tensor payload;
  at::Tensor halves;  // the fp16 values sent (values=fp16), for the residual
};

Encoded write_sparse(const at::Tensor& idx, const at::Tensor& vals, bool fp16) {
  const std::int64_t c = idx.numel();
  Encoded enc;
  enc.payload = at::empty({4 + (fp16 ? 6 : 8) * c}, vals.options().dtype(at::kByte));
  enc.payload.narrow(0, 0, 4).view(at::kInt).fill_(
      static_cast<std::int32_t>(static_cast<std::uint32_t>(c)));
  if (c == 0) return enc;
  // int64 -> int32 keeps the low 32 bits: the u32 index's pattern.
  enc.payload.narrow(0, 4, 4 * c).view(at::kInt).copy_(idx);
  if (fp16) {
    enc.halves = sent_halves(vals);
    enc.payload.narrow(0, 4 + 4 * c, 2 * c).view(at::kHalf).copy_(enc.halves);
  } else {
    enc.payload.narrow(0, 4 + 4 * c, 4 * c).view(at::kFloat).copy_(vals);
  }
  return enc;
}

class TopkDeviceCodec final : public DeviceCodec {
 public:
  TopkDeviceCodec(const Codec& codec, TopkParams params)
      : DeviceCodec(codec), params_(std::move(params)) {}

  bool batches() const override { return true; }

  at::Tensor encode_impl(const at::Tensor& g, const StepContext& ctx) const override {
    Source x{g, {}};
    const at::Tensor idx = select(x, ctx);
    return write_sparse(idx, g.index_select(0, idx), params_.fp16).payload;
  }

  // On CUDA, e + g is written by the selection's pass over it (no pass of its own).
  at::Tensor encode_with_residual_impl(const at::Tensor& g, const at::Tensor& e,
                                       const StepContext& ctx) const override {
    if (!fused::usable(e)) return DeviceCodec::encode_with_residual_impl(g, e, ctx);
    return encode_feedback(Source{e, g}, ctx);
  }

  at::Tensor encode_feedback_impl(const at::Tensor& p, const StepContext& ctx) const override {
    return encode_feedback(Source{p, {}}, ctx);
  }

  EncodedBatch encode_batch_impl(const at::Tensor& flat, std::span<const std::int64_t> sizes,
                                 std::span<const StepContext> ctxs, bool feedback) const override {
    return topk_detail::encode_batch(params_.selection(sizes), flat, sizes, ctxs, feedback);
  }

  // The batch's selection reads e once it holds e + g (one add for all segments).
  EncodedBatch encode_batch_with_residual_impl(const at::Tensor& g, const at::Tensor& e,
                                               std::span<const std::int64_t> sizes,
                                               std::span<const StepContext> ctxs) const override {
    e.add_(g);
    return topk_detail::encode_batch(params_.selection(sizes), e, sizes, ctxs, /*feedback=*/true);
  }

  void decode_batch_impl(const at::Tensor& payloads, std::span<const std::int64_t> offsets,
                         std::span<const std::int64_t> bytes, std::span<const at::Tensor> outs,
                         float alpha) const override {
    if (topk_detail::decode_batch(params_, payloads, offsets, bytes, outs, alpha)) return;
    // A payload is refused: one at a time, for the one-payload path's words.
    DeviceCodec::decode_batch_impl(payloads, offsets, bytes, outs, alpha);
  }

  void decode_add_impl(const at::Tensor& payload, const at::Tensor& out,
                       float alpha) const override {
    const std::string op = "topk decode";
    const std::int64_t n = out.numel();
    const std::int64_t bytes = payload.numel();
    if (bytes < 4) {
      throw CorruptMessage(op + ": payload of " + std::to_string(bytes) +
                           " bytes < 4 (count field)");
    }
    const std::int64_t entry = params_.entry_bytes();
    // The count the length implies; the count field must say the same (checked on the
    // device with the contents, below), so only a refusal reads the field on its own.
    const std::int64_t count = (bytes - 4) / entry;
    const at::Tensor field =
        payload.narrow(0, 0, 4).view(at::kInt).to(at::kLong).bitwise_and(kTwo32 - 1);
    const auto length_error = [&] {
      return CorruptMessage(op + ": count " + std::to_string(field.item<std::int64_t>()) +
                            " needs " + std::to_string(entry) + " bytes per entry, payload has " +
                            std::to_string(bytes) + " bytes");
    };
    if ((bytes - 4) % entry != 0) throw length_error();
    const std::int64_t lo = params_.min_count(n);
    const std::int64_t hi = params_.max_count(n);
    if (count < lo || count > hi) {
      if (field.item<std::int64_t>() != count) throw length_error();
      throw CorruptMessage(op + ": count " + std::to_string(count) + " outside [" +
                           std::to_string(lo) + ", " + std::to_string(hi) + "] for n " +
                           std::to_string(n));
    }
    const at::Tensor idx =
        payload.narrow(0, 4, 4 * count).view(at::kInt).to(at::kLong).bitwise_and(kTwo32 - 1);
    const at::Tensor raw = payload.narrow(0, 4 + 4 * count, (entry - 4) * count)
                               .view(params_.fp16 ? at::kHalf : at::kFloat);
    const at::Tensor vals = raw.to(at::kFloat);
    // Per position: index out of range, or not above the previous one.
    const at::Tensor bad_idx = idx.ge(n);
    if (count > 1) {
      bad_idx.narrow(0, 1, count - 1)
          .logical_or_(idx.narrow(0, 1, count - 1).le(idx.narrow(0, 0, count - 1)));
    }
    const at::Tensor bad_val = vals.isfinite().logical_not();
    // The one host sync of an accepted payload: all three checks in one transfer.
    const at::Tensor flags =
        at::stack({field.ne(count).reshape({}), bad_idx.any(), bad_val.any()}).cpu();
    const bool* f = flags.data_ptr<bool>();
    if (f[0]) throw length_error();
    if (f[1]) {
      const std::int64_t j = bad_idx.nonzero()[0][0].item<std::int64_t>();
      const std::int64_t i = idx[j].item<std::int64_t>();
      if (i >= n) {
        throw CorruptMessage(op + ": index " + std::to_string(i) + " >= n " + std::to_string(n));
      }
      throw CorruptMessage(op + ": index " + std::to_string(i) + " at position " +
                           std::to_string(j) + " not above the previous " +
                           std::to_string(idx[j - 1].item<std::int64_t>()));
    }
    if (f[2]) {
      const std::int64_t j = bad_val.nonzero()[0][0].item<std::int64_t>();
      throw CorruptMessage(op + ": non-finite " + (params_.fp16 ? "fp16 " : "") +
                           "value at position " + std::to_string(j));
    }
    if (count == 0) return;
    // out[i] = fma(alpha, v, out[i]): ATen's add with alpha is a fused multiply-add on
    // CUDA and in the CPU's vector loop (the test checks a non-power-of-two alpha).
    out.index_copy_(0, idx, out.index_select(0, idx).add_(vals, alpha));
  }

 private:
  // x <- x with the sent entries zeroed (fp32 values) or left with the fp16 rounding error
  // (subtract_sent): touches only the selected entries, no decode. Returns the payload.
  at::Tensor encode_feedback(Source x, const StepContext& ctx) const {
    const at::Tensor idx = select(x, ctx);
    const at::Tensor& p = materialise(x);
    const at::Tensor vals = p.index_select(0, idx);
    Encoded enc = write_sparse(idx, vals, params_.fp16);
    if (idx.numel() == 0) return enc.payload;
    if (params_.fp16) {
      p.index_copy_(0, idx, vals.sub(enc.halves.to(at::kFloat)));
    } else {
      p.index_fill_(0, idx, 0.0);  // p - p is +0, as the CPU writes
    }
    return enc.payload;
  }

  // The selection for this codec's k and mode.
  at::Tensor select(Source& x, const StepContext& ctx) const {
    const std::int64_t n = x.a.numel();
    return device::select(x, params_.k(n), params_.sampled(n), params_.sample, ctx, "topk encode");
  }

  TopkParams params_;
};

}  // namespace

at::Tensor select_topk(const at::Tensor& x, std::int64_t k, bool sampled, double sample,
                       const StepContext& ctx, const char* op) {
  Source source{x, {}};
  return select(source, k, sampled, sample, ctx, op);
}

at::Tensor sparse_fp32_payload(const at::Tensor& idx, const at::Tensor& vals) {
  return write_sparse(idx, vals, /*fp16=*/false).payload;
}

std::unique_ptr<DeviceCodec> make_topk(const Codec& codec, const SpecParams& params) {
  TopkParams p;
  p.ratio = params.number("ratio");
  p.select = params.text("select");
  p.fp16 = params.text("values") == "fp16";
  p.sample = params.number("sample");
  return std::make_unique<TopkDeviceCodec>(codec, std::move(p));
}

}  // namespace gradcomp::device
