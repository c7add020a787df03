// fp16 / bf16: the scalar references against exact arithmetic (nearest representable,
// ties to even, saturation), the SIMD bulk kernels against the references bit for bit
// (all 2^16 patterns for decoding; ties, subnormals, range edges and a sweep over the
// float bit patterns for encoding), and the codec's behaviour.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "gradcomp/error.h"
#include "gradcomp/kernels/half.h"
#include "gradcomp/registry.h"
#include "gradcomp/rng.h"
#include "gradcomp/wire.h"
#include "support/test_support.h"

namespace gradcomp {
namespace {

using kernels::HalfFormat;

std::uint32_t bits(float f) { return std::bit_cast<std::uint32_t>(f); }

// An independent fp16 decoder: sign * (1024 + m) * 2^(e - 25), or m * 2^-24.
double fp16_exact(std::uint16_t h) {
  const int e = (h >> 10) & 0x1F;
  const int m = h & 0x3FF;
  const double mag = e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
  return (h & 0x8000) ? -mag : mag;
}
double bf16_exact(std::uint16_t h) {
  const int e = (h >> 7) & 0xFF;
  const int m = h & 0x7F;
  const double mag = e == 0 ? std::ldexp(m, -133) : std::ldexp(128 + m, e - 134);
  return (h & 0x8000) ? -mag : mag;
}

// Checks that h is the correctly rounded (nearest, ties to even), saturating encoding of
// the finite float x, using exact double arithmetic against the neighbouring patterns.
void expect_correctly_rounded(HalfFormat f, float x, std::uint16_t h) {
  const std::uint16_t max_finite = f == HalfFormat::kFp16 ? 0x7BFF : 0x7F7F;
  const auto exact = [&](std::uint16_t v) {
    return f == HalfFormat::kFp16 ? fp16_exact(v) : bf16_exact(v);
  };
  ASSERT_TRUE(kernels::half_is_finite(f, h)) << x;
  const std::uint16_t sign = bits(x) >> 31 ? 0x8000 : 0;
  ASSERT_EQ(h & 0x8000, sign) << x;
  const std::uint16_t mag = h & 0x7FFF;
  const double ax = std::fabs(static_cast<double>(x));
  const double d = std::fabs(ax - exact(mag));
  if (mag == max_finite && ax >= exact(max_finite)) return;  // saturated (or exactly max)
  // The neighbours: at max finite the one above is 2^16 (fp16) / 2^128 (bf16), where
  // round-to-nearest would have gone (inf).
  const double up = mag == max_finite ? (f == HalfFormat::kFp16 ? 65536.0 : std::ldexp(1.0, 128))
                                      : exact(static_cast<std::uint16_t>(mag + 1));
  const double du = std::fabs(up - ax);
  ASSERT_TRUE(d < du || (d == du && (mag & 1) == 0)) << x << " -> " << h;
  if (mag != 0) {
    const double dd = std::fabs(ax - exact(static_cast<std::uint16_t>(mag - 1)));
    ASSERT_TRUE(d < dd || (d == dd && (mag & 1) == 0)) << x << " -> " << h;
  }
}

// Floats worth testing: every half value, the midpoints between consecutive halves
// (ties) and a float ulp either side, subnormal and range edges, plus a sweep over the
// float bit patterns.
std::vector<float> encode_cases(HalfFormat f) {
  std::vector<float> v;
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const auto u = static_cast<std::uint16_t>(h);
    const auto next = static_cast<std::uint16_t>(h + 1);
    if (!kernels::half_is_finite(f, u)) continue;
    const float a = kernels::half_to_float_ref(f, u);
    v.push_back(a);
    if ((h & 0x7FFF) != 0x7FFF && kernels::half_is_finite(f, next) && ((h + 1) & 0x7FFF) != 0) {
      const double mid = 0.5 * (static_cast<double>(a) + kernels::half_to_float_ref(f, next));
      const auto m = static_cast<float>(mid);  // exact: one more bit than the half
      v.push_back(m);
      v.push_back(std::nextafter(m, 0.0f));
      v.push_back(std::nextafter(m, std::copysign(std::numeric_limits<float>::infinity(), m)));
    }
  }
  for (float e : {65504.0f,
                  65519.0f,
                  65519.996f,
                  65520.0f,
                  65536.0f,
                  1e6f,
                  1e30f,
                  std::numeric_limits<float>::max(),
                  std::numeric_limits<float>::min(),
                  std::numeric_limits<float>::denorm_min(),
                  1e-40f,
                  0x1p-25f,
                  0x1.000002p-25f,
                  0x1.8p-24f,
                  0x1.8p-23f,
                  0x1p-14f,
                  0x1.ffcp-15f,
                  0x1.ffep-15f,
                  3.3895314e38f,
                  3.3961776e38f,
                  3.4e38f,
                  0.0f}) {
    v.push_back(e);
    v.push_back(-e);
  }
  for (std::uint64_t u = 0; u < (1ull << 32); u += 1021) {
    const float x = std::bit_cast<float>(static_cast<std::uint32_t>(u));
    if (std::isfinite(x)) v.push_back(x);
  }
  return v;
}

TEST(Half, ReferenceDecodeIsExactForEveryPattern) {
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const auto u = static_cast<std::uint16_t>(h);
    if (kernels::half_is_finite(HalfFormat::kFp16, u)) {
      ASSERT_EQ(static_cast<double>(kernels::fp16_to_float_ref(u)), fp16_exact(u)) << h;
      ASSERT_EQ(bits(kernels::fp16_to_float_ref(u)) >> 31, h >> 15) << h;  // signed zeros
    }
    if (kernels::half_is_finite(HalfFormat::kBf16, u)) {
      ASSERT_EQ(static_cast<double>(kernels::bf16_to_float_ref(u)), bf16_exact(u)) << h;
    }
  }
  EXPECT_EQ(kernels::half_is_finite(HalfFormat::kFp16, 0x7C00), false);
  EXPECT_EQ(kernels::half_is_finite(HalfFormat::kFp16, 0xFE00), false);
  EXPECT_EQ(kernels::half_is_finite(HalfFormat::kFp16, 0x7BFF), true);
  EXPECT_EQ(kernels::half_is_finite(HalfFormat::kBf16, 0x7F80), false);
  EXPECT_EQ(kernels::half_is_finite(HalfFormat::kBf16, 0xFFC1), false);
  EXPECT_EQ(kernels::half_is_finite(HalfFormat::kBf16, 0x7F7F), true);
}

