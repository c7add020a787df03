// top-k's batches on the device (topk_batch.h). The one-tensor path (topk.cc) costs every
// tensor about twenty launches and two host syncs; a DDP bucket of ResNet-50 holds dozens
// of tensors, most of them small. Here the segments of one flat tensor share the passes:
//
//   thresholds  per segment: for a sampled selection (DGC's) the rank-th largest pattern
//               of topk.cc's line sample, drawn as it draws it; for an exact one, of the
//               batch's own strided sample (exact_sample: any threshold with k entries above
//               it gives the same top k), the small tensors the one-tensor path sorts whole
//               included, or 0 (every entry a candidate) where a sample cannot narrow them.
//               All segments' samples are sorted at once, keyed by segment;
//   candidates  u >= the segment's threshold, segment by segment, one nonzero (sync 1), then
//               the per-segment counts and the non-finite check in one transfer (sync 2);
//   decide      on the host, per segment, what topk.cc decides from the count: all of
//               them or the top k among them; or a second round, where DGC's sampled
//               threshold left fewer than 0.8k (every 0.8x retry's count, for all such
//               segments, in one transfer: sync 3) or an exact sample fell short of k
//               (every entry a candidate), its candidates from one more nonzero (sync 4);
//   top k       all candidates sorted at once by (segment, larger pattern first), stably,
//               so ties go to the lower index as everywhere else; each segment's first m
//               taken, then sorted back into index order;
//   payloads    every segment's count, indices and values cut from three tensors and
//               joined in one cat; the feedback (sent entries zeroed, or left with the
//               fp16 rounding error) one indexed write over flat.
//
// The decode checks every payload of the step (count field, index range and order, finite
// values) in one host sync and adds each rank's entries in one indexed write, rank after
// rank, into the outputs (views of one DDP bucket) or an accumulator: the one-payload
// path's arithmetic in its order.
#include "topk_batch.h"

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "codecs.h"
#include "gradcomp/error.h"
#include "gradcomp/kernels/select.h"
#include "gradcomp/rng.h"
#include "topk_select.h"

namespace gradcomp::device::topk_detail {

std::int64_t TopkParams::k(std::int64_t n) const {
  return static_cast<std::int64_t>(kernels::count_for_fraction(ratio, static_cast<std::size_t>(n)));
}
bool TopkParams::sampled(std::int64_t n) const { return sampled_for(select, n); }
std::int64_t TopkParams::min_count(std::int64_t n) const { return sampled(n) ? 0 : k(n); }
BatchSelection TopkParams::selection(std::span<const std::int64_t> sizes) const {
  BatchSelection out;
  for (const std::int64_t n : sizes) {
    out.k.push_back(k(n));
    out.sampled.push_back(sampled(n) ? 1 : 0);
  }
  out.sample = sample;
  out.fp16 = fp16;
  return out;
}
std::int64_t TopkParams::max_count(std::int64_t n) const {
  return sampled(n)
             ? static_cast<std::int64_t>(kernels::sampled_max_count(static_cast<std::size_t>(k(n))))
             : k(n);
}

namespace {

// Runs r = 0, 1, ...: the arithmetic sequences base[r] + step[r] * i, i < count[r], one
// after the other (total = the sum of the counts), and each element's run.
struct Runs {
  at::Tensor values;
  at::Tensor run;
};
Runs expand(const std::vector<std::int64_t>& base, const std::vector<std::int64_t>& step,
            const std::vector<std::int64_t>& count, std::int64_t total, const at::Device& device) {
  std::vector<std::int64_t> first(count.size());
  std::int64_t next = 0;
  for (std::size_t r = 0; r < count.size(); ++r) {
    first[r] = next;
    next += count[r];
  }
  Runs out;
  out.run =
      at::repeat_interleave(longs_to_device(count, device), c10::optional<std::int64_t>(total));
  const at::Tensor i = at::arange(total, at::TensorOptions().dtype(at::kLong).device(device))
                           .sub_(longs_to_device(first, device).index_select(0, out.run));
  out.values = longs_to_device(base, device)
                   .index_select(0, out.run)
                   .add_(longs_to_device(step, device).index_select(0, out.run).mul_(i));
  return out;
}

// Per-segment patterns sorted by (segment, larger pattern first): keys seg * 2^31 + (max -
// u), u int32 patterns, seg int64 (2^31 > every pattern, so segments never interleave).
at::Tensor segment_keys(const at::Tensor& seg, const at::Tensor& u) {
  return seg.mul(std::int64_t{1} << 31).add_(u.to(at::kLong).neg().add_(kMaxBits));
}

enum class Route { kNone, kBatch, kAlone };

// The batch's strided samples for exact selections: at least this many values, and 16 per
// n / k (about 16 of them above the k-th largest; the threshold is the (1.5 x that + 16)-th
// largest, so a shortfall below k, which only sends the tensor down the one-tensor path, is
// many standard deviations away). Far smaller than the one-tensor path's 65,536: the
// batch sorts all its samples at once.
constexpr std::int64_t kExactBatchSample = 1024;

}  // namespace

namespace {

// One batch's segments and what is decided about them as the selection proceeds.
struct Segments {
  const at::Tensor& flat;
  std::span<const std::int64_t> sizes;
  std::span<const StepContext> ctxs;
  at::Device device;
  std::vector<std::int64_t> start;  // each segment's first element in flat
  std::vector<SelectPlan> plan;
  std::vector<Route> route;

