// The 2bit codec: hand-computed messages, MXNet semantics step by step against a
// transcription of MXNet's quantize_2bit / dequantize_2bit loops, parameters and traits.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "detail/abs_sample.h"
#include "detail/bitpack.h"
#include "gradcomp/error.h"
#include "gradcomp/registry.h"
#include "gradcomp/rng.h"
#include "gradcomp/wire.h"
#include "support/test_support.h"

namespace gradcomp {
namespace {

using test::bytes_of;
using test::payload_of;
using test::same_bits;

// tau = 0.5. Codes: 11 for p >= 0.5, 10 for p <= -0.5, else 00; four per byte, first
// value in the top two bits.
const std::vector<float> kHandInput = {
    0.6f,       -0.7f,       0.1f,   0.5f,    // 11 10 00 11 = 0xE3
    -0.5f,      0.49f,       -0.49f, 2.0f,    // 10 00 00 11 = 0x83
    -3.0f,      0.0f,        -0.0f,  0.25f,   // 10 00 00 00 = 0x80
    0.5000001f, -0.4999999f, 1e-8f,  -1e30f,  // 11 00 00 10 = 0xC2
    0.7f,       -0.7f};                       // 11 10 then padding 00 00 = 0xE0, 3 zero bytes
const std::vector<float> kHandDecoded = {0.5f, -0.5f, 0.0f, 0.5f, -0.5f, 0.0f, 0.0f,  0.5f, -0.5f,
                                         0.0f, 0.0f,  0.0f, 0.5f, 0.0f,  0.0f, -0.5f, 0.5f, -0.5f};

TEST(TwoBit, HandComputedMessage) {
  auto c = builtin_registry().make_codec("2bit:threshold=0.5");
  EXPECT_EQ(c->spec(), "2bit:threshold=0.5,scale=2");
  EXPECT_EQ(c->wire_id(), 7);
  const auto msg = test::encode(*c, kHandInput);
  ASSERT_EQ(msg.size(), kHeaderBytes + 8);
  EXPECT_EQ(payload_of(msg), bytes_of({0xE3, 0x83, 0x80, 0xC2, 0xE0, 0x00, 0x00, 0x00}));
  const WireHeader h = read_header(msg, "test");
  EXPECT_EQ(h.codec_id, 7);
  EXPECT_EQ(h.elements, 18u);
  EXPECT_EQ(h.payload_bytes, 8u);
  EXPECT_EQ(h.config_tag, fnv1a32("2bit:threshold=0.5,scale=2"));

  const auto d = test::decode(*c, msg, kHandInput.size());
  EXPECT_EQ(d, kHandDecoded);

  // decode_add accumulates alpha * value.
  std::vector<float> acc(kHandInput.size(), 1.0f);
  c->decode_add(msg, acc, -2.0f);
  for (std::size_t i = 0; i < acc.size(); ++i)
    EXPECT_EQ(acc[i], 1.0f - 2.0f * kHandDecoded[i]) << i;
}

TEST(TwoBit, FusedFeedbackLeavesTheResidual) {
  auto c = builtin_registry().make_codec("2bit:threshold=0.5");
  auto p = kHandInput;
  std::vector<std::byte> msg(c->max_encoded_bytes(p.size()));
  msg.resize(c->encode_feedback(p, {}, msg));
  EXPECT_EQ(payload_of(msg), bytes_of({0xE3, 0x83, 0x80, 0xC2, 0xE0, 0x00, 0x00, 0x00}));
  // p - tau, p + tau or p, in float.
  EXPECT_EQ(p[0], 0.6f - 0.5f);
  EXPECT_EQ(p[1], -0.7f + 0.5f);
  EXPECT_EQ(p[2], 0.1f);
  EXPECT_EQ(p[3], 0.0f);
  EXPECT_EQ(p[4], 0.0f);
  EXPECT_EQ(p[7], 1.5f);
  EXPECT_EQ(p[8], -2.5f);
  EXPECT_EQ(p[12], 0.5000001f - 0.5f);
  EXPECT_EQ(p[15], -1e30f);
  for (std::size_t i = 0; i < p.size(); ++i) EXPECT_EQ(p[i], kHandInput[i] - kHandDecoded[i]) << i;
}

TEST(TwoBit, OtherThresholds) {
  auto c = builtin_registry().make_codec("2bit:threshold=0.25");
  const std::vector<float> p = {0.25f, 0.2499f, -0.25f, -0.3f, 0.3f};  // 11 00 10 10 | 11
  const auto msg = test::encode(*c, p);
  EXPECT_EQ(payload_of(msg), bytes_of({0xCA, 0xC0, 0x00, 0x00}));
  EXPECT_EQ(test::decode(*c, msg, p.size()),
            (std::vector<float>{0.25f, 0.0f, -0.25f, -0.25f, 0.25f}));

  // A message encoded with another threshold is rejected by the header's config tag.
  auto other = builtin_registry().make_codec("2bit:threshold=1");
  std::vector<float> out(p.size(), 0.0f);
  EXPECT_THROW(other->decode_add(msg, out), CorruptMessage);
}

TEST(TwoBit, ParametersAndTraits) {
  auto c = builtin_registry().make_codec("2bit");
  EXPECT_EQ(c->spec(), "2bit:threshold=0,scale=2");  // the adaptive default
  EXPECT_TRUE(c->traits().needs_memory);
  EXPECT_FALSE(c->traits().unbiased);
  EXPECT_FALSE(c->traits().linear);
  EXPECT_FALSE(c->traits().stochastic);
  EXPECT_EQ(builtin_registry().make_memory("2bit", 10)->spec(), "ef(2bit:threshold=0,scale=2)");
  EXPECT_EQ(builtin_registry().make_memory("2bit:threshold=0.5", 10)->spec(),
            "ef(2bit:threshold=0.5,scale=2)");
  EXPECT_THROW(builtin_registry().make_codec("2bit:threshold=-0.5"), InvalidArgument);
  EXPECT_THROW(builtin_registry().make_codec("2bit:threshold=nan"), InvalidArgument);
  EXPECT_THROW(builtin_registry().make_codec("2bit:scale=0"), InvalidArgument);
  EXPECT_THROW(builtin_registry().make_codec("2bit:scale=-1"), InvalidArgument);
  EXPECT_THROW(builtin_registry().make_codec("2bit:tau=0.5"), InvalidArgument);
  // Adaptive: tau (fp32) before the codes; fixed: the codes alone.
  EXPECT_EQ(c->max_encoded_bytes(0), kHeaderBytes + 4);
  EXPECT_EQ(c->max_encoded_bytes(16), kHeaderBytes + 8);
  EXPECT_EQ(c->max_encoded_bytes(17), kHeaderBytes + 12);
  auto fixed = builtin_registry().make_codec("2bit:threshold=0.5");
  EXPECT_EQ(fixed->max_encoded_bytes(0), kHeaderBytes);
  EXPECT_EQ(fixed->max_encoded_bytes(16), kHeaderBytes + 4);
  EXPECT_EQ(fixed->max_encoded_bytes(17), kHeaderBytes + 8);
  // A fixed threshold below fp32's range stays a fixed threshold.
  auto tiny = builtin_registry().make_codec("2bit:threshold=1e-50");
  EXPECT_EQ(tiny->max_encoded_bytes(16), kHeaderBytes + 4);
}

// ---- adaptive tau ---------------------------------------------------------------------
// The reference: tau = fp32(scale * sum|p| / n) with the sum in double (the order does
// not matter for these inputs, whose sums are exact), codes as MXNet's with that tau;
// tau = 0 sends nothing.
struct RefMessage {
  float tau = 0;
  std::vector<std::uint8_t> codes;  // 0, 2 (10) or 3 (11) per element
  std::vector<float> residual;      // p - decode
};

RefMessage reference_adaptive(const std::vector<float>& p, double scale) {
  RefMessage m;
  double sum = 0;
  for (const float x : p) sum += std::abs(static_cast<double>(x));
  m.tau = p.empty() ? 0.0f : static_cast<float>(scale * sum / static_cast<double>(p.size()));
  m.residual = p;
  for (float& x : m.residual) {
    std::uint8_t code = 0;
    if (m.tau > 0.0f && x >= m.tau) {
      code = 3;
      x -= m.tau;
    } else if (m.tau > 0.0f && x <= -m.tau) {
      code = 2;
      x += m.tau;
    }
    m.codes.push_back(code);
  }
  return m;
}

std::vector<std::byte> reference_payload(const RefMessage& m) {
  std::vector<std::byte> out(4 + detail::packed2_bytes(m.codes.size()), std::byte{0});
  store_le<float>(out.data(), m.tau);
  detail::pack2_ref(m.codes.data(), m.codes.size(), out.data() + 4);
  return out;
}

TEST(TwoBitAdaptive, HandComputedMessage) {
  auto c = builtin_registry().make_codec("2bit:scale=1");
  // mean |p| = (1 + 0.5 + 0.25 + 0.25 + 3 + 0) / 6 = 0.8333...: only 1 and 3 are sent.
  const std::vector<float> p = {1.0f, -0.5f, 0.25f, -0.25f, 3.0f, 0.0f};
  const auto msg = test::encode(*c, p);
  ASSERT_EQ(msg.size(), kHeaderBytes + 8);
  const float tau = static_cast<float>(5.0 / 6.0);
  const std::vector<std::byte> payload = payload_of(msg);
  EXPECT_EQ(load_le<float>(payload.data()), tau);
  // codes 11 00 00 00 | 11 00 = 0xC0, 0xC0
  EXPECT_EQ(std::vector<std::byte>(payload.begin() + 4, payload.end()),
            bytes_of({0xC0, 0xC0, 0x00, 0x00}));
  EXPECT_EQ(read_header(msg, "test").config_tag, fnv1a32("2bit:threshold=0,scale=1"));
  EXPECT_EQ(test::decode(*c, msg, p.size()),
            (std::vector<float>{tau, 0.0f, 0.0f, 0.0f, tau, 0.0f}));
  // The default, scale=2: tau = 1.6667: only 3 is sent.
  auto c2 = builtin_registry().make_codec("2bit");
  const auto msg2 = test::encode(*c2, p);
  const float tau2 = static_cast<float>(2.0 * 5.0 / 6.0);
  EXPECT_EQ(read_header(msg2, "test").config_tag, fnv1a32("2bit:threshold=0,scale=2"));
  EXPECT_EQ(test::decode(*c2, msg2, p.size()),
            (std::vector<float>{0.0f, 0.0f, 0.0f, 0.0f, tau2, 0.0f}));
  // scale=0.25: tau = 0.2083: everything but the zero is sent.
  auto c4 = builtin_registry().make_codec("2bit:scale=0.25");
  const auto msg4 = test::encode(*c4, p);
  const float tau4 = static_cast<float>(0.25 * 5.0 / 6.0);
  EXPECT_EQ(test::decode(*c4, msg4, p.size()),
            (std::vector<float>{tau4, -tau4, tau4, -tau4, tau4, 0.0f}));
  // Another scale is another codec: the config tag rejects it.
  std::vector<float> out(p.size(), 0.0f);
  EXPECT_THROW(c->decode_add(msg4, out), CorruptMessage);
}

TEST(TwoBitAdaptive, MatchesTheReferenceOnEverySize) {
  for (const double scale : {1.0, 2.0, 0.5}) {
    auto memory =
        builtin_registry().make_memory("2bit:scale=" + std::string(scale == 1.0   ? "1"
                                                                   : scale == 2.0 ? "2"
                                                                                  : "0.5"),
                                       1);
    for (const std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{3}, std::size_t{17},
                                std::size_t{1003}, std::size_t{70001}}) {
      SCOPED_TRACE("scale=" + std::to_string(scale) + " n=" + std::to_string(n));
      auto mem =
          builtin_registry().make_memory(memory->spec().substr(3, memory->spec().size() - 4), n);
      const Codec& codec = mem->codec();
      std::vector<float> residual(n, 0.0f);
      std::vector<std::byte> msg(mem->max_encoded_bytes());
      for (std::uint64_t step = 0; step < 6; ++step) {
        // Dyadic values: every sum is exact, whatever the order.
        std::vector<float> g(n);
        for (std::size_t i = 0; i < n; ++i) {
          g[i] = std::ldexp(
              static_cast<float>(static_cast<int>((i * 7919 + step * 104729) % 257) - 128), -10);
        }
        std::vector<float> p(n);
        for (std::size_t i = 0; i < n; ++i) p[i] = residual[i] + g[i];
        const RefMessage ref = reference_adaptive(p, scale);
        const std::size_t bytes = mem->compress(g, {.seed = 1, .step = step}, msg);
        ASSERT_EQ(bytes, kHeaderBytes + 4 + detail::packed2_bytes(n));
        const auto want = reference_payload(ref);
        ASSERT_EQ(0, std::memcmp(msg.data() + kHeaderBytes, want.data(), want.size()))
            << "step " << step;
        residual = ref.residual;
        ASSERT_TRUE(same_bits(mem->state().at(0).data, residual)) << "step " << step;
        const auto decoded = test::decode(codec, {msg.data(), bytes}, n);
        for (std::size_t i = 0; i < n; ++i) {
          ASSERT_EQ(decoded[i], ref.codes[i] == 3   ? ref.tau
                                : ref.codes[i] == 2 ? -ref.tau
                                                    : 0.0f)
              << i;
        }
      }
    }
  }
}

TEST(TwoBitAdaptive, ZeroGradientSendsNothingAndNonFiniteIsRejected) {
  auto c = builtin_registry().make_codec("2bit");
  const std::vector<float> zeros(5, 0.0f);
  const auto msg = test::encode(*c, zeros);
  EXPECT_EQ(payload_of(msg), bytes_of({0, 0, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(test::decode(*c, msg, zeros.size()), zeros);
  std::vector<std::byte> out(c->max_encoded_bytes(2));
  EXPECT_THROW(c->encode(std::vector<float>{std::nanf(""), 1.0f}, {}, out), InvalidArgument);
  EXPECT_THROW(c->encode(std::vector<float>{std::numeric_limits<float>::infinity(), 1.0f}, {}, out),
               InvalidArgument);
}

// ---- adaptive tau on large messages: the stratified sample ----------------------------
// The sample's positions, from abs_sample.h's definition (not from its code).
std::vector<std::size_t> sample_positions(std::size_t n) {
  std::vector<std::size_t> at;
  const std::size_t stratum = n / 4096;
  for (std::size_t j = 0; j < 4096; ++j) {
    const std::uint64_t h = detail::splitmix64(n * 0x9E3779B97F4A7C15ull + j);
    const std::size_t start = j * stratum + 16 * static_cast<std::size_t>(h % (stratum / 16));
    for (std::size_t l = 0; l < 16; ++l) at.push_back(start + l);
  }
  return at;
}

// From 2^20 values on, tau = fp32(scale * mean |p| over the sample); codes and residual
// as MXNet's with that tau; the fused memory path gives the same message and residual.
TEST(TwoBitAdaptive, LargeMessagesTakeTauFromTheSample) {
  for (const std::size_t n :
       {std::size_t{1} << 20, (std::size_t{1} << 20) + 3, std::size_t{3'000'017}}) {
    SCOPED_TRACE("n=" + std::to_string(n));
    // Dyadic values: the sample's sum is exact in any order.
    std::vector<float> p(n);
    for (std::size_t i = 0; i < n; ++i) {
      p[i] = std::ldexp(static_cast<float>(static_cast<int>((i * 7919) % 1021) - 510), -12);
    }
    double sum = 0;
    for (const std::size_t i : sample_positions(n)) {
      ASSERT_LT(i, n);
      sum += std::abs(static_cast<double>(p[i]));
    }
    const float tau = static_cast<float>(2.0 * sum / 65536.0);
    std::vector<float> residual = p;
    std::vector<std::uint8_t> codes(n);
    for (std::size_t i = 0; i < n; ++i) {
      if (residual[i] >= tau) {
        codes[i] = 3;
        residual[i] -= tau;
      } else if (residual[i] <= -tau) {
        codes[i] = 2;
        residual[i] += tau;
      }
    }
    std::vector<std::byte> want(4 + detail::packed2_bytes(n));
    store_le<float>(want.data(), tau);
    detail::pack2_ref(codes.data(), n, want.data() + 4);

    const auto codec = builtin_registry().make_codec("2bit");
    const auto msg = test::encode(*codec, p);
    ASSERT_EQ(0, std::memcmp(msg.data() + kHeaderBytes, want.data(), want.size()));
    // ef(2bit) from a zero residual: p is the gradient; one fused pass.
    auto mem = builtin_registry().make_memory("2bit", n);
    std::vector<std::byte> out(mem->max_encoded_bytes());
    ASSERT_EQ(mem->compress(p, {.seed = 1, .step = 0}, out), msg.size());
    ASSERT_EQ(0, std::memcmp(out.data() + kHeaderBytes, want.data(), want.size()));
    ASSERT_TRUE(same_bits(mem->state().at(0).data, residual));
  }
}

// The sample's mean against the exact mean, on gradients shaped like a first layer's: a
// 784-input weight gradient whose border-pixel columns are all zero (Fashion-MNIST's
// empty border), with heavy-tailed entries; and the same with every 97th row 50x larger
// (a third of the mass in 1% of the rows, each row only ~3 runs of the sample): the
// estimate's worst case here.
TEST(TwoBitAdaptive, TheSampledMeanIsCloseToTheExactMean) {
  for (const bool large_rows : {false, true}) {
    for (const std::size_t rows : {std::size_t{1536}, std::size_t{2049}}) {
      const std::size_t cols = 784, n = rows * cols;
      auto g = test::random_gradient(n, rows);
      for (std::size_t r = 0; r < rows; ++r) {
        for (std::size_t c = 0; c < cols; ++c) {
          const std::size_t x = c % 28, y = c / 28;
          float& v = g[r * cols + c];
          if (x < 3 || x > 24 || y < 2 || y > 25) v = 0.0f;  // the border is never lit
          if ((r * cols + c) % 101 == 0) v *= 30.0f;         // heavy tail
          if (large_rows && r % 97 == 0) v *= 50.0f;
        }
      }
      double exact = 0;
      for (const float v : g) exact += std::abs(static_cast<double>(v));
      exact /= static_cast<double>(n);
      const double sampled = detail::sampled_abs_sum(g.data(), n) / 65536.0;
      // Measured: 0.99 and 1.03 without the large rows, 1.06 and 1.08 with them; tau moves
      // accuracy only at factors of 1.5 (scale 2 against 3: docs/algorithms/quantization.md).
      EXPECT_NEAR(sampled / exact, 1.0, large_rows ? 0.1 : 0.05)
          << rows << " rows, large rows " << large_rows;
    }
  }
}

// A non-finite value the sample does not see is still rejected, on every path.
TEST(TwoBitAdaptive, ANonFiniteOutsideTheSampleIsRejected) {
  const std::size_t n = (std::size_t{1} << 20) + 3;
  std::vector<bool> in_sample(n, false);
  for (const std::size_t i : sample_positions(n)) in_sample[i] = true;
  std::size_t at = n / 3;
  while (in_sample[at]) ++at;
  const auto codec = builtin_registry().make_codec("2bit");
  std::vector<std::byte> out(codec->max_encoded_bytes(n));
  for (const float bad :
       {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    auto g = test::random_gradient(n, 4);
    g[at] = bad;
    EXPECT_THROW(codec->encode(g, {}, out), InvalidArgument);
    auto p = g;
    EXPECT_THROW(codec->encode_feedback(p, {}, out), InvalidArgument);
    auto mem = builtin_registry().make_memory("2bit", n);
    std::vector<std::byte> msg(mem->max_encoded_bytes());
    EXPECT_THROW(mem->compress(g, {.seed = 1, .step = 0}, msg), InvalidArgument);
  }
}

// ---- MXNet ----------------------------------------------------------------------------
// The operations of Apache MXNet 1.x's 2-bit kernels (src/kvstore/gradient_compression-inl.h,
// quantize_2bit / dequantize_2bit), transcribed: one output float (16 codes) per block,
// the residual updated in place, neg_threshold = -tau.

void mxnet_quantize_2bit_block(int block, int size, float* out, const float* grad, float* residual,
                               float neg_threshold, float pos_threshold) {
  float* compressed = out + block;
  *compressed = 0;
  const int start = block << 4;
  const int end = (start + 16 <= size) ? start + 16 : size;
  char* bytes = reinterpret_cast<char*>(compressed);
  const std::uint8_t pos_bits[] = {0xc0, 0x30, 0x0c, 0x03};
  const std::uint8_t neg_bits[] = {0x80, 0x20, 0x08, 0x02};
  for (int i = start; i < end; ++i) {
    char* byte = bytes + ((i - start) >> 2);
    residual[i] += grad[i];
    if (residual[i] >= pos_threshold) {
      *byte = static_cast<char>(*byte | pos_bits[i & 3]);
      residual[i] -= pos_threshold;
    } else if (residual[i] <= neg_threshold) {
      *byte = static_cast<char>(*byte | neg_bits[i & 3]);
      residual[i] -= neg_threshold;
    }
  }
}

void mxnet_dequantize_2bit(int i, float* out, const float* in, float neg_threshold,
                           float pos_threshold) {
  const char* byte = reinterpret_cast<const char*>(in + (i >> 4)) + ((i & 15) >> 2);
  const std::uint8_t pos_bits[] = {0xc0, 0x30, 0x0c, 0x03};
  const std::uint8_t neg_bits[] = {0x80, 0x20, 0x08, 0x02};
  const std::uint8_t mask = pos_bits[i & 3];
  const std::uint8_t masked = static_cast<std::uint8_t>(*byte & mask);
  if (masked == mask) {
    out[i] = pos_threshold;
  } else if (masked == neg_bits[i & 3]) {
    out[i] = neg_threshold;
  } else {
    out[i] = 0;
  }
}

TEST(TwoBit, MatchesMxnetStepByStep) {
  for (float tau : {0.5f, 0.25f, 1.0f}) {
    for (std::size_t n : {std::size_t{1}, std::size_t{17}, std::size_t{1003}, std::size_t{70001}}) {
      SCOPED_TRACE("tau=" + std::to_string(tau) + " n=" + std::to_string(n));
      auto memory =
          builtin_registry().make_memory("2bit:threshold=" + std::string(tau == 0.5f    ? "0.5"
                                                                         : tau == 0.25f ? "0.25"
                                                                                        : "1"),
                                         n);
      const Codec& codec = memory->codec();
      std::vector<float> residual(n, 0.0f);
      const int blocks = static_cast<int>((n + 15) / 16);
      std::vector<float> mx_out(static_cast<std::size_t>(blocks));
      std::vector<std::byte> msg(memory->max_encoded_bytes());
      for (std::uint64_t step = 0; step < 12; ++step) {
        auto g = test::random_gradient(n, 100 + step, 0.4f);
        if (n > 8) g[5] = tau;  // exact threshold hits
        for (int b = 0; b < blocks; ++b) {
          mxnet_quantize_2bit_block(b, static_cast<int>(n), mx_out.data(), g.data(),
                                    residual.data(), -tau, tau);
        }
        const std::size_t bytes = memory->compress(g, {.seed = 1, .step = step}, msg);
        ASSERT_EQ(bytes, kHeaderBytes + 4 * mx_out.size());
        ASSERT_EQ(0, std::memcmp(msg.data() + kHeaderBytes, mx_out.data(), 4 * mx_out.size()))
            << "step " << step;
        ASSERT_TRUE(same_bits(memory->state().at(0).data, residual)) << "step " << step;

        std::vector<float> mx_decoded(n);
        for (std::size_t i = 0; i < n; ++i) {
          mxnet_dequantize_2bit(static_cast<int>(i), mx_decoded.data(), mx_out.data(), -tau, tau);
        }
        const auto decoded = test::decode(codec, {msg.data(), bytes}, n);
        ASSERT_TRUE(same_bits(decoded, mx_decoded)) << "step " << step;
      }
    }
  }
}

TEST(TwoBit, NanEncodesAsZeroCode) {
  auto c = builtin_registry().make_codec("2bit:threshold=0.5");
  const std::vector<float> p = {std::nanf(""), 1.0f};
  const auto msg = test::encode(*c, p);
  EXPECT_EQ(payload_of(msg), bytes_of({0x30, 0, 0, 0}));
}

}  // namespace
}  // namespace gradcomp
