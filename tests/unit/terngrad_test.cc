// The terngrad codec: payload against a literal transcription of the algorithm (s, the
// Bernoulli draws of the per-rank counter RNG), clipping, zero gradients, traits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

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

// TernGrad, literally: s = max|clip(g)|, code_i = 11/10 if uniform(i) < |clip(g_i)|/s.
std::vector<std::byte> expected_payload(const std::vector<float>& g, const StepContext& ctx,
                                        float bound = std::numeric_limits<float>::infinity()) {
  float s = 0.0f;
  for (float v : g) s = std::max(s, std::min(std::fabs(v), bound));
  const CounterRng rng = CounterRng::for_step(ctx, RngScope::kPerRank);
  std::vector<std::uint8_t> codes(g.size(), 0);
  if (s > 0.0f) {
    for (std::size_t i = 0; i < g.size(); ++i) {
      const float a = std::min(std::fabs(g[i]), bound);
      if (rng.uniform(static_cast<std::uint32_t>(i)) < a / s) codes[i] = g[i] > 0 ? 3 : 2;
    }
  }
  std::vector<std::byte> out(4 + detail::packed2_bytes(g.size()));
  std::memcpy(out.data(), &s, 4);
  detail::pack2_ref(codes.data(), g.size(), out.data() + 4);
  return out;
}

TEST(TernGrad, HandComputedMessage) {
  auto c = builtin_registry().make_codec("terngrad");
  EXPECT_EQ(c->spec(), "terngrad:clip=0");
  EXPECT_EQ(c->wire_id(), 10);
  // s = 1; the two elements with |g| = s are always sent (uniform < 1), zeros never.
  const std::vector<float> g = {0.5f, -1.0f, 0.0f, 0.25f, -0.0f, 1.0f};
  const StepContext ctx{.seed = 42, .step = 3, .rank = 1, .bucket = 0};
  const auto msg = test::encode(*c, g, ctx);
  ASSERT_EQ(msg.size(), kHeaderBytes + 4 + 4);
  EXPECT_EQ(load_le<float>(msg.data() + kHeaderBytes), 1.0f);
  const std::byte* codes = msg.data() + kHeaderBytes + 4;
  EXPECT_EQ(detail::code2_at(codes, 1), 2u);
  EXPECT_EQ(detail::code2_at(codes, 2), 0u);
  EXPECT_EQ(detail::code2_at(codes, 4), 0u);
  EXPECT_EQ(detail::code2_at(codes, 5), 3u);
  EXPECT_EQ(payload_of(msg), expected_payload(g, ctx));
  const auto d = test::decode(*c, msg, g.size());
  EXPECT_EQ(d[1], -1.0f);
  EXPECT_EQ(d[5], 1.0f);
  for (std::size_t i = 0; i < g.size(); ++i) EXPECT_TRUE(d[i] == 0.0f || std::fabs(d[i]) == 1.0f);
}

TEST(TernGrad, MatchesTheAlgorithmAcrossSizes) {
  auto c = builtin_registry().make_codec("terngrad");
  for (std::size_t n : {1u, 15u, 16u, 17u, 33u, 1000u, 65539u, 200003u}) {
    SCOPED_TRACE("n=" + std::to_string(n));
    const auto g = test::random_gradient(n, n, 0.01f);
    const StepContext ctx{.seed = 7, .step = n, .rank = 2, .bucket = 5};
    EXPECT_EQ(payload_of(test::encode(*c, g, ctx)), expected_payload(g, ctx));
  }
}

TEST(TernGrad, RandomnessIsPerRankAndPerStep) {
  auto c = builtin_registry().make_codec("terngrad");
  const auto g = test::random_gradient(1000, 1);
  const StepContext a{.seed = 1, .step = 2, .rank = 0, .bucket = 3};
  auto b = a;
  b.rank = 1;
  auto s = a;
  s.step = 3;
  EXPECT_EQ(test::encode(*c, g, a), test::encode(*c, g, a));
  EXPECT_NE(test::encode(*c, g, a), test::encode(*c, g, b));
  EXPECT_NE(test::encode(*c, g, a), test::encode(*c, g, s));
}

TEST(TernGrad, ZeroGradientSendsZeroScaleAndNoCodes) {
  auto c = builtin_registry().make_codec("terngrad");
  for (std::size_t n : {0u, 1u, 17u, 100u}) {
    std::vector<float> g(n, 0.0f);
    if (n > 2) g[2] = -0.0f;
    const auto msg = test::encode(*c, g);
    ASSERT_EQ(msg.size(), kHeaderBytes + 4 + detail::packed2_bytes(n));
    for (std::size_t i = kHeaderBytes; i < msg.size(); ++i) EXPECT_EQ(msg[i], std::byte{0}) << i;
    std::vector<float> out(n, 3.0f);
    c->decode_add(msg, out);
    for (float v : out) EXPECT_EQ(v, 3.0f);
  }
}

