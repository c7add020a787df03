// What the batch tests share (batch_device_test.cc: top-k and the reducer;
// checked_batch_device_test.cc: the other codecs): step contexts, gradients of several
// kinds, a batch's payloads from several ranks, the one-payload decode loop, and the
// checks that a batch encodes and decodes what the one-tensor calls do.
#pragma once

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "device_test_support.h"
#include "gradcomp/device/codec.h"
#include "gradcomp/error.h"
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

// A batch's gradient: segment s of `gradient`'s kind + s.
inline at::Tensor flat_gradient(const std::vector<std::int64_t>& sizes, int kind) {
  std::vector<at::Tensor> parts;
  for (std::size_t s = 0; s < sizes.size(); ++s) {
    parts.push_back(gradient(sizes[s], kind + static_cast<int>(s)));
  }
  return parts.empty() ? at::zeros({0}) : at::cat(parts);
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

// Each segment's payload of the one-tensor call `alone(offset of segment s, s)` against
// the batch's, byte for byte.
template <typename Alone>
void expect_payloads(const DeviceCodec::EncodedBatch& batch, const std::vector<std::int64_t>& sizes,
                     const Alone& alone, const std::string& where) {
  ASSERT_EQ(batch.bytes.size(), sizes.size()) << where;
  std::int64_t offset = 0;
  std::int64_t at = 0;
  for (std::size_t s = 0; s < sizes.size(); ++s) {
    const at::Tensor payload = alone(offset, s);
    ASSERT_EQ(batch.bytes[s], payload.numel()) << where << " segment " << s;
    ASSERT_TRUE(batch.payloads.narrow(0, at, batch.bytes[s]).equal(payload))
        << where << " segment " << s;
    offset += sizes[s];
    at += batch.bytes[s];
  }
  ASSERT_EQ(at, batch.payloads.numel()) << where;
}

// encode_batch of a copy of flat against encode_payload (or, with feedback,
// encode_payload_feedback) of each segment of another copy: payloads byte for byte, the
// copies bit for bit after (flat's own where there is no feedback).
inline void expect_encodes_as_alone(const DeviceCodec& codec, const at::Tensor& flat,
                                    const std::vector<std::int64_t>& sizes,
                                    const std::vector<StepContext>& ctxs, bool feedback,
                                    const std::string& where) {
  const at::Tensor batch_x = flat.clone();
  const at::Tensor alone_x = flat.clone();
  const DeviceCodec::EncodedBatch batch = codec.encode_batch(batch_x, sizes, ctxs, feedback);
  expect_payloads(
      batch, sizes,
      [&](std::int64_t offset, std::size_t s) {
        const at::Tensor segment = alone_x.narrow(0, offset, sizes[s]);
        return feedback ? codec.encode_payload_feedback(segment, ctxs[s])
                        : codec.encode_payload(segment, ctxs[s]);
      },
      where);
  ASSERT_TRUE(same_bits(batch_x, alone_x)) << where;
  if (!feedback) {
    ASSERT_TRUE(same_bits(batch_x, flat)) << where;
  }
}

// decode_batch against decode_alone, for 1 and 3 ranks' payloads of each batch of sizes,
// into tensors of their own and into views of one tensor (whose gaps stay untouched).
inline void expect_decodes_as_alone(const DeviceCodec& codec,
                                    const std::vector<std::vector<std::int64_t>>& batches) {
  for (const std::vector<std::int64_t>& sizes : batches) {
    if (sizes.empty()) continue;
    for (const int ranks : {1, 3}) {
      const Gathered g = gather(codec, sizes, ranks);
      const std::vector<at::Tensor> alone = outputs(sizes);
      decode_alone(codec, g, alone, 1.0f / 3.0f);
      for (const bool shared : {false, true}) {
        at::Tensor bucket;
        const std::vector<at::Tensor> batch = outputs(sizes, shared, &bucket);
        codec.decode_batch(g.payloads, g.offsets, g.bytes, batch, 1.0f / 3.0f);
        for (std::size_t s = 0; s < sizes.size(); ++s) {
          EXPECT_TRUE(same_bits(batch[s], alone[s]))
              << sizes.size() << " segments, " << ranks << " ranks, segment " << s
              << (shared ? ", views of one tensor" : "");
        }
        if (shared) {
          std::int64_t gap = 0;
          for (std::size_t s = 0; s <= sizes.size(); ++s) {
            EXPECT_TRUE(bucket.narrow(0, gap, 3).eq(7.0f).all().item<bool>())
                << "the gap before view " << s << " was written";
            if (s < sizes.size()) gap += 3 + sizes[s];
          }
        }
      }
    }
  }
}

// Random mutations of a gathered batch (1-4 bytes overwritten in random payloads): the
// batch refuses exactly what decode_alone refuses, in its words, and otherwise writes what
// it writes, bit for bit.
inline void expect_mutated_batches_as_alone(const DeviceCodec& codec,
                                            const std::vector<std::int64_t>& sizes, int trials,
                                            std::uint64_t seed) {
  const Gathered clean = gather(codec, sizes, 2);
  std::mt19937_64 rng(seed);
  int refused = 0;
  for (int trial = 0; trial < trials && clean.payloads.numel() > 0; ++trial) {
    Gathered g = clean;
    g.payloads = clean.payloads.clone();
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) {
      const std::size_t i = rng() % clean.offsets.size();
      if (clean.bytes[i] == 0) continue;
      g.payloads[clean.offsets[i] + static_cast<std::int64_t>(rng() % clean.bytes[i])] =
          static_cast<int>(rng() % 256);
    }
    const std::vector<at::Tensor> alone = outputs(sizes);
    std::string alone_words;
    try {
      decode_alone(codec, g, alone, 0.5f);
    } catch (const CorruptMessage& e) {
      alone_words = e.what();
    }
    const std::vector<at::Tensor> batch = outputs(sizes);
    std::string batch_words;
    try {
      codec.decode_batch(g.payloads, g.offsets, g.bytes, batch, 0.5f);
    } catch (const CorruptMessage& e) {
      batch_words = e.what();
    }
    ASSERT_EQ(batch_words, alone_words) << "trial " << trial;
    if (alone_words.empty()) {
      for (std::size_t s = 0; s < sizes.size(); ++s) {
        ASSERT_TRUE(same_bits(batch[s], alone[s])) << "trial " << trial << " segment " << s;
      }
    }
    refused += alone_words.empty() ? 0 : 1;
  }
  ::testing::Test::RecordProperty("refused", refused);
}

}  // namespace gradcomp::device::test