TEST(Half, ReferenceEncodeRoundsToNearestEvenAndSaturates) {
  for (HalfFormat f : {HalfFormat::kFp16, HalfFormat::kBf16}) {
    SCOPED_TRACE(f == HalfFormat::kFp16 ? "fp16" : "bf16");
    for (float x : encode_cases(f)) {
      expect_correctly_rounded(f, x, kernels::float_to_half_ref(f, x));
    }
  }
  EXPECT_EQ(kernels::float_to_fp16_ref(65519.0f), 0x7BFF);
  EXPECT_EQ(kernels::float_to_fp16_ref(65520.0f), 0x7BFF);  // RNE would give inf
  EXPECT_EQ(kernels::float_to_fp16_ref(-1e30f), 0xFBFF);
  EXPECT_EQ(kernels::float_to_fp16_ref(0x1p-25f), 0x0000);    // tie -> even (zero)
  EXPECT_EQ(kernels::float_to_fp16_ref(0x1.8p-24f), 0x0002);  // tie 1.5 ulp -> 2
  EXPECT_EQ(kernels::float_to_fp16_ref(-0.0f), 0x8000);
  EXPECT_EQ(kernels::float_to_fp16_ref(1.0f), 0x3C00);
  EXPECT_EQ(kernels::float_to_bf16_ref(std::numeric_limits<float>::max()), 0x7F7F);
  EXPECT_EQ(kernels::float_to_bf16_ref(-std::numeric_limits<float>::max()), 0xFF7F);
  EXPECT_EQ(kernels::float_to_bf16_ref(1.0f), 0x3F80);
  EXPECT_EQ(kernels::float_to_bf16_ref(std::bit_cast<float>(0x3F808000u)), 0x3F80);  // tie, even
  EXPECT_EQ(kernels::float_to_bf16_ref(std::bit_cast<float>(0x3F818000u)), 0x3F82);  // tie, odd
}