TEST(TernGrad, ClippingAtAMultipleOfTheStandardDeviation) {
  auto c = builtin_registry().make_codec("terngrad:clip=2.5");
  EXPECT_FALSE(c->traits().unbiased);
  EXPECT_TRUE(builtin_registry().make_codec("terngrad")->traits().unbiased);
  const std::size_t n = 5000;
  auto g = test::random_gradient(n, 77);
  g[10] = 50.0f;
  g[20] = -40.0f;
  double mean = 0;
  for (float v : g) mean += v;
  mean /= n;
  double var = 0;
  for (float v : g) var += (v - mean) * (v - mean);
  const double bound = 2.5 * std::sqrt(var / n);
  ASSERT_LT(bound, 40.0);

  const StepContext ctx{.seed = 9, .step = 1};
  const auto msg = test::encode(*c, g, ctx);
  const float s = load_le<float>(msg.data() + kHeaderBytes);
  EXPECT_NEAR(s, bound, 1e-5 * bound);
  // Everything at or beyond the bound is sent with its sign.
  const std::byte* codes = msg.data() + kHeaderBytes + 4;
  for (std::size_t i = 0; i < n; ++i) {
    if (std::fabs(g[i]) >= s) {
      ASSERT_EQ(detail::code2_at(codes, i), g[i] > 0 ? 3u : 2u) << i;
    }
  }
  // The rest follows the algorithm with the codec's own bound (= s).
  EXPECT_EQ(payload_of(msg), expected_payload(g, ctx, s));

  // Clipping above max|g| changes nothing.
  auto loose = builtin_registry().make_codec("terngrad:clip=1000");
  const auto m1 = test::encode(*loose, g, ctx);
  EXPECT_EQ(payload_of(m1), expected_payload(g, ctx));
}

TEST(TernGrad, ConstantGradientWithClipping) {
  // std = 0: the paper's clip at c * std zeroes everything; s = 0, nothing sent.
  auto c = builtin_registry().make_codec("terngrad:clip=2.5");
  const std::vector<float> g(40, 0.75f);
  const auto msg = test::encode(*c, g);
  EXPECT_EQ(load_le<float>(msg.data() + kHeaderBytes), 0.0f);
  EXPECT_EQ(test::decode(*c, msg, g.size()), std::vector<float>(g.size(), 0.0f));
}

TEST(TernGrad, NonFiniteInputIsRejected) {
  for (const char* spec : {"terngrad", "terngrad:clip=2.5"}) {
    auto c = builtin_registry().make_codec(spec);
    for (float bad :
         {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
          std::numeric_limits<float>::quiet_NaN()}) {
      std::vector<float> g(50, 0.1f);
      g[33] = bad;
      std::vector<std::byte> msg(c->max_encoded_bytes(g.size()));
      EXPECT_THROW(c->encode(g, {}, msg), InvalidArgument);
    }
  }
  EXPECT_THROW(builtin_registry().make_codec("terngrad:clip=-1"), InvalidArgument);
}

TEST(TernGrad, MeanOfManyDrawsApproachesTheInput) {
  // A sharper check than the generic 5-sigma one on a hand-picked vector:
  // E[decode] = g exactly (up to the 2^-24 grid of the uniforms).
  auto c = builtin_registry().make_codec("terngrad");
  const std::vector<float> g = {0.9f, -0.1f, 0.5f, 0.0f, -1.0f, 0.01f, -0.33f};
  std::vector<double> sum(g.size(), 0.0);
  const int draws = 20000;
  for (int d = 0; d < draws; ++d) {
    const auto out =
        test::decode(*c, test::encode(*c, g, {.seed = 5, .step = std::uint64_t(d)}), g.size());
    for (std::size_t i = 0; i < g.size(); ++i) sum[i] += out[i];
  }
  for (std::size_t i = 0; i < g.size(); ++i) {
    // Var of one draw <= s^2/4 = 0.25; 5 sigma of the mean = 5 * 0.5 / sqrt(draws).
    EXPECT_NEAR(sum[i] / draws, g[i], 5 * 0.5 / std::sqrt(double(draws))) << i;
  }
}

}  // namespace
}  // namespace gradcomp
