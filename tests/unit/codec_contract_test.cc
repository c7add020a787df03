// The contract every registered codec (and each of its example specs) must meet:
// bounded, deterministic, guard-respecting encodes across the size sweep; decode_add
// that scales and accumulates; fused error feedback equal to the generic form;
// conservation of the gradient sum under error feedback; unbiasedness where claimed.
// Codec-specific reference tests live in their own files.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "gradcomp/error.h"
#include "gradcomp/registry.h"
#include "gradcomp/wire.h"
#include "support/test_support.h"

namespace gradcomp {
namespace {

using test::Guarded;

class CodecContract : public ::testing::TestWithParam<std::string> {
 protected:
  std::shared_ptr<const Codec> codec() const { return builtin_registry().make_codec(GetParam()); }
};

TEST_P(CodecContract, SpecIsCanonicalAndRebuildable) {
  auto c = codec();
  auto again = builtin_registry().make_codec(c->spec());
  EXPECT_EQ(again->spec(), c->spec());
  EXPECT_EQ(again->config_tag(), c->config_tag());
  EXPECT_EQ(again->wire_id(), c->wire_id());
}

TEST_P(CodecContract, SizeSweepRespectsBoundsAndGuards) {
  auto c = codec();
  for (std::size_t n : test::kSweepSizes) {
    SCOPED_TRACE("n=" + std::to_string(n));
    const auto g = test::random_gradient(n, 7);
    const std::size_t max = c->max_encoded_bytes(n);
    Guarded<std::byte> msg(max, std::byte{0xA5});
    const StepContext ctx{.seed = 3, .step = 11, .rank = 1, .bucket = 2};
    const std::size_t bytes = c->encode(g, ctx, msg.span());
    EXPECT_LE(bytes, max);
    EXPECT_GE(bytes, kHeaderBytes);
    EXPECT_TRUE(msg.guard_intact()) << "encode wrote past max_encoded_bytes";

    // Deterministic in (input, context).
    const auto again = test::encode(*c, g, ctx);
    ASSERT_EQ(again.size(), bytes);
    EXPECT_EQ(0, std::memcmp(again.data(), msg.data(), bytes));

    Guarded<float> out(n, 12345.0f);
    std::fill(out.data(), out.data() + n, 0.0f);
    c->decode_add({msg.data(), bytes}, out.span());
    EXPECT_TRUE(out.guard_intact()) << "decode wrote past n";
    for (std::size_t i = 0; i < n; ++i) ASSERT_TRUE(std::isfinite(out.data()[i])) << i;
  }
}

TEST_P(CodecContract, DecodeAddScalesAndAccumulates) {
  auto c = codec();
  const std::size_t n = 1000;
  const auto g = test::random_gradient(n, 5);
  const auto msg = test::encode(*c, g, {.seed = 1, .step = 2});
  const auto once = test::decode(*c, msg, n);

  std::vector<float> twice(n, 0.0f), minus(n, 0.0f), acc = g;
  c->decode_add(msg, twice, 2.0f);
  c->decode_add(msg, minus, -1.0f);
  c->decode_add(msg, acc, 1.0f);
  for (std::size_t i = 0; i < n; ++i) {
    ASSERT_EQ(twice[i], 2.0f * once[i]) << i;
    ASSERT_EQ(minus[i], -once[i]) << i;
    ASSERT_EQ(acc[i], g[i] + once[i]) << i;
  }
}

TEST_P(CodecContract, FusedFeedbackEqualsGenericForm) {
  auto c = codec();
  for (std::size_t n : test::kSweepSizes) {
    SCOPED_TRACE("n=" + std::to_string(n));
    const auto g = test::random_gradient(n, 9);
    const StepContext ctx{.seed = 4, .step = 5, .rank = 2, .bucket = 1};

    auto generic = g;
    const auto msg = test::encode(*c, generic, ctx);
    c->decode_add(msg, generic, -1.0f);

    auto fused = g;
    std::vector<std::byte> fused_msg(c->max_encoded_bytes(n));
    fused_msg.resize(c->encode_feedback(fused, ctx, fused_msg));
    ASSERT_EQ(fused_msg, msg) << "encode_feedback must send what encode sends";
    for (std::size_t i = 0; i < n; ++i) {
      ASSERT_EQ(std::memcmp(&fused[i], &generic[i], 4), 0)
          << "residual differs at " << i << ": " << fused[i] << " vs " << generic[i];
    }
  }
}

// Error feedback conserves the sum: sum_t decode(msg_t) + e_T = sum_t g_t. Exact when
// every decoded value is a multiple of 2^-8 (integer inputs through top-k, 2-bit at
// tau=0.5, ...: float sums of such values are exact); otherwise up to rounding.
TEST_P(CodecContract, ErrorFeedbackConservesTheSum) {
  auto mem = builtin_registry().make_memory("ef(" + GetParam() + ")", 257);
  const std::size_t n = mem->size();
  std::vector<float> sent(n, 0.0f), total(n, 0.0f);
  std::vector<std::byte> msg(mem->max_encoded_bytes());
  bool dyadic = true;
  for (std::uint64_t step = 0; step < 20; ++step) {
    const auto g = test::integer_gradient(n, step, 8);
    for (std::size_t i = 0; i < n; ++i) total[i] += g[i];
    const std::size_t bytes = mem->compress(g, {.seed = 1, .step = step}, msg);
    const auto d = test::decode(mem->codec(), {msg.data(), bytes}, n);
    for (std::size_t i = 0; i < n; ++i) {
      sent[i] += d[i];
      dyadic = dyadic && std::ldexp(d[i], 8) == std::round(std::ldexp(d[i], 8)) &&
               std::fabs(d[i]) < 32768.0f;
    }
  }
  const auto e = mem->state().at(0).data;
  for (std::size_t i = 0; i < n; ++i) {
    if (dyadic) {
      ASSERT_EQ(sent[i] + e[i], total[i]) << i;
    } else {
      ASSERT_NEAR(sent[i] + e[i], total[i], 1e-3f * (1.0f + std::fabs(total[i]))) << i;
    }
  }
}

// efm(...) with the optimizer's momentum 0 is error feedback, message for message and
// residual for residual.
TEST_P(CodecContract, MomentumErrorFeedbackWithoutMomentumIsErrorFeedback) {
  auto ef = builtin_registry().make_memory("ef(" + GetParam() + ")", 131);
  auto efm = builtin_registry().make_memory("efm(" + GetParam() + ")", 131);
  ASSERT_TRUE(efm->carries_momentum());
  ASSERT_FALSE(ef->carries_momentum());
  std::vector<std::byte> a(ef->max_encoded_bytes()), b(efm->max_encoded_bytes());
  for (std::uint64_t step = 0; step < 8; ++step) {
    const auto g = test::random_gradient(131, 40 + step);
    const StepContext ctx{.seed = 3, .step = step};
    const std::size_t na = ef->compress(g, ctx, a);
    const std::size_t nb = efm->compress(g, ctx, b);
    ASSERT_EQ(na, nb) << "step " << step;
    ASSERT_EQ(0, std::memcmp(a.data(), b.data(), na)) << "step " << step;
  }
  const auto ea = ef->state().at(0).data;
  const auto st = efm->state();
  ASSERT_EQ(st.size(), 2u);
  EXPECT_EQ(st[0].name, "momentum");
  EXPECT_EQ(st[1].name, "residual");
  EXPECT_TRUE(test::same_bits(ea, st[1].data));
}

// efm conserves the momentum's sum: sum_t decode(msg_t) + e_T = sum_t u_t with
// u_t = m u_{t-1} + g_t (m = 1/2: the u_t of integer g_t are exact in float).
TEST_P(CodecContract, MomentumErrorFeedbackConservesTheMomentumSum) {
  auto mem = builtin_registry().make_memory("efm(" + GetParam() + ")", 257);
  const std::size_t n = mem->size();
  std::vector<float> sent(n, 0.0f), total(n, 0.0f), u(n, 0.0f);
  std::vector<std::byte> msg(mem->max_encoded_bytes());
  for (std::uint64_t step = 0; step < 12; ++step) {
    const auto g = test::integer_gradient(n, step, 8);
    for (std::size_t i = 0; i < n; ++i) {
      u[i] = 0.5f * u[i] + g[i];
      total[i] += u[i];
    }
    const std::size_t bytes = mem->compress(g, {.seed = 1, .step = step, .momentum = 0.5f}, msg);
    const auto d = test::decode(mem->codec(), {msg.data(), bytes}, n);
    for (std::size_t i = 0; i < n; ++i) sent[i] += d[i];
  }
  const auto st = mem->state();
  ASSERT_TRUE(test::same_bits(st.at(0).data, u));  // the memory's momentum is u
  for (std::size_t i = 0; i < n; ++i) {
    ASSERT_NEAR(sent[i] + st.at(1).data[i], total[i], 1e-3f * (1.0f + std::fabs(total[i]))) << i;
  }
}

// Codecs that claim unbiasedness: the mean of decode over many RNG keys converges to
// the input. Each element's mean must lie within 5 standard errors (estimated from the
// same draws) — a codec that rounds the wrong way is off by a whole level and fails.
TEST_P(CodecContract, UnbiasedCodecsAverageToTheInput) {
  auto c = codec();
  if (!c->traits().unbiased) GTEST_SKIP() << "biased codec";
  const std::size_t n = 96;
  const int draws = c->traits().stochastic ? 4000 : 1;
  const auto g = test::random_gradient(n, 13);
  std::vector<double> sum(n, 0.0), sum_sq(n, 0.0);
  for (int s = 0; s < draws; ++s) {
    const auto msg = test::encode(*c, g, {.seed = 99, .step = static_cast<std::uint64_t>(s)});
    const auto d = test::decode(*c, msg, n);
    for (std::size_t i = 0; i < n; ++i) {
      sum[i] += d[i];
      sum_sq[i] += double(d[i]) * d[i];
    }
  }
  for (std::size_t i = 0; i < n; ++i) {
    const double mean = sum[i] / draws;
    const double var = std::max(0.0, sum_sq[i] / draws - mean * mean);
    const double tol = 5.0 * std::sqrt(var / draws) + 1e-3 * (1.0 + std::fabs(g[i]));
    ASSERT_NEAR(mean, g[i], tol) << "element " << i;
  }
}

// Linear codecs: the summable region of the sum of two messages decodes to the sum.
TEST_P(CodecContract, LinearCodecsSumWhileCompressed) {
  auto c = codec();
  if (!c->traits().linear) GTEST_SKIP() << "not linear";
  const std::size_t n = 333;
  const auto a = test::integer_gradient(n, 1, 4);
  const auto b = test::integer_gradient(n, 2, 4);
  const StepContext ca{.seed = 5, .step = 6, .rank = 0, .bucket = 3};
  const StepContext cb{.seed = 5, .step = 6, .rank = 1, .bucket = 3};
  auto ma = test::encode(*c, a, ca);
  const auto mb = test::encode(*c, b, cb);
  ASSERT_EQ(ma.size(), mb.size());
  const LinearRegion r = c->linear_region(n);
  ASSERT_LE(r.offset + r.count * (r.dtype == WireDType::kFloat32 ? 4 : 2), ma.size());
  // Outside the region, the messages of two ranks must agree byte for byte, but for the
  // checksum, which covers the region too (the reducer reseals the summed message).
  ASSERT_GE(r.offset, kHeaderBytes);
  EXPECT_EQ(0, std::memcmp(ma.data(), mb.data(), kCrcOffset));
  EXPECT_EQ(
      0, std::memcmp(ma.data() + kHeaderBytes, mb.data() + kHeaderBytes, r.offset - kHeaderBytes));
  if (r.dtype == WireDType::kFloat32) {
    for (std::size_t i = 0; i < r.count; ++i) {
      const float s = load_le<float>(ma.data() + r.offset + 4 * i) +
                      load_le<float>(mb.data() + r.offset + 4 * i);
      store_le<float>(ma.data() + r.offset + 4 * i, s);
    }
  } else {
    GTEST_SKIP() << "fp16 sums are checked in the fp16 codec's own tests";
  }
  reseal_message(ma);
  const auto sum = test::decode(*c, ma, n);
  const auto da = test::decode(*c, test::encode(*c, a, ca), n);
  const auto db = test::decode(*c, mb, n);
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(sum[i], da[i] + db[i]) << i;
}

INSTANTIATE_TEST_SUITE_P(AllCodecs, CodecContract, ::testing::ValuesIn(test::all_codec_specs()),
                         [](const auto& p) { return test::spec_test_name(p.param); });

}  // namespace
}  // namespace gradcomp