TEST(Half, BulkDecodeEqualsReferenceForAll65536Patterns) {
  std::vector<std::byte> in(2 * 0x10000 + 2);
  for (std::uint32_t h = 0; h < 0x10000; ++h)
    store_le<std::uint16_t>(in.data() + 2 * h, static_cast<std::uint16_t>(h));
  for (HalfFormat f : {HalfFormat::kFp16, HalfFormat::kBf16}) {
    // Every offset 0..16 so that each pattern passes through SIMD lanes and scalar tails.
    for (std::size_t off : {0, 1, 7, 15}) {
      const std::size_t n = 0x10000 - off;
      std::vector<float> out(n);
      kernels::decode_halves(f, in.data() + 2 * off, out);
      for (std::size_t i = 0; i < n; ++i) {
        const auto h = static_cast<std::uint16_t>(i + off);
        ASSERT_EQ(bits(out[i]), bits(kernels::half_to_float_ref(f, h))) << std::hex << h;
      }
      // Accumulating decode with a non-trivial alpha: fma(alpha, h, out), finite only.
      std::vector<float> acc(n), want(n);
      const CounterRng rng(off);
      for (std::size_t i = 0; i < n; ++i)
        acc[i] = want[i] = rng.uniform(static_cast<std::uint32_t>(i)) * 100.0f - 50.0f;
      const float alpha = 0.3f;
      std::vector<std::byte> finite(in.begin() + static_cast<std::ptrdiff_t>(2 * off), in.end());
      for (std::size_t i = 0; i < n; ++i) {
        const auto h = static_cast<std::uint16_t>(i + off);
        const auto use = kernels::half_is_finite(f, h) ? h : std::uint16_t{0x3C00};
        store_le<std::uint16_t>(finite.data() + 2 * i, use);
        want[i] = std::fma(alpha, kernels::half_to_float_ref(f, use), want[i]);
      }
      kernels::decode_add_halves(f, finite.data(), acc, alpha);
      for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(bits(acc[i]), bits(want[i])) << i;
    }
  }
}

TEST(Half, BulkEncodeEqualsReferenceBitForBit) {
  for (HalfFormat f : {HalfFormat::kFp16, HalfFormat::kBf16}) {
    auto x = encode_cases(f);
    x.push_back(1.0f);  // an odd-ish length for the scalar tail
    for (std::size_t off : {0, 3}) {
      std::span<const float> in(x.data() + off, x.size() - off);
      std::vector<std::byte> out(2 * in.size() + 64, std::byte{0xCC});
      ASSERT_EQ(kernels::encode_halves(f, in, out.data()), in.size());
      for (std::size_t g = 2 * in.size(); g < out.size(); ++g) ASSERT_EQ(out[g], std::byte{0xCC});
      auto p = std::vector<float>(in.begin(), in.end());
      std::vector<std::byte> out2(2 * in.size());
      ASSERT_EQ(kernels::encode_halves_feedback(f, p, out2.data()), in.size());
      ASSERT_EQ(0, std::memcmp(out.data(), out2.data(), out2.size()));
      for (std::size_t i = 0; i < in.size(); ++i) {
        const std::uint16_t want = kernels::float_to_half_ref(f, in[i]);
        ASSERT_EQ(load_le<std::uint16_t>(out.data() + 2 * i), want) << in[i];
        const float e = std::fma(-1.0f, kernels::half_to_float_ref(f, want), in[i]);
        ASSERT_EQ(bits(p[i]), bits(e)) << in[i];
      }
    }
  }
}

TEST(Half, BulkKernelsReportTheFirstNonFinite) {
  for (HalfFormat f : {HalfFormat::kFp16, HalfFormat::kBf16}) {
    for (std::size_t n : {1, 15, 16, 17, 40, 1000}) {
      for (std::size_t at : {std::size_t{0}, n / 2, n - 1}) {
        for (float bad :
             {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity()}) {
          auto x = test::random_gradient(n, 1);
          x[at] = bad;
          std::vector<std::byte> out(2 * n);
          EXPECT_EQ(kernels::encode_halves(f, x, out.data()), at);
          EXPECT_EQ(kernels::encode_halves_feedback(f, x, out.data()), at);
        }
        std::vector<std::byte> h(2 * n);
        for (std::size_t i = 0; i < n; ++i) store_le<std::uint16_t>(h.data() + 2 * i, 0x3C00);
        EXPECT_EQ(kernels::find_nonfinite_half(f, h.data(), n), n);
        store_le<std::uint16_t>(h.data() + 2 * at, f == HalfFormat::kFp16 ? 0xFC01 : 0x7F80);
        EXPECT_EQ(kernels::find_nonfinite_half(f, h.data(), n), at);
      }
    }
  }
}

// ---- the codec -----------------------------------------------------------------------

