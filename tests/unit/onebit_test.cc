// The 1bit codec: hand-computed messages and MXNet 1.x's quantize_1bit semantics step by
// step (residual -= 1 or += 1).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "gradcomp/error.h"
#include "gradcomp/registry.h"
#include "gradcomp/wire.h"
#include "support/test_support.h"

namespace gradcomp {
namespace {

using test::bytes_of;
using test::payload_of;
using test::same_bits;

TEST(OneBit, HandComputedMessage) {
  auto c = builtin_registry().make_codec("1bit");
  EXPECT_EQ(c->spec(), "1bit:threshold=0");
  EXPECT_EQ(c->wire_id(), 8);
  // bit = p > 0, first value in the MSB: 1 0 0 1 0 1 0 0 | 1 -> 0x94 0x80, padding.
  const std::vector<float> p = {0.5f, -0.5f, 0.0f, 1e-9f, -1e-9f, 2.0f, -2.0f, -0.0f, 3.0f};
  const auto msg = test::encode(*c, p);
  EXPECT_EQ(payload_of(msg), bytes_of({0x94, 0x80, 0x00, 0x00}));
  const std::vector<float> want = {1, -1, -1, 1, -1, 1, -1, -1, 1};
  EXPECT_EQ(test::decode(*c, msg, p.size()), want);

  std::vector<float> acc(p.size(), 0.5f);
  c->decode_add(msg, acc, 0.25f);
  for (std::size_t i = 0; i < p.size(); ++i) EXPECT_EQ(acc[i], 0.5f + 0.25f * want[i]);

  auto fb = p;
  std::vector<std::byte> fmsg(c->max_encoded_bytes(p.size()));
  fmsg.resize(c->encode_feedback(fb, {}, fmsg));
  EXPECT_EQ(fmsg, msg);
  for (std::size_t i = 0; i < p.size(); ++i) EXPECT_EQ(fb[i], p[i] - want[i]) << i;
}

TEST(OneBit, ThresholdIsStrict) {
  auto c = builtin_registry().make_codec("1bit:threshold=0.1");
  EXPECT_EQ(c->spec(), "1bit:threshold=0.1");
  // 0.1f > 0.1f is false; the next float up is true. 0 1 0 1 0 -> 0x50.
  const std::vector<float> p = {0.1f, std::nextafter(0.1f, 1.0f), -5.0f, 0.5f, 0.05f};
  EXPECT_EQ(payload_of(test::encode(*c, p)), bytes_of({0x50, 0, 0, 0}));

  auto neg = builtin_registry().make_codec("1bit:threshold=-0.5");
  const std::vector<float> q = {-0.5f, -0.4f, 0.0f, -1.0f, std::nanf("")};  // 0 1 1 0 0
  EXPECT_EQ(payload_of(test::encode(*neg, q)), bytes_of({0x60, 0, 0, 0}));
}

TEST(OneBit, ParametersAndTraits) {
  auto c = builtin_registry().make_codec("1bit");
  EXPECT_TRUE(c->traits().needs_memory);
  EXPECT_FALSE(c->traits().unbiased);
  EXPECT_FALSE(c->traits().linear);
  EXPECT_EQ(builtin_registry().make_memory("1bit", 4)->spec(), "ef(1bit:threshold=0)");
  EXPECT_THROW(builtin_registry().make_codec("1bit:threshold=inf"), InvalidArgument);
  EXPECT_THROW(builtin_registry().make_codec("1bit:threshold=1e31"), InvalidArgument);
  EXPECT_EQ(c->max_encoded_bytes(32), kHeaderBytes + 4);
  EXPECT_EQ(c->max_encoded_bytes(33), kHeaderBytes + 8);
}

// The operations of Apache MXNet 1.x's quantize_1bit / dequantize_1bit
// (src/kvstore/gradient_compression-inl.h), transcribed: one output byte per 8 values.
void mxnet_quantize_1bit_byte(int byte_id, int size, float* out, const float* grad, float* residual,
                              float threshold) {
  char* byte = reinterpret_cast<char*>(out) + byte_id;
  *byte = 0;
  const int start = byte_id << 3;
  const int end = (start + 8 <= size) ? start + 8 : size;
  const std::uint8_t bits[] = {0x80, 0x40, 0x20, 0x10, 0x08, 0x04, 0x02, 0x01};
  for (int i = start; i < end; ++i) {
    residual[i] += grad[i];
    if (residual[i] > threshold) {
      *byte = static_cast<char>(*byte | bits[i & 7]);
      residual[i] -= 1;
    } else {
      residual[i] += 1;
    }
  }
}

void mxnet_dequantize_1bit(int i, float* out, const float* in) {
  const char* byte = reinterpret_cast<const char*>(in + (i >> 5)) + ((i & 31) >> 3);
  const std::uint8_t bits[] = {0x80, 0x40, 0x20, 0x10, 0x08, 0x04, 0x02, 0x01};
  const std::uint8_t mask = bits[i & 7];
  out[i] = (static_cast<std::uint8_t>(*byte & mask) == mask) ? 1.0f : -1.0f;
}

TEST(OneBit, MatchesMxnetStepByStep) {
  for (const char* spec : {"1bit", "1bit:threshold=0.1"}) {
    const float tau = std::string(spec) == "1bit" ? 0.0f : 0.1f;
    for (std::size_t n : {std::size_t{1}, std::size_t{33}, std::size_t{1003}, std::size_t{70001}}) {
      SCOPED_TRACE(std::string(spec) + " n=" + std::to_string(n));
      auto memory = builtin_registry().make_memory(spec, n);
      std::vector<float> residual(n, 0.0f);
      // MXNet's compressed buffer is ceil(n/32) floats; it writes ceil(n/8) bytes of it.
      std::vector<float> mx_out((n + 31) / 32, 0.0f);
      std::vector<std::byte> msg(memory->max_encoded_bytes());
      for (std::uint64_t step = 0; step < 12; ++step) {
        const auto g = test::random_gradient(n, 300 + step, 0.7f);
        for (int b = 0; b < static_cast<int>((n + 7) / 8); ++b) {
          mxnet_quantize_1bit_byte(b, static_cast<int>(n), mx_out.data(), g.data(), residual.data(),
                                   tau);
        }
        const std::size_t bytes = memory->compress(g, {.step = step}, msg);
        ASSERT_EQ(bytes, kHeaderBytes + 4 * mx_out.size());
        ASSERT_EQ(0, std::memcmp(msg.data() + kHeaderBytes, mx_out.data(), 4 * mx_out.size()))
            << "step " << step;
        ASSERT_TRUE(same_bits(memory->state().at(0).data, residual)) << "step " << step;
        std::vector<float> mx_decoded(n);
        for (std::size_t i = 0; i < n; ++i) {
          mxnet_dequantize_1bit(static_cast<int>(i), mx_decoded.data(), mx_out.data());
        }
        ASSERT_TRUE(same_bits(test::decode(memory->codec(), {msg.data(), bytes}, n), mx_decoded));
      }
    }
  }
}

}  // namespace
}  // namespace gradcomp