  std::size_t count() const { return sizes.size(); }
  at::Tensor segment(std::size_t s) const { return flat.narrow(0, start[s], sizes[s]); }
  at::TensorOptions longs() const { return at::TensorOptions().dtype(at::kLong).device(device); }
};

// The batch segments' first thresholds (int64 patterns, [segments]): the rank-th largest
// of each sampled segment's sample, all of them from one sort; 0 for kWhole segments and
// those outside the batch. Exact plans are re-planned here with the batch's own sample.
at::Tensor first_thresholds(Segments& b) {
  std::vector<std::int64_t> run_base, run_step, run_count, run_segment;
  std::vector<std::int64_t> sampled_segments, take;
  std::vector<std::int64_t> line_starts;
  std::int64_t samples = 0;
  for (std::size_t s = 0; s < b.count(); ++s) {
    if (b.route[s] != Route::kBatch) continue;
    SelectPlan& p = b.plan[s];
    if (p.kind == SelectPlan::Kind::kWhole || p.kind == SelectPlan::Kind::kStrided) {
      // An exact selection: filtered by the batch's own strided sample (exact_sample), so
      // the small tensors too; where that cannot narrow them, every entry a candidate.
      const std::int64_t n = b.sizes[s];
      const std::int64_t want =
          std::max<std::int64_t>(kExactBatchSample, 16 * ((n + p.k - 1) / p.k));
      p.kind = exact_sample(n, p.k, std::min(n / 8, want), p) ? SelectPlan::Kind::kStrided
                                                              : SelectPlan::Kind::kWhole;
    }
    if (p.kind == SelectPlan::Kind::kWhole) continue;
    const auto index = static_cast<std::int64_t>(sampled_segments.size());
    sampled_segments.push_back(static_cast<std::int64_t>(s));
    if (p.kind == SelectPlan::Kind::kStrided) {
      run_base.push_back(b.start[s]);
      run_step.push_back(p.stride);
      run_count.push_back(p.samples);
      run_segment.push_back(index);
    } else {
      line_starts.resize(static_cast<std::size_t>(p.lines));
      draw_line_starts(CounterRng::for_step(b.ctxs[s], RngScope::kPerRank), p, line_starts.data());
      for (const std::int64_t line : line_starts) {
        run_base.push_back(b.start[s] + line);
        run_step.push_back(1);
        run_count.push_back(kLine);
        run_segment.push_back(index);
      }
    }
    take.push_back(samples + p.rank - 1);
    samples += p.samples;
  }
  at::Tensor thr = at::zeros({static_cast<std::int64_t>(b.count())}, b.longs());
  if (sampled_segments.empty()) return thr;
  const Runs pos = expand(run_base, run_step, run_count, samples, b.device);
  const at::Tensor seg = longs_to_device(run_segment, b.device).index_select(0, pos.run);
  const at::Tensor keys =
      std::get<0>(at::sort(segment_keys(seg, abs_bits(b.flat.index_select(0, pos.values)))));
  // max - (key mod 2^31) is the pattern; +inf's pattern at most, so that the selection
  // meets every non-finite entry.
  const at::Tensor order_stat = keys.index_select(0, longs_to_device(take, b.device))
                                    .bitwise_and_(kMaxBits)
                                    .neg_()
                                    .add_(kMaxBits)
                                    .clamp_max_(kNonFiniteBits);
  thr.index_copy_(0, longs_to_device(sampled_segments, b.device), order_stat);
  return thr;
}

// The candidates of the segments `which` (ascending, int64 global indices): entries whose
// pattern is at least thr[s] (an int32 tensor of every segment's), or every entry where
// every_entry[s]. One comparison per segment into one mask over those segments only (a
// launch each, no sync), one nonzero for all (a sync), mapped back to flat's indices.
at::Tensor candidates(const Segments& b, const std::vector<std::size_t>& which,
                      const at::Tensor& thr, const std::vector<char>& every_entry) {
  std::int64_t total = 0;
  std::vector<std::int64_t> ends;   // each one's end in the mask
  std::vector<std::int64_t> shift;  // flat's index minus the mask's, per segment
  for (const std::size_t s : which) {
    shift.push_back(b.start[s] - total);
    total += b.sizes[s];
    ends.push_back(total);
  }
  const at::Tensor mask = at::empty({total}, b.flat.options().dtype(at::kBool));
  for (std::size_t i = 0; i < which.size(); ++i) {
    const std::size_t s = which[i];
    if (b.sizes[s] == 0) continue;
    at::Tensor part = mask.narrow(0, ends[i] - b.sizes[s], b.sizes[s]);
    if (every_entry[s]) {
      part.fill_(true);
    } else {
      at::ge_out(part, abs_bits(b.segment(s)), thr.narrow(0, static_cast<std::int64_t>(s), 1));
    }
  }
  const at::Tensor idx = at::nonzero(mask).view(-1);
  if (which.size() == b.count() && total == b.flat.numel()) return idx;  // the mask is flat's
  const at::Tensor part =
      at::searchsorted(longs_to_device(ends, b.device), idx, false, /*right=*/true);
  return idx.add(longs_to_device(shift, b.device).index_select(0, part));
}

// DGC's retries for the sampled segments `which` whose first threshold left fewer than
// 0.8k candidates: thr *= 0.8f (as topk.cc computes it, in float) up to kMaxRetries times.
// Every retry's count for all of them in one sync; returns, per segment of `which`, the
// first retry (1..kMaxRetries) with 10c >= 8k and its count, or 0 where none has (then the
// exact top k of the whole segment), and writes the chosen thresholds into thr (int32).
std::vector<std::pair<int, std::int64_t>> retry(const Segments& b,
                                                const std::vector<std::size_t>& which,
                                                const at::Tensor& thr) {
  std::vector<std::int64_t> rows(which.begin(), which.end());
  const at::Tensor index = longs_to_device(rows, b.device);
  std::vector<at::Tensor> rungs;
  at::Tensor rung = thr.index_select(0, index);
  for (int attempt = 1; attempt <= kMaxRetries; ++attempt) {
    rung = rung.view(at::kFloat).mul(0.8).view(at::kInt);
    rungs.push_back(rung);
  }
  const at::Tensor ladder = at::stack(rungs, 1);  // [segments, retries]
  std::vector<at::Tensor> counts;
  for (std::size_t r = 0; r < which.size(); ++r) {
    const at::Tensor u = abs_bits(b.segment(which[r]));
    counts.push_back(
        at::ge(u.unsqueeze(0), ladder.select(0, static_cast<std::int64_t>(r)).unsqueeze(1)).sum(1));
  }
  const at::Tensor seen = at::stack(counts).cpu();  // the sync
  const std::int64_t* c = seen.data_ptr<std::int64_t>();
  std::vector<std::pair<int, std::int64_t>> out;
  std::vector<std::int64_t> chosen_rows, chosen_cols;
  for (std::size_t r = 0; r < which.size(); ++r) {
    const std::int64_t k = b.plan[which[r]].k;
    std::pair<int, std::int64_t> found{0, 0};
    for (int attempt = 1; attempt <= kMaxRetries; ++attempt) {
      const std::int64_t count = c[r * kMaxRetries + static_cast<std::size_t>(attempt - 1)];
      if (10 * count >= 8 * k) {
        found = {attempt, count};
        chosen_rows.push_back(static_cast<std::int64_t>(which[r]));
        chosen_cols.push_back(static_cast<std::int64_t>(r) * kMaxRetries + attempt - 1);
        break;
      }
    }
    out.push_back(found);
  }
  if (!chosen_rows.empty()) {
    thr.index_copy_(0, longs_to_device(chosen_rows, b.device),
                    ladder.view(-1).index_select(0, longs_to_device(chosen_cols, b.device)));
  }
  return out;
}

}  // namespace

DeviceCodec::EncodedBatch encode_batch(const BatchSelection& selection, const at::Tensor& flat,
                                       std::span<const std::int64_t> sizes,
                                       std::span<const StepContext> ctxs, bool feedback,
                                       at::Tensor* selected_out) {
  const char* op = selection.op;
  const bool fp16 = selection.fp16;
  Segments b{flat, sizes, ctxs, flat.device(), {}, {}, {}};
  const std::size_t segments = b.count();
  const std::int64_t total = flat.numel();
  for (std::size_t s = 0; s < segments; ++s) {
    const std::int64_t n = sizes[s];
    b.start.push_back(s == 0 ? 0 : b.start[s - 1] + sizes[s - 1]);
    b.plan.push_back(
        plan_selection(n, selection.k[s], selection.sampled[s] != 0, selection.sample));
    b.route.push_back(b.plan[s].kind == SelectPlan::Kind::kEmpty   ? Route::kNone
                      : fused_selection(b.segment(s), b.plan[s].k) ? Route::kAlone
                                                                   : Route::kBatch);
  }
  // The fused CUDA selection's segments run on their own, first: their non-finite check
  // then speaks before the batch's.
  std::vector<at::Tensor> alone(segments);
  for (std::size_t s = 0; s < segments; ++s) {
    if (b.route[s] != Route::kAlone) continue;
    alone[s] = select_topk(b.segment(s), selection.k[s], selection.sampled[s] != 0,
                           selection.sample, ctxs[s], op)
                   .add(b.start[s]);
  }

  // ---- round 1: the first thresholds' candidates, their per-segment counts and the
  // non-finite check (2 syncs)
  std::vector<std::size_t> batch;
  for (std::size_t s = 0; s < segments; ++s) {
    if (b.route[s] == Route::kBatch) batch.push_back(s);
  }
  const at::Tensor thr = first_thresholds(b).to(at::kInt);
  std::vector<char> every_entry(segments, 0);
  for (const std::size_t s : batch) every_entry[s] = b.plan[s].kind == SelectPlan::Kind::kWhole;
  std::vector<std::int64_t> boundaries(b.start);
  boundaries.push_back(total);
  const at::Tensor bounds_dev = longs_to_device(boundaries, b.device);
  const at::Tensor ends = bounds_dev.narrow(0, 1, static_cast<std::int64_t>(segments));
  const at::Tensor cand = candidates(b, batch, thr, every_entry);
  const at::Tensor cand_seg = at::searchsorted(ends, cand, /*out_int32=*/false, /*right=*/true);
  const at::Tensor cand_u = abs_bits(flat.index_select(0, cand));
  const at::Tensor bad = cand_u.ge(kNonFiniteBits);
  const at::Tensor first_bad =
      cand.numel() > 0 ? bad.to(at::kByte).argmax().reshape({1}) : at::zeros({1}, b.longs());
  const at::Tensor info =
      at::cat({at::searchsorted(cand, bounds_dev), bad.any().to(at::kLong).reshape({1}), first_bad})
          .cpu();
  const std::int64_t* seen = info.data_ptr<std::int64_t>();
  if (seen[segments + 1] != 0) {
    const std::int64_t i = cand[seen[segments + 2]].item<std::int64_t>();
    const auto s = static_cast<std::size_t>(std::upper_bound(b.start.begin(), b.start.end(), i) -
                                            b.start.begin() - 1);
    throw InvalidArgument(std::string(op) + ": non-finite value at index " +
                          std::to_string(i - b.start[s]));
  }

  // ---- decide per segment, from its count, what topk.cc decides: how many of its
  // candidates to take (the first by pattern), or a second round
  std::vector<std::int64_t> taken(segments, 0);
  std::vector<std::int64_t> group(segments, 0);  // where its candidates start, sorted
  std::vector<std::size_t> retried, second;
  for (const std::size_t s : batch) {
    const std::int64_t c = seen[s + 1] - seen[s];
    const std::int64_t k = b.plan[s].k;
    group[s] = seen[s];
    switch (b.plan[s].kind) {
      case SelectPlan::Kind::kWhole:
        taken[s] = k;
        break;
      case SelectPlan::Kind::kStrided:
        if (c >= k) {
          taken[s] = k;
        } else {  // the sample fell short: the whole segment, as topk.cc falls back
          every_entry[s] = 1;
          second.push_back(s);
        }
        break;
      case SelectPlan::Kind::kLines:
        if (10 * c > 13 * k) {
          taken[s] = k;  // hierarchical re-selection
        } else if (10 * c < 8 * k) {
          retried.push_back(s);  // DGC's 0.8x retries
        } else {
          taken[s] = c;
        }
        break;
      case SelectPlan::Kind::kEmpty:
        break;
    }
  }

  // ---- round 2 (where needed): the retries' and shortfalls' candidates (2 syncs more)
  std::vector<at::Tensor> all_cand{cand}, all_seg{cand_seg}, all_u{cand_u};
  if (!retried.empty() || !second.empty()) {
    std::vector<std::int64_t> second_count(segments, 0);
    for (const std::size_t s : second) second_count[s] = sizes[s];
    if (!retried.empty()) {
      const auto outcome = retry(b, retried, thr);
      for (std::size_t r = 0; r < retried.size(); ++r) {
        const std::size_t s = retried[r];
        const std::int64_t k = b.plan[s].k;
        if (outcome[r].first == 0) {  // retries spent: the exact top k of the segment
          every_entry[s] = 1;
          second_count[s] = sizes[s];
          taken[s] = k;
        } else {
          second_count[s] = outcome[r].second;
          taken[s] = 10 * outcome[r].second > 13 * k ? k : outcome[r].second;
        }
        second.push_back(s);
      }
    }
    std::sort(second.begin(), second.end());
    const at::Tensor cand2 = candidates(b, second, thr, every_entry);
    // Their own groups in the sort: segment + segments, after every first-round one.
    std::int64_t next = cand.numel();
    for (const std::size_t s : second) {
      group[s] = next;
      next += second_count[s];
      if (b.plan[s].kind == SelectPlan::Kind::kStrided) taken[s] = b.plan[s].k;
    }
    all_cand.push_back(cand2);
    all_seg.push_back(
        at::searchsorted(ends, cand2, false, true).add_(static_cast<std::int64_t>(segments)));
    all_u.push_back(abs_bits(flat.index_select(0, cand2)));
  }

  // ---- every segment's top: all candidates sorted by (segment, larger pattern first),
  // stably (ties to the lower index), each segment's first taken[s], back in index order
  std::int64_t m_total = 0;
  std::vector<std::int64_t> take_base, ones, take_count;
  for (std::size_t s = 0; s < segments; ++s) {
    if (taken[s] == 0 || b.route[s] != Route::kBatch) continue;
    take_base.push_back(group[s]);
    ones.push_back(1);
    take_count.push_back(taken[s]);
    m_total += taken[s];
  }
  at::Tensor selected = at::empty({0}, b.longs());
  if (m_total > 0) {
    const at::Tensor keys = segment_keys(at::cat(all_seg), at::cat(all_u));
    const at::Tensor perm = std::get<1>(at::sort(keys, /*stable=*/true, 0, false));
    const at::Tensor pos = expand(take_base, ones, take_count, m_total, b.device).values;
    selected = std::get<0>(at::sort(at::cat(all_cand).index_select(0, perm.index_select(0, pos))));
  }
  std::vector<at::Tensor> parts{selected};
  for (std::size_t s = 0; s < segments; ++s) {
    if (!alone[s].defined()) continue;
    taken[s] = alone[s].numel();
    parts.push_back(alone[s]);
  }
  if (parts.size() > 1) selected = std::get<0>(at::sort(at::cat(parts)));

  // ---- payloads: count, indices (segment-local), values, segment after segment
  m_total = 0;
  for (const std::int64_t m : taken) m_total += m;
  const std::vector<std::int64_t> zero_steps(segments, 0);
  const at::Tensor local =
      selected.sub(expand(b.start, zero_steps, taken, m_total, b.device).values).to(at::kInt);
  const at::Tensor vals = flat.index_select(0, selected);
  const at::Tensor halves = fp16 ? sent_halves(vals) : at::Tensor();
  const at::Tensor count_bytes = longs_to_device(taken, b.device).to(at::kInt).view(at::kByte);
  const at::Tensor index_bytes = local.view(at::kByte);
  const at::Tensor value_bytes = (fp16 ? halves : vals).view(at::kByte);
  const std::int64_t value_size = fp16 ? 2 : 4;
  DeviceCodec::EncodedBatch out;
  std::vector<at::Tensor> pieces;
  std::int64_t first = 0;  // the segment's first selected entry
  for (std::size_t s = 0; s < segments; ++s) {
    const std::int64_t m = taken[s];
    pieces.push_back(count_bytes.narrow(0, 4 * static_cast<std::int64_t>(s), 4));
    pieces.push_back(index_bytes.narrow(0, 4 * first, 4 * m));
    pieces.push_back(value_bytes.narrow(0, value_size * first, value_size * m));
    out.bytes.push_back(4 + (4 + value_size) * m);
    first += m;
  }
  out.payloads = pieces.empty() ? at::empty({0}, flat.options().dtype(at::kByte)) : at::cat(pieces);

  if (feedback && m_total > 0) {
    if (fp16) {
      flat.index_copy_(0, selected, vals.sub(halves.to(at::kFloat)));
    } else {
      flat.index_fill_(0, selected, 0.0);  // p - p is +0, as the CPU writes
    }
  }
  if (selected_out != nullptr) *selected_out = selected;
  return out;
}

bool decode_batch(const TopkParams& params, const at::Tensor& payloads,
                  std::span<const std::int64_t> offsets, std::span<const std::int64_t> bytes,
                  std::span<const at::Tensor> outs, float alpha) {
  const std::size_t segments = outs.size();
  if (segments == 0) return true;
  const at::Device device = outs.front().device();
  const std::size_t messages = offsets.size();
  const std::size_t ranks = messages / segments;
  const std::int64_t entry = params.entry_bytes();

  // Lengths: what the host can check alone (a refusal is left to the one-payload path).
  std::vector<std::int64_t> counts(messages), sizes(messages), out_base(messages);
  std::vector<std::int64_t> acc_base(segments);
  std::int64_t acc_total = 0;
  for (std::size_t s = 0; s < segments; ++s) {
    acc_base[s] = acc_total;
    acc_total += outs[s].numel();
  }
  std::int64_t entries = 0;
  std::vector<at::Tensor> fields, index_parts, value_parts;
  for (std::size_t i = 0; i < messages; ++i) {
    const std::size_t s = i % segments;
    const std::int64_t n = outs[s].numel();
    if (bytes[i] < 4 || (bytes[i] - 4) % entry != 0) return false;
    const std::int64_t c = (bytes[i] - 4) / entry;
    if (c < params.min_count(n) || c > params.max_count(n)) return false;
    counts[i] = c;
    sizes[i] = n;
    out_base[i] = acc_base[s];
    entries += c;
    fields.push_back(payloads.narrow(0, offsets[i], 4));
    index_parts.push_back(payloads.narrow(0, offsets[i] + 4, 4 * c));
    value_parts.push_back(payloads.narrow(0, offsets[i] + 4 + 4 * c, (entry - 4) * c));
  }
  std::vector<at::Tensor> flags;
  if (messages > 0) {
    const at::Tensor field = at::cat(fields).view(at::kInt).to(at::kLong).bitwise_and_(kTwo32 - 1);
    flags.push_back(field.ne(longs_to_device(counts, device)).any());
  }
  at::Tensor idx, vals, message;
  if (entries > 0) {
    idx = at::cat(index_parts).view(at::kInt).to(at::kLong).bitwise_and_(kTwo32 - 1);
    vals = at::cat(value_parts).view(params.fp16 ? at::kHalf : at::kFloat).to(at::kFloat);
    message = at::repeat_interleave(longs_to_device(counts, device),
                                    c10::optional<std::int64_t>(entries));
    // Index out of range, or (within a message) not above the previous one.
    at::Tensor bad = idx.ge(longs_to_device(sizes, device).index_select(0, message));
    if (entries > 1) {
      const at::Tensor later =
          message.narrow(0, 1, entries - 1).eq(message.narrow(0, 0, entries - 1));
      bad.narrow(0, 1, entries - 1)
          .logical_or_(
              idx.narrow(0, 1, entries - 1).le(idx.narrow(0, 0, entries - 1)).logical_and_(later));
    }
    flags.push_back(bad.any());
    flags.push_back(vals.isfinite().logical_not().any());
  }
  if (!flags.empty() && at::stack(flags).any().item<bool>()) return false;  // the one sync

  // Where the ranks' entries are added: into the outs themselves where they are views of
  // one tensor (a DDP bucket's slots), zeroed first; else into one accumulator, copied
  // into them after.
  bool shared = true;
  std::int64_t lo = std::numeric_limits<std::int64_t>::max();
  std::int64_t hi = 0;
  for (const at::Tensor& out : outs) {
    shared = shared && out.is_alias_of(outs.front());
    lo = std::min(lo, out.storage_offset());
    hi = std::max(hi, out.storage_offset() + out.numel());
  }
  at::Tensor target;
  if (shared) {
    target = outs.front().as_strided({hi - lo}, {1}, lo);
    for (std::size_t i = 0; i < messages; ++i)
      out_base[i] = outs[i % segments].storage_offset() - lo;
    for (const at::Tensor& out : outs) out.zero_();
  } else {
    target = at::zeros({acc_total}, outs.front().options());
  }
  if (entries > 0) {
    const at::Tensor where = idx.add(longs_to_device(out_base, device).index_select(0, message));
    std::int64_t from = 0;
    for (std::size_t r = 0; r < ranks; ++r) {
      std::int64_t c = 0;
      for (std::size_t s = 0; s < segments; ++s) c += counts[r * segments + s];
      if (c == 0) continue;
      const at::Tensor w = where.narrow(0, from, c);
      // out[i] = fma(alpha, v, out[i]), as decode_add_impl adds one payload.
      target.index_copy_(0, w, target.index_select(0, w).add_(vals.narrow(0, from, c), alpha));
      from += c;
    }
  }
  if (!shared) {
    for (std::size_t s = 0; s < segments; ++s) {
      outs[s].copy_(target.narrow(0, acc_base[s], outs[s].numel()));
    }
  }
  return true;
}

}  // namespace gradcomp::device::topk_detail