TEST(Fp16Codec, RoundTripsSaturatesAndRejectsNonFinite) {
  for (const char* spec : {"fp16", "fp16:format=bf16"}) {
    auto c = builtin_registry().make_codec(spec);
    const bool bf = c->spec() == "fp16:format=bf16";
    const HalfFormat f = bf ? HalfFormat::kBf16 : HalfFormat::kFp16;
    EXPECT_TRUE(c->traits().linear);
    EXPECT_FALSE(c->traits().unbiased);
    EXPECT_FALSE(c->traits().needs_memory);
    const LinearRegion r = c->linear_region(77);
    EXPECT_EQ(r.offset, kHeaderBytes);
    EXPECT_EQ(r.count, 77u);
    EXPECT_EQ(r.dtype, bf ? WireDType::kBFloat16 : WireDType::kFloat16);
    EXPECT_EQ(c->max_encoded_bytes(77), kHeaderBytes + 154);

    auto x = test::random_gradient(1001, 4, 3.0f);
    x[5] = 1e6f;
    x[6] = -1e38f;
    const auto msg = test::encode(*c, x);
    ASSERT_EQ(msg.size(), kHeaderBytes + 2 * x.size());
    const auto d = test::decode(*c, msg, x.size());
    for (std::size_t i = 0; i < x.size(); ++i) {
      ASSERT_EQ(d[i], kernels::half_to_float_ref(f, kernels::float_to_half_ref(f, x[i]))) << i;
    }
    if (!bf) {
      EXPECT_EQ(d[5], 65504.0f);  // saturated, not inf
      EXPECT_EQ(d[6], -65504.0f);
    }
    EXPECT_TRUE(std::isfinite(d[6]));
    for (float bad :
         {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
      auto y = x;
      y[700] = bad;
      try {
        test::encode(*c, y);
        ADD_FAILURE() << "accepted non-finite";
      } catch (const InvalidArgument& e) {
        EXPECT_NE(std::string(e.what()).find("fp16 encode: non-finite value"), std::string::npos)
            << e.what();
        EXPECT_NE(std::string(e.what()).find("at index 700"), std::string::npos) << e.what();
      }
    }
  }
}

// Linear: summing two ranks' payloads in the 16-bit format (what an fp16 allreduce does)
// decodes to the sum when it is representable (integers here).
TEST(Fp16Codec, MessagesSumInTheHalfFormat) {
  for (const char* spec : {"fp16", "fp16:format=bf16"}) {
    auto c = builtin_registry().make_codec(spec);
    const HalfFormat f = c->spec() == "fp16:format=bf16" ? HalfFormat::kBf16 : HalfFormat::kFp16;
    const std::size_t n = 333;
    const auto a = test::integer_gradient(n, 1, 60);
    const auto b = test::integer_gradient(n, 2, 60);
    auto ma = test::encode(*c, a, {.rank = 0});
    const auto mb = test::encode(*c, b, {.rank = 1});
    const LinearRegion r = c->linear_region(n);
    // Equal outside the region but for the checksum, which covers the region too.
    EXPECT_EQ(0, std::memcmp(ma.data(), mb.data(), kCrcOffset));
    EXPECT_EQ(0, std::memcmp(ma.data() + kHeaderBytes, mb.data() + kHeaderBytes,
                             r.offset - kHeaderBytes));
    for (std::size_t i = 0; i < r.count; ++i) {
      std::byte* pa = ma.data() + r.offset + 2 * i;
      const float s =
          kernels::half_to_float_ref(f, load_le<std::uint16_t>(pa)) +
          kernels::half_to_float_ref(f, load_le<std::uint16_t>(mb.data() + r.offset + 2 * i));
      store_le<std::uint16_t>(pa, kernels::float_to_half_ref(f, s));
    }
    reseal_message(ma);  // as the allreduce reducer does after the sum
    const auto sum = test::decode(*c, ma, n);
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(sum[i], a[i] + b[i]) << i;
  }
}

// Saturation loses nothing under error feedback: the excess is sent on later steps.
TEST(Fp16Codec, ErrorFeedbackCarriesTheSaturatedExcess) {
  auto mem = builtin_registry().make_memory("ef(fp16)", 2);
  std::vector<std::byte> msg(mem->max_encoded_bytes());
  const std::vector<float> g = {100000.0f, -200000.0f};
  std::vector<float> sent(2, 0.0f);
  std::vector<float> zero(2, 0.0f);
  for (std::uint64_t step = 0; step < 5; ++step) {
    const std::size_t bytes = mem->compress(step == 0 ? g : zero, {.step = step}, msg);
    mem->codec().decode_add({msg.data(), bytes}, sent);
  }
  EXPECT_EQ(sent[0], 100000.0f);
  EXPECT_EQ(sent[1], -200000.0f);
}

}  // namespace
}  // namespace gradcomp
