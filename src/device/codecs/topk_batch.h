// top-k's batches on the device (DeviceCodec::encode_batch / decode_batch; topk_batch.cc):
// the tensors of a step selected, and their messages checked, all at once.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "gradcomp/device/codec.h"
#include "gradcomp/step_context.h"

namespace gradcomp::device::topk_detail {

// What a batch selects: each segment's k (of which min(k, n) are taken) and whether its
// threshold is sampled (DGC's line sample) or exact; the fraction sampled; whether values
// are sent as fp16; and whose name its errors carry (topk's codec, or DGC's memory, which
// selects with its own k each step: src/device/dgc.cc).
struct BatchSelection {
  std::vector<std::int64_t> k;
  std::vector<char> sampled;
  double sample = 0.01;
  bool fp16 = false;
  const char* op = "topk encode";
};

// A topk codec's parameters (its spec), and what they make of n values.
struct TopkParams {
  double ratio = 0.01;
  std::string select = "auto";  // "auto", "sampled" or "exact"
  bool fp16 = false;            // values=fp16
  double sample = 0.01;         // the fraction sampled for the threshold

  std::int64_t k(std::int64_t n) const;  // ceil(ratio * n), as the CPU codec counts it
  bool sampled(std::int64_t n) const;
  // The counts a message for n values may hold (the CPU codec's decode bounds).
  std::int64_t min_count(std::int64_t n) const;
  std::int64_t max_count(std::int64_t n) const;
  std::int64_t entry_bytes() const { return fp16 ? 6 : 8; }
  // The codec's selection for segments of these sizes.
  BatchSelection selection(std::span<const std::int64_t> sizes) const;
};

// DeviceCodec::encode_batch_impl for topk: every segment's selection as the one-tensor
// select_topk (codecs.h) makes it, found for all segments at once: two host syncs (the
// candidates' count; their per-segment counts and the non-finite check), two more where
// DGC's sampled threshold needs its 0.8x retries or an exact sample fell short of k. The
// sparse segments the fused CUDA selection takes run select_topk on their own.
// `selected`, where given, receives the sent entries' indices in flat (int64, ascending):
// DGC masks its momentum there.
DeviceCodec::EncodedBatch encode_batch(const BatchSelection& selection, const at::Tensor& flat,
                                       std::span<const std::int64_t> sizes,
                                       std::span<const StepContext> ctxs, bool feedback,
                                       at::Tensor* selected = nullptr);

// DeviceCodec::decode_batch_impl for topk, with every payload's checks in one host sync.
// Returns false, having written nothing, where a payload would be refused: the caller then
// decodes one payload at a time, which refuses it with the one-tensor words.
bool decode_batch(const TopkParams& params, const at::Tensor& payloads,
                  std::span<const std::int64_t> offsets, std::span<const std::int64_t> bytes,
                  std::span<const at::Tensor> outs, float alpha);

}  // namespace gradcomp::device::topk_detail
