// QSGD (docs/algorithms/quantization.md): the codec against an independent scalar encoder/decoder
// written from the spec (bit for bit, every path: AVX2 kernel, prescaled tiny norms, double norms,
// blocks, threads), hand-computed messages, and the statistics the paper promises (unbiased
// rounding in the right direction, the variance bound, the closed-form variance).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#if defined(_OPENMP)
#include <omp.h>
#endif

#include "gradcomp/error.h"
#include "gradcomp/registry.h"
#include "gradcomp/rng.h"
#include "gradcomp/wire.h"
#include "support/test_support.h"

namespace gradcomp {
namespace {

// ---- the reference: one element at a time, straight from the file comment --------

// "x * y + z" as the codec defines it: fused where the target has FMA.
template <class T>
T mul_add(T a, T b, T c) {
#if defined(__FMA__)
  return std::fma(a, b, c);
#else
  return a * b + c;
#endif
}

struct RefQsgd {
  std::uint32_t s;
  std::size_t d;
  unsigned m = static_cast<unsigned>(std::bit_width(s));
  unsigned w = m + 1;

  std::size_t buckets(std::size_t n) const { return (n + d - 1) / d; }
  std::size_t stream_bytes(std::size_t n) const { return (n * w + 31) / 32 * 4; }

  static float norm(const float* v, std::size_t len) {
    float acc[32] = {};
    for (std::size_t j = 0; j < len; ++j) acc[j % 32] = mul_add(v[j], v[j], acc[j % 32]);
    for (std::size_t h = 16; h >= 1; h /= 2) {
      for (std::size_t k = 0; k < h; ++k) acc[k] += acc[k + h];
    }
    if (acc[0] >= 0x1p-60f && acc[0] <= 0x1p120f) return std::sqrt(acc[0]);
    double accd[32] = {};
    for (std::size_t j = 0; j < len; ++j) {
      accd[j % 32] = mul_add(double{v[j]}, double{v[j]}, accd[j % 32]);
    }
    for (std::size_t h = 16; h >= 1; h /= 2) {
      for (std::size_t k = 0; k < h; ++k) accd[k] += accd[k + h];
    }
    return static_cast<float>(std::sqrt(accd[0]));
  }

  std::vector<std::byte> encode(const std::vector<float>& v, const StepContext& ctx) const {
    const std::size_t n = v.size();
    const std::size_t nb = buckets(n);
    std::vector<std::byte> payload(4 * nb + stream_bytes(n), std::byte{0});
    const CounterRng rng = CounterRng::for_step(ctx, RngScope::kPerRank);
    const float sf = static_cast<float>(s);
    for (std::size_t b = 0; b < nb; ++b) {
      const std::size_t i0 = b * d, i1 = std::min(n, i0 + d);
      const float nu = norm(v.data() + i0, i1 - i0);
      store_le<float>(payload.data() + 4 * b, nu);
      float pre = 1.0f, scale = 0.0f;
      if (nu != 0.0f) {
        scale = sf / nu;
        if (std::isinf(scale)) {
          pre = 0x1p64f;
          scale = sf / (nu * 0x1p64f);
        }
      }
      for (std::size_t i = i0; i < i1; ++i) {
        float ax = std::fabs(v[i]);
        if (pre != 1.0f) ax *= pre;
        const float a = std::min(ax * scale, sf);
        const float l = std::floor(a);
        const bool up = rng.uniform(static_cast<std::uint32_t>(i)) < a - l;  // round UP w.p. a-l
        const auto level = static_cast<std::uint32_t>(l) + (up ? 1u : 0u);
        const std::uint32_t code = level == 0 ? 0 : level | (std::signbit(v[i]) ? 1u : 0u) << m;
        for (unsigned k = 0; k < w; ++k) {
          if ((code >> k) & 1u) {
            const std::size_t bit = i * w + k;
            payload[4 * nb + bit / 8] |= std::byte{static_cast<std::uint8_t>(1u << (bit % 8))};
          }
        }
      }
    }
    return payload;
  }

