// What the batch tests share (batch_device_test.cc: top-k and the reducer;
// checked_batch_device_test.cc: the other codecs): step contexts, gradients of several
// kinds, a batch's payloads from several ranks, the one-payload decode loop.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

#include "gradcomp/device/codec.h"
#include "gradcomp/step_context.h"

namespace gradcomp::device::test {

inline StepContext context(std::uint64_t step, std::uint32_t bucket) {
  StepContext ctx;
  ctx.seed = 11;
  ctx.step = step;
  ctx.bucket = bucket;
  return ctx;
}

// One segment's gradient, by kind: normal, lines of 16 equal values over 8 levels (ties
// at the threshold), heavy-tailed constant lines (the sample's threshold misses: retries
// and re-selection), all zero, or distinct values on every 8th entry only (an exact
// selection's strided sample of a 2^17-entry tensor sees just those: its threshold leaves
// fewer than k candidates, and the whole tensor is selected from).
inline at::Tensor gradient(std::int64_t n, int kind) {
  if (n == 0) return at::zeros({0});
  const at::Tensor signs = at::randint(0, 2, {n}).to(at::kFloat).mul(2).sub(1);
  switch (kind % 5) {
    case 0:
      return at::randn({n});
    case 1:
      return at::randint(0, 8, {(n + 15) / 16})
          .to(at::kFloat)
          .repeat_interleave(16)
          .narrow(0, 0, n)
          .mul(signs);
    case 2:
      return at::randn({(n + 15) / 16})
          .mul(3)
          .exp()
          .repeat_interleave(16)
          .narrow(0, 0, n)
          .mul(signs);
    case 3:
      return at::zeros({n});
    default: {
      at::Tensor x = at::zeros({n});
      x.slice(0, 0, n, 8).copy_(at::arange((n + 7) / 8).to(at::kFloat).add(1));
      return x;
    }
  }
}

inline std::vector<StepContext> contexts(std::size_t segments, std::uint64_t step) {
  std::vector<StepContext> out;
  for (std::size_t s = 0; s < segments; ++s)
    out.push_back(context(step, static_cast<std::uint32_t>(s)));
  return out;
}

// Payloads of `ranks` ranks for `sizes`, and what the one-payload decode adds up.
struct Gathered {
  at::Tensor payloads;
  std::vector<std::int64_t> offsets;
  std::vector<std::int64_t> bytes;
};

inline Gathered gather(const DeviceCodec& codec, const std::vector<std::int64_t>& sizes,
                       int ranks) {
  Gathered g;
  std::vector<at::Tensor> all;
  std::int64_t at = 0;
  for (int r = 0; r < ranks; ++r) {
    std::vector<at::Tensor> parts;
    for (std::size_t s = 0; s < sizes.size(); ++s)
      parts.push_back(gradient(sizes[s], r + static_cast<int>(s)));
    const at::Tensor flat = parts.empty() ? at::zeros({0}) : at::cat(parts);
    const DeviceCodec::EncodedBatch b = codec.encode_batch(
        flat, sizes, contexts(sizes.size(), static_cast<std::uint64_t>(r)), true);
    for (const std::int64_t len : b.bytes) {
      g.offsets.push_back(at);
      g.bytes.push_back(len);
      at += len;
    }
    all.push_back(b.payloads);
  }
  g.payloads = all.empty() ? at::zeros({0}, at::kByte) : at::cat(all);
  return g;
}

// decode_batch one payload at a time: what the reducer did before batches.
inline void decode_alone(const DeviceCodec& codec, const Gathered& g,
                         const std::vector<at::Tensor>& outs, float alpha) {
  const std::size_t segments = outs.size();
  for (std::size_t s = 0; s < segments; ++s) {
    outs[s].zero_();
    for (std::size_t r = 0; r < g.offsets.size() / segments; ++r) {
      const std::size_t i = r * segments + s;
      codec.decode_payload_add(g.payloads.narrow(0, g.offsets[i], g.bytes[i]), outs[s], alpha);
    }
  }
}

// Outputs holding 5s: tensors of their own, or (shared) views of one tensor with a gap
// of 3 between them (a DDP bucket's slots, dense ones between), which must stay 7.
inline std::vector<at::Tensor> outputs(const std::vector<std::int64_t>& sizes, bool shared = false,
                                       at::Tensor* bucket = nullptr) {
  std::vector<at::Tensor> outs;
  if (!shared) {
    for (const std::int64_t n : sizes) outs.push_back(at::full({n}, 5.0f));
    return outs;
  }
  std::int64_t total = 3;
  for (const std::int64_t n : sizes) total += n + 3;
  *bucket = at::full({total}, 7.0f);
  std::int64_t at = 3;
  for (const std::int64_t n : sizes) {
    outs.push_back(bucket->narrow(0, at, n).fill_(5.0f));
    at += n + 3;
  }
  return outs;
}

}  // namespace gradcomp::device::test
