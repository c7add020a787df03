// Batches of the device codecs other than top-k (fp16, 2bit, 1bit, signsgd, efsign:
// src/device/codecs/checked_decode.h) against their one-tensor calls, on CPU tensors:
// every payload byte for byte, every residual and decoded output bit for bit, every
// refusal (a corrupt payload, a non-finite gradient) in the same words and for the same
// segment. Segments of sizes 0, 1, odd ones and both sides of the adaptive 2-bit's sample
// (2^20 values). The error-feedback batch (encode_batch_with_residual) of every codec,
// top-k's included, against encode_payload_with_residual.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "batch_test_support.h"
#include "device_test_support.h"
#include "gradcomp/device/codec.h"
#include "gradcomp/error.h"

namespace gradcomp::device {
namespace {

using test::contexts;
using test::decode_alone;
using test::expect_decodes_as_alone;
using test::expect_encodes_as_alone;
using test::expect_payloads;
using test::flat_gradient;
using test::gather;
using test::Gathered;
using test::name_of;
using test::outputs;
using test::same_bits;

const std::vector<std::string> kSpecs = {
    "fp16",
    "fp16:format=bf16",
    "2bit",
    "2bit:threshold=0.5",
    "2bit:threshold=0,scale=1",
    "1bit",
    "1bit:threshold=0.25",
    "signsgd",
    "efsign",
    "efsign:block=1024",
    "int:bits=7,block=1000",
    "int",
    "int:bits=2,block=7",
    "int:bits=5,block=100000",
};

// Empty, single, odd, and both sides of 2^20 (the adaptive 2-bit's sampled mean).
const std::vector<std::vector<std::int64_t>> kBatches = {
    {}, {0}, {1, 0, 2, 17}, {4099, 1, 131073, 33}, {(1 << 20) + 5, 3, (1 << 20) - 1, 0},
};
// int has no sampled statistic: sizes about its blocks (64 by default, 7, 1000) instead of
// 2^20 (whose doubles made its tests the suite's slowest).
const std::vector<std::vector<std::int64_t>> kIntBatches = {
    {}, {0}, {1, 0, 2, 17}, {4099, 1, 131073, 33}, {64, 63, 65, 7, 1000, 999, 1001, 0, 13},
};

const std::vector<std::vector<std::int64_t>>& batches_for(const std::string& spec) {
  return spec.rfind("int", 0) == 0 ? kIntBatches : kBatches;
}

// GRADCOMP_DEVICE_BATCH=1: int batches CPU tensors as whole blocks, as it batches CUDA
// tensors (the other codecs batch whatever the device).
class CheckedBatch : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { ::setenv("GRADCOMP_DEVICE_BATCH", "1", 1); }
  void TearDown() override { ::unsetenv("GRADCOMP_DEVICE_BATCH"); }
};

TEST_P(CheckedBatch, EncodesWhatEachSegmentEncodesAlone) {
  const test::CodecPair c = test::make_codec_pair(GetParam());
  ASSERT_TRUE(c.dev->batches());
  at::manual_seed(7);
  for (const std::vector<std::int64_t>& sizes : batches_for(GetParam())) {
    for (int kind = 0; kind < 5; ++kind) {
      for (const bool feedback : {true, false}) {
        expect_encodes_as_alone(*c.dev, flat_gradient(sizes, kind), sizes,
                                contexts(sizes.size(), 0), feedback,
                                "batch of " + std::to_string(sizes.size()) + " kind " +
                                    std::to_string(kind) + (feedback ? " feedback" : ""));
      }
    }
  }
}

TEST_P(CheckedBatch, DecodesWhatEachPayloadDecodesAlone) {
  const test::CodecPair c = test::make_codec_pair(GetParam());
  at::manual_seed(9);
  expect_decodes_as_alone(*c.dev, batches_for(GetParam()));
}

// The words of the first refusal of decode_alone, or "" where it accepts every payload.
std::string alone_refusal(const DeviceCodec& codec, const Gathered& g,
                          const std::vector<std::int64_t>& sizes) {
  try {
    decode_alone(codec, g, outputs(sizes), 0.5f);
  } catch (const CorruptMessage& e) {
    return e.what();
  }
  return "";
}

TEST_P(CheckedBatch, RefusesWhatTheOnePayloadDecodeRefusesInItsWords) {
  const test::CodecPair c = test::make_codec_pair(GetParam());
  at::manual_seed(13);
  // Segments: one of 4099 values (3 codes in the last byte: padding for every layout), 17,
  // and 64 (whole words: no padding).
  const std::vector<std::int64_t> sizes = {4099, 17, 64};
  const Gathered clean = gather(*c.dev, sizes, 2);
  // (payload, byte (negative: from its end), value): a scale or threshold made NaN or
  // negative, a half made inf/NaN, codes 01, padding bits set.
  struct Mutation {
    std::size_t payload;
    std::int64_t byte;
    int value;
  };
  const std::vector<std::vector<Mutation>> cases = {
      {{0, 3, 0xFF}},
      {{1, 3, 0x80}},
      {{4, 1, 0x7F}},
      {{3, 0, 0x55}},
      {{0, -1, 0xFF}},
      {{4, -1, 0x01}},
      {{5, 0, 0xFF}},
      {{2, -1, 0xFF}},
      // Two corrupt payloads: rank 1's of segment 0 comes first in segment-major order.
      {{3, -1, 0xFF}, {1, -1, 0xFF}},
      {{4, 1, 0x7F}, {3, 1, 0x7F}},
  };
  int refused = 0;
  for (const std::vector<Mutation>& mutations : cases) {
    Gathered g = clean;
    g.payloads = clean.payloads.clone();
    for (const Mutation& m : mutations) {
      const std::int64_t at = m.byte >= 0 ? m.byte : clean.bytes[m.payload] + m.byte;
      if (at < 0 || at >= clean.bytes[m.payload]) continue;
      g.payloads[clean.offsets[m.payload] + at] = m.value;
    }
    const std::string alone_words = alone_refusal(*c.dev, g, sizes);
    try {
      c.dev->decode_batch(g.payloads, g.offsets, g.bytes, outputs(sizes), 0.5f);
      EXPECT_EQ(alone_words, "") << "the batch accepted what one at a time refuses";
    } catch (const CorruptMessage& e) {
      EXPECT_EQ(std::string(e.what()), alone_words);
      ++refused;
    }
  }
  EXPECT_GE(refused, 2) << "the mutations missed the format's checks";
  // A payload cut short.
  Gathered cut = clean;
  cut.bytes[2] -= 4;
  EXPECT_THROW(c.dev->decode_batch(cut.payloads, cut.offsets, cut.bytes, outputs(sizes), 1.0f),
               CorruptMessage);
}

TEST_P(CheckedBatch, RandomlyMutatedBatchesAreDecodedAsOnePayloadAtATime) {
  const test::CodecPair c = test::make_codec_pair(GetParam());
  at::manual_seed(17);
  test::expect_mutated_batches_as_alone(*c.dev, {257, 33, 1, 0, 4099}, 200, 5);
}

TEST_P(CheckedBatch, TreatsANonFiniteGradientAsTheFirstSegmentHoldingOneDoes) {
  const test::CodecPair c = test::make_codec_pair(GetParam());
  const std::vector<std::int64_t> sizes = {1000, (1 << 20) + 7, 17, 4099};
  const std::int64_t total = 1000 + (1 << 20) + 7 + 17 + 4099;
  // Positions: segment 0's last, one inside the big segment (the adaptive 2-bit's sampled
  // mean), segment 2's first, segment 3's.
  for (const float bad :
       {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    for (const std::int64_t where : {std::int64_t{999}, std::int64_t{1000 + 4567},
                                     std::int64_t{1000 + (1 << 20) + 7}, std::int64_t{total - 2}}) {
      at::Tensor flat = at::randn({total});
      flat[where] = bad;
      flat[where + 1] = -bad;  // a later one, in the same segment or the next
      for (const bool feedback : {false, true}) {
        std::string alone_words;
        std::int64_t offset = 0;
        const std::vector<StepContext> ctxs = contexts(sizes.size(), 0);
        const at::Tensor alone_x = flat.clone();
        for (std::size_t s = 0; s < sizes.size() && alone_words.empty(); ++s) {
          const at::Tensor segment = alone_x.narrow(0, offset, sizes[s]);
          try {
            (void)(feedback ? c.dev->encode_payload_feedback(segment, ctxs[s])
                            : c.dev->encode_payload(segment, ctxs[s]));
          } catch (const InvalidArgument& e) {
            alone_words = e.what();
          }
          offset += sizes[s];
        }
        std::string batch_words;
        try {
          (void)c.dev->encode_batch(flat.clone(), sizes, ctxs, feedback);
        } catch (const InvalidArgument& e) {
          batch_words = e.what();
        }
        EXPECT_EQ(batch_words, alone_words) << "non-finite at " << where;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Specs, CheckedBatch, ::testing::ValuesIn(kSpecs),
                         [](const ::testing::TestParamInfo<std::string>& p) {
                           return name_of(p.param);
                         });

// encode_batch_with_residual: e <- e + g and the feedback step, segment by segment, as
// encode_payload_with_residual writes them (the codecs that fuse e + g into their pass,
// and top-k, which adds once for the whole batch).
class ResidualBatch : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { ::setenv("GRADCOMP_DEVICE_BATCH", "1", 1); }
  void TearDown() override { ::unsetenv("GRADCOMP_DEVICE_BATCH"); }
};

TEST_P(ResidualBatch, StepsEachResidualAsTheOneTensorCallDoes) {
  const test::CodecPair c = test::make_codec_pair(GetParam());
  at::manual_seed(21);
  for (const std::vector<std::int64_t>& sizes : batches_for(GetParam())) {
    for (int kind = 0; kind < 5; ++kind) {
      const at::Tensor g = flat_gradient(sizes, kind);
      const at::Tensor e = flat_gradient(sizes, kind + 1).mul_(0.5);
      const std::vector<StepContext> ctxs = contexts(sizes.size(), 1);
      const std::string where =
          "batch of " + std::to_string(sizes.size()) + " kind " + std::to_string(kind);
      const at::Tensor batch_e = e.clone();
      const at::Tensor alone_e = e.clone();
      const DeviceCodec::EncodedBatch batch =
          c.dev->encode_batch_with_residual(g, batch_e, sizes, ctxs);
      expect_payloads(
          batch, sizes,
          [&](std::int64_t offset, std::size_t s) {
            return c.dev->encode_payload_with_residual(
                g.narrow(0, offset, sizes[s]), alone_e.narrow(0, offset, sizes[s]), ctxs[s]);
          },
          where);
      ASSERT_TRUE(same_bits(batch_e, alone_e)) << where;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Specs, ResidualBatch,
                         ::testing::Values("fp16", "2bit", "2bit:threshold=0.5", "1bit", "signsgd",
                                           "efsign:block=1024", "int", "topk",
                                           "topk:ratio=0.01,select=sampled,values=fp16"),
                         [](const ::testing::TestParamInfo<std::string>& p) {
                           return name_of(p.param);
                         });

TEST(DeviceBatch, EveryDeviceCodecBatches) {
  for (const std::string& name : device_codec_names()) {
    EXPECT_TRUE(test::make_codec_pair(name).dev->batches()) << name;
  }
}

}  // namespace
}  // namespace gradcomp::device