  // out[i] = alpha * value_i + out[i]; the payload is trusted.
  void decode_add(std::span<const std::byte> payload, std::vector<float>& out, float alpha) const {
    const std::size_t n = out.size();
    const std::size_t nb = buckets(n);
    for (std::size_t i = 0; i < n; ++i) {
      std::uint32_t code = 0;
      for (unsigned k = 0; k < w; ++k) {
        const std::size_t bit = i * w + k;
        code |= ((std::to_integer<unsigned>(payload[4 * nb + bit / 8]) >> (bit % 8)) & 1u) << k;
      }
      const float unit = load_le<float>(payload.data() + 4 * (i / d)) / static_cast<float>(s);
      float val = unit * static_cast<float>(code & ((1u << m) - 1));
      if (code >> m) val = -val;
      out[i] = mul_add(alpha, val, out[i]);
    }
  }
};

std::shared_ptr<const Codec> make(std::uint32_t s, std::size_t d) {
  return builtin_registry().make_codec("qsgd:levels=" + std::to_string(s) +
                                       ",bucket=" + std::to_string(d));
}

using test::payload_of;

// Gradients with the awkward cases mixed in: zeros, -0, a zero bucket, a denormal
// bucket (the 2^64-prescaled path), a huge bucket (the double-norm path), outliers.
std::vector<float> awkward_gradient(std::size_t n, std::size_t d, std::uint64_t seed) {
  auto g = test::random_gradient(n, seed);
  for (std::size_t i = 0; i < n; ++i) {
    if (i % 11 == 3) g[i] = 0.0f;
    if (i % 13 == 5) g[i] = -0.0f;
  }
  const std::size_t nb = (n + d - 1) / d;
  for (std::size_t b = 0; b < nb; ++b) {
    const std::size_t i0 = b * d, i1 = std::min(n, i0 + d);
    float f = 1.0f;
    switch (b % 6) {
      case 1:
        f = 0.0f;
        break;  // all zero
      case 2:
        f = 1e-41f;
        break;  // denormal: s / nu overflows float
      case 3:
        f = 3e25f;
        break;  // squares overflow float: double norm
      case 4:
        f = 1e-25f;
        break;  // squares underflow: double norm
      default:
        break;
    }
    for (std::size_t i = i0; i < i1; ++i) g[i] *= f;
  }
  return g;
}

// ---- bit-for-bit against the reference ---------------------------------------------

TEST(Qsgd, MatchesScalarReferenceBitForBit) {
  const std::uint32_t levels[] = {1, 2, 3, 4, 7, 16, 127, 128, 255, 256, 4095, 32767, 65535};
  const std::size_t buckets[] = {1, 7, 32, 512, 3001, 100000};
  const std::size_t sizes[] = {0, 1, 2, 15, 17, 33, 511, 2047, 2048, 2049, 6151};
  for (std::uint32_t s : levels) {
    for (std::size_t d : buckets) {
      const RefQsgd ref{s, d};
      auto codec = make(s, d);
      for (std::size_t n : sizes) {
        SCOPED_TRACE("s=" + std::to_string(s) + " d=" + std::to_string(d) +
                     " n=" + std::to_string(n));
        const auto g = awkward_gradient(n, d, n + s);
        const StepContext ctx{.seed = 7, .step = s, .rank = 3, .bucket = 5};
        const auto msg = test::encode(*codec, g, ctx);
        const auto want = ref.encode(g, ctx);
        ASSERT_EQ(payload_of(msg), want);

        for (float alpha : {1.0f, 2.0f, -1.0f, 0.3f}) {
          auto got = test::random_gradient(n, 4);
          auto expect = got;
          codec->decode_add(msg, got, alpha);
          ref.decode_add(want, expect, alpha);
          ASSERT_TRUE(n == 0 || std::memcmp(got.data(), expect.data(), 4 * n) == 0)
              << "alpha " << alpha;
        }
      }
    }
  }
}

// Large n: blocks, the parallel norms-first path (n > 2^16) and the fused path.
TEST(Qsgd, LargeInputsAndFusedFeedbackMatchReference) {
  for (auto [s, d] :
       {std::pair<std::uint32_t, std::size_t>{16, 512}, {255, 7}, {3, 100000}, {65535, 4096}}) {
    const RefQsgd ref{s, d};
    auto codec = make(s, d);
    const std::size_t n = 300007;
    SCOPED_TRACE(codec->spec());
    const auto g = awkward_gradient(n, d, 1);
    const StepContext ctx{.seed = 1, .step = 2, .rank = 0, .bucket = 9};
    const auto want = ref.encode(g, ctx);
    ASSERT_EQ(payload_of(test::encode(*codec, g, ctx)), want);

    auto p = g;
    std::vector<std::byte> msg(codec->max_encoded_bytes(n));
    msg.resize(codec->encode_feedback(p, ctx, msg));
    ASSERT_EQ(payload_of(msg), want);
    auto expect = g;
    ref.decode_add(want, expect, -1.0f);
    ASSERT_EQ(0, std::memcmp(p.data(), expect.data(), 4 * n));
  }
}

#if defined(_OPENMP)
TEST(Qsgd, ResultDoesNotDependOnThreadCount) {
  auto codec = make(16, 512);
  const std::size_t n = 1 << 19;
  const auto g = test::random_gradient(n, 8);
  const int before = omp_get_max_threads();
  omp_set_num_threads(1);
  const auto one = test::encode(*codec, g, {.seed = 2});
  const auto dec_one = test::decode(*codec, one, n);
  omp_set_num_threads(4);
  const auto four = test::encode(*codec, g, {.seed = 2});
  const auto dec_four = test::decode(*codec, one, n);
  omp_set_num_threads(before);
  EXPECT_EQ(one, four);
  EXPECT_EQ(0, std::memcmp(dec_one.data(), dec_four.data(), 4 * n));
}
#endif

// ---- hand-computed messages -------------------------------------------------------

TEST(Qsgd, HandComputedMessage) {
  // v = (3, -4): nu = 5; s = 5 gives a = (3, 4) exactly: no randomness.
  // m = bit_width(5) = 3, w = 4: codes 3 and 4 | 1 << 3 = 0xC -> stream byte 0xC3.
  auto codec = make(5, 2);
  const std::vector<float> v = {3.0f, -4.0f};
  const auto msg = test::encode(*codec, v, {.seed = 1});
  ASSERT_EQ(msg.size(), kHeaderBytes + 8);
  EXPECT_EQ(load_le<float>(msg.data() + kHeaderBytes), 5.0f);
  EXPECT_EQ(load_le<std::uint32_t>(msg.data() + kHeaderBytes + 4), 0xC3u);
  const auto d = test::decode(*codec, msg, 2);
  EXPECT_EQ(d[0], 3.0f);
  EXPECT_EQ(d[1], -4.0f);
}

TEST(Qsgd, MessageSizeAndLayout) {
  // s = 16: m = 5, w = 6. n = 1000, d = 512: 2 norms + ceil(6000 / 32) = 188 words.
  auto codec = make(16, 512);
  EXPECT_EQ(codec->max_encoded_bytes(1000), kHeaderBytes + 8 + 188 * 4);
  EXPECT_EQ(codec->max_encoded_bytes(0), kHeaderBytes);
  // s = 65535: w = 17. s = 1: w = 2.
  EXPECT_EQ(make(65535, 1 << 24)->max_encoded_bytes(32), kHeaderBytes + 4 + 68);
  EXPECT_EQ(make(1, 1)->max_encoded_bytes(16), kHeaderBytes + 64 + 4);
  const auto& t = codec->traits();
  EXPECT_TRUE(t.unbiased && t.stochastic);
  EXPECT_FALSE(t.linear || t.needs_memory);
}

TEST(Qsgd, ZeroAndNegativeZeroEncodeAsCodeZero) {
  auto codec = make(16, 4);
  const std::vector<float> v = {-0.0f, 0.0f, -0.0f, 0.0f, -0.0f, 1.0f, -1e-30f, 0.0f};
  const auto msg = test::encode(*codec, v, {.seed = 3});
  // Bucket 0 is all zeros: norm +0 and four zero codes.
  EXPECT_EQ(load_le<std::uint32_t>(msg.data() + kHeaderBytes), 0u);
  const auto d = test::decode(*codec, msg, v.size());
  for (std::size_t i : {0, 1, 2, 3, 4, 7}) EXPECT_EQ(std::bit_cast<std::uint32_t>(d[i]), 0u) << i;
  EXPECT_EQ(d[5], 1.0f);  // nu = 1, a = 16: exact
}

// ---- statistics -------------------------------------------------------------------

// A known bug of one reference implementation: rounding up with probability 1 - (a - l).
TEST(Qsgd, RoundsUpWithProbabilityAMinusL) {
  // nu = 5, s = 1: a = 0.6, 0.8 (16 elements: the 8-wide kernel runs, not just the tail)
  auto codec = make(1, 16);
  std::vector<float> v(16, 0.0f);
  v[9] = 3.0f;
  v[10] = 4.0f;
  const int draws = 20000;
  int up0 = 0, up1 = 0;
  for (int t = 0; t < draws; ++t) {
    auto d =
        test::decode(*codec, test::encode(*codec, v, {.seed = 4, .step = std::uint64_t(t)}), 16);
    d.erase(d.begin(), d.begin() + 9);
    ASSERT_TRUE(d[0] == 0.0f || d[0] == 5.0f);
    up0 += d[0] != 0.0f;
    up1 += d[1] != 0.0f;
  }
  const double sd0 = std::sqrt(0.6 * 0.4 / draws), sd1 = std::sqrt(0.8 * 0.2 / draws);
  EXPECT_NEAR(double(up0) / draws, 0.6, 5 * sd0);
  EXPECT_NEAR(double(up1) / draws, 0.8, 5 * sd1);
}

double squared_error(const std::vector<float>& a, const std::vector<float>& b) {
  double e = 0;
  for (std::size_t i = 0; i < a.size(); ++i) e += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
  return e;
}

// E||Q(v) - v||^2 <= min(d/s^2, sqrt(d)/s) ||v||^2 (Alistarh et al., Lemma 3.1), and it
// falls as levels are added.
TEST(Qsgd, ErrorWithinTheBoundAndFallsWithLevels) {
  const std::size_t n = 4096, d = 512;
  const auto v = test::random_gradient(n, 21);
  double norm2 = 0;
  for (float x : v) norm2 += double(x) * x;
  double previous = std::numeric_limits<double>::infinity();
  for (std::uint32_t s : {1u, 2u, 4u, 16u, 256u}) {
    auto codec = make(s, d);
    const int draws = 100;
    double mse = 0;
    for (int t = 0; t < draws; ++t) {
      const StepContext ctx{.seed = 5, .step = std::uint64_t(t), .rank = 1};
      mse += squared_error(test::decode(*codec, test::encode(*codec, v, ctx), n), v) / draws;
    }
    const double bound = std::min(double(d) / (double(s) * s), std::sqrt(double(d)) / s) * norm2;
    SCOPED_TRACE("s=" + std::to_string(s) + " mse=" + std::to_string(mse) +
                 " bound=" + std::to_string(bound));
    EXPECT_LE(mse, bound);
    EXPECT_LT(mse, 0.6 * previous) << "error must fall as levels rise";
    previous = mse;
  }
}

// Var = sum_i (nu/s)^2 (a_i - l_i)(1 - (a_i - l_i)), measured over many draws.
TEST(Qsgd, VarianceMatchesClosedForm) {
  const std::vector<float> v = {0.3f, -1.2f, 0.05f, 2.0f, -0.7f, 0.0f, 0.9f};
  for (std::uint32_t s : {1u, 3u, 8u}) {
    auto codec = make(s, v.size());
    double nu2 = 0;
    for (float x : v) nu2 += double(x) * x;
    const double nu = std::sqrt(nu2);
    double expected = 0;
    for (float x : v) {
      const double a = s * std::fabs(double(x)) / nu;
      const double p = a - std::floor(a);
      expected += (nu / s) * (nu / s) * p * (1 - p);
    }
    const int draws = 40000;
    double sum = 0, sum_sq = 0;
    for (int t = 0; t < draws; ++t) {
      const StepContext ctx{.seed = 6, .step = std::uint64_t(t)};
      const double e =
          squared_error(test::decode(*codec, test::encode(*codec, v, ctx), v.size()), v);
      sum += e;
      sum_sq += e * e;
    }
    const double mean = sum / draws;
    const double sd = std::sqrt(std::max(0.0, sum_sq / draws - mean * mean));
    EXPECT_NEAR(mean, expected, 5 * sd / std::sqrt(double(draws)) + 1e-6 * nu2) << "s=" << s;
  }
}

TEST(Qsgd, RandomnessDependsOnRankStepAndBucket) {
  auto codec = make(4, 512);
  const auto g = test::random_gradient(1000, 2);
  const StepContext base{.seed = 1, .step = 2, .rank = 0, .bucket = 0};
  const auto m0 = test::encode(*codec, g, base);
  EXPECT_EQ(m0, test::encode(*codec, g, base));
  for (StepContext other : {StepContext{.seed = 1, .step = 2, .rank = 1, .bucket = 0},
                            StepContext{.seed = 1, .step = 3, .rank = 0, .bucket = 0},
                            StepContext{.seed = 1, .step = 2, .rank = 0, .bucket = 1},
                            StepContext{.seed = 2, .step = 2, .rank = 0, .bucket = 0}}) {
    EXPECT_NE(m0, test::encode(*codec, g, other));
  }
}

// ---- encode-time errors -----------------------------------------------------------

TEST(Qsgd, NonFiniteInputIsRejectedAtEncode) {
  auto codec = make(16, 64);
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    for (std::size_t n : {100, 300000}) {  // sequential and norms-first paths
      auto g = test::random_gradient(n, 3);
      g[n - 7] = bad;
      std::vector<std::byte> msg(codec->max_encoded_bytes(n));
      EXPECT_THROW(codec->encode(g, {}, msg), InvalidArgument);
      // The fused form must not touch p when it throws (as the generic form does not).
      auto p = g;
      EXPECT_THROW(codec->encode_feedback(p, {}, msg), InvalidArgument);
      EXPECT_EQ(0, std::memcmp(p.data(), g.data(), 4 * n));
    }
  }
  // Finite values whose bucket norm overflows float32.
  std::vector<float> big(64, 3e38f);
  std::vector<std::byte> msg(codec->max_encoded_bytes(big.size()));
  try {
    codec->encode(big, {}, msg);
    ADD_FAILURE() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("qsgd encode: bucket 0"), std::string::npos) << e.what();
  }
}

TEST(Qsgd, ExtremeButFiniteBucketsDecodeValidly) {
  auto codec = make(65535, 16);
  std::vector<float> g(64);
  for (std::size_t i = 0; i < 16; ++i) g[i] = std::numeric_limits<float>::denorm_min() * float(i);
  for (std::size_t i = 16; i < 32; ++i) g[i] = 1e37f * float(i % 3);
  for (std::size_t i = 32; i < 48; ++i) g[i] = std::numeric_limits<float>::min() * float(i);
  for (std::size_t i = 48; i < 64; ++i) g[i] = -1e-20f * float(i);
  double nu[4] = {};
  for (std::size_t i = 0; i < g.size(); ++i) nu[i / 16] += double(g[i]) * g[i];
  for (double& x : nu) x = std::sqrt(x);
  for (std::uint64_t step = 0; step < 50; ++step) {
    const auto d = test::decode(*codec, test::encode(*codec, g, {.step = step}), g.size());
    for (std::size_t i = 0; i < g.size(); ++i) {
      ASSERT_TRUE(std::isfinite(d[i])) << i;
      ASSERT_LE(std::fabs(d[i]), nu[i / 16] * (1 + 1e-6)) << "|Q(v_i)| <= nu, i = " << i;
    }
  }
}

}  // namespace
}  // namespace gradcomp
