// The packing kernels: layouts written out by hand, and every fast kernel (AVX2 and the
// OpenMP chunking) equal to its scalar reference bit for bit, for every n in 0..300, the
// contract sweep sizes and sizes past the parallel threshold, with guard bytes.
#include "detail/bitpack.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <span>
#include <vector>

#include "detail/reductions.h"
#include "gradcomp/crc32c.h"
#include "gradcomp/rng.h"
#include "support/test_support.h"

namespace gradcomp::detail {
namespace {

using test::bytes_of;
using test::payload_of;
using test::same_bits;

std::vector<std::size_t> sizes() {
  std::vector<std::size_t> s;
  for (std::size_t n = 0; n <= 300; ++n) s.push_back(n);
  for (std::size_t n : test::kSweepSizes) s.push_back(n);
  // Past the OpenMP threshold (1 << 16), with a partial last chunk and word.
  for (std::size_t n : {std::size_t{1} << 17, (std::size_t{1} << 17) + 33, std::size_t{200003}}) {
    s.push_back(n);
  }
  return s;
}

// Inputs with the values that decide codes: exactly +-tau, +-0, NaN, huge, tiny.
std::vector<float> tricky_input(std::size_t n, std::uint64_t seed, float tau) {
  auto g = test::random_gradient(n, seed);
  const CounterRng rng(seed * 31 + 7);
  const float special[] = {tau,
                           -tau,
                           0.0f,
                           -0.0f,
                           std::nextafter(tau, 0.0f),
                           -std::nextafter(tau, 0.0f),
                           std::numeric_limits<float>::quiet_NaN(),
                           1e30f,
                           -1e30f,
                           1e-40f};
  for (std::size_t i = 0; i < n; ++i) {
    if (rng.below(static_cast<std::uint32_t>(i), 8) == 0) {
      g[i] = special[rng.below(static_cast<std::uint32_t>(i + n), 10)];
    }
  }
  return g;
}

std::vector<std::byte> random_bytes(std::size_t n, std::uint64_t seed) {
  const CounterRng rng(seed);
  std::vector<std::byte> b(n);
  for (std::size_t i = 0; i < n; ++i)
    b[i] = static_cast<std::byte>(rng.bits(static_cast<std::uint32_t>(i)));
  return b;
}

// Values spread over 60 binades, so that double sums round and their order matters.
std::vector<float> wide_input(std::size_t n, std::uint64_t seed) {
  auto x = test::random_gradient(n, seed);
  const CounterRng rng(seed + 99);
  for (std::size_t i = 0; i < n; ++i) {
    x[i] = std::ldexp(x[i], static_cast<int>(rng.below(static_cast<std::uint32_t>(i), 61)) - 30);
  }
  return x;
}

constexpr std::byte kGuard{0xA5};
constexpr std::size_t kGuardBytes = 64;

// Runs an encoder into a guarded buffer of `bytes` and checks the guard.
template <class F>
std::vector<std::byte> guarded(std::size_t bytes, const F& f) {
  std::vector<std::byte> buf(bytes + kGuardBytes, kGuard);
  f(buf.data());
  for (std::size_t i = bytes; i < buf.size(); ++i) {
    EXPECT_EQ(buf[i], kGuard) << "wrote past the payload at byte " << i;
  }
  buf.resize(bytes);
  return buf;
}

TEST(BitPack, TwoBitLayoutByHand) {
  // Codes of values 0..17; first value in the most significant bits of byte 0.
  const std::vector<std::uint8_t> codes = {3, 2, 0, 3,  // 11 10 00 11 = 0xE3
                                           2, 0, 0, 3,  // 10 00 00 11 = 0x83
                                           1, 0, 0, 0,  // 01 00 00 00 = 0x40
                                           0, 0, 0, 2,  // 00 00 00 10 = 0x02
                                           3, 2};       // 11 10 00 00 = 0xE0, then padding
  std::vector<std::byte> out(packed2_bytes(codes.size()), std::byte{0xFF});
  ASSERT_EQ(out.size(), 8u);
  pack2_ref(codes.data(), codes.size(), out.data());
  EXPECT_EQ(out, bytes_of({0xE3, 0x83, 0x40, 0x02, 0xE0, 0, 0, 0}));
  for (std::size_t i = 0; i < codes.size(); ++i) EXPECT_EQ(code2_at(out.data(), i), codes[i]) << i;
}

TEST(BitPack, OneBitLayoutByHand) {
  // 1 0 1 1 0 0 0 1 | 0 0 0 0 0 0 0 1 | 1
  const std::vector<std::uint8_t> bits = {1, 0, 1, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 1};
  std::vector<std::byte> out(packed1_bytes(bits.size()), std::byte{0xFF});
  ASSERT_EQ(out.size(), 4u);
  pack1_ref(bits.data(), bits.size(), out.data());
  EXPECT_EQ(out, bytes_of({0xB1, 0x01, 0x80, 0x00}));
  for (std::size_t i = 0; i < bits.size(); ++i) EXPECT_EQ(bit1_at(out.data(), i), bits[i]) << i;
}

TEST(BitPack, PayloadSizes) {
  EXPECT_EQ(packed2_bytes(0), 0u);
  EXPECT_EQ(packed2_bytes(1), 4u);
  EXPECT_EQ(packed2_bytes(16), 4u);
  EXPECT_EQ(packed2_bytes(17), 8u);
  EXPECT_EQ(packed1_bytes(0), 0u);
  EXPECT_EQ(packed1_bytes(32), 4u);
  EXPECT_EQ(packed1_bytes(33), 8u);
  EXPECT_EQ(packed2_bytes(0xFFFFFFFFu), 4 * std::size_t{0x10000000});
}

TEST(BitPack, ThresholdFastEqualsReference) {
  for (std::size_t n : sizes()) {
    SCOPED_TRACE("n=" + std::to_string(n));
    const float tau = 0.5f;
    const auto p = tricky_input(n, n + 1, tau);
    const auto ref = guarded(packed2_bytes(n),
                             [&](std::byte* o) { threshold2_encode_ref(p.data(), n, tau, o); });
    const auto fast =
        guarded(packed2_bytes(n), [&](std::byte* o) { threshold2_encode(p.data(), n, tau, o); });
    ASSERT_EQ(fast, ref);

    const Lut2 lut{{-0.0f, 123.0f, tau, -tau}};
    auto p_ref = p, p_fast = p;
    const auto fb_ref = guarded(packed2_bytes(n), [&](std::byte* o) {
      threshold2_encode_feedback_ref(p_ref.data(), n, tau, lut, o);
    });
    const auto fb_fast = guarded(packed2_bytes(n), [&](std::byte* o) {
      threshold2_encode_feedback(p_fast.data(), n, tau, lut, o);
    });
    ASSERT_EQ(fb_ref, ref);
    ASSERT_EQ(fb_fast, ref);
    ASSERT_TRUE(same_bits(p_fast, p_ref));
  }
}

// FiniteCheck::kYes: the same codes and feedback, and false exactly when some value is
// inf or NaN, wherever it sits (SIMD body, scalar tail, any OpenMP chunk).
TEST(BitPack, ThresholdFiniteCheckFindsEveryNonFinite) {
  const float tau = 0.5f;
  for (std::size_t n : sizes()) {
    if (n == 0) continue;
    SCOPED_TRACE("n=" + std::to_string(n));
    auto p = test::random_gradient(n, n + 5);
    std::vector<std::byte> codes(packed2_bytes(n)), want(packed2_bytes(n));
    ASSERT_TRUE(threshold2_encode(p.data(), n, tau, codes.data(), FiniteCheck::kYes));
    for (const std::size_t at : {std::size_t{0}, n / 2, n - 1}) {
      for (const float bad :
           {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity()}) {
        auto q = p;
        q[at] = bad;
        threshold2_encode_ref(q.data(), n, tau, want.data());
        ASSERT_FALSE(threshold2_encode(q.data(), n, tau, codes.data(), FiniteCheck::kYes)) << at;
        ASSERT_EQ(codes, want);
        auto fb = q, fb_ref = q;
        const Lut2 lut{{0.0f, 0.0f, tau, -tau}};
        threshold2_encode_feedback_ref(fb_ref.data(), n, tau, lut, want.data());
        ASSERT_FALSE(threshold2_encode_feedback(fb.data(), n, tau, lut, codes.data(), nullptr,
                                                FiniteCheck::kYes))
            << at;
        ASSERT_EQ(codes, want);
        ASSERT_TRUE(same_bits(fb, fb_ref));
      }
    }
  }
}

TEST(BitPack, ReferenceMatchesTheDefinition) {
  // The scalar reference against code2_at / the comparison, element by element.
  const std::size_t n = 1001;
  const float tau = 0.25f;
  const auto p = tricky_input(n, 3, tau);
  std::vector<std::byte> out(packed2_bytes(n));
  threshold2_encode_ref(p.data(), n, tau, out.data());
  for (std::size_t i = 0; i < n; ++i) {
    const unsigned want = p[i] >= tau ? 3u : (p[i] <= -tau ? 2u : 0u);
    ASSERT_EQ(code2_at(out.data(), i), want) << i << " p=" << p[i];
  }
  for (std::size_t i = n; i < 4 * out.size(); ++i) ASSERT_EQ(code2_at(out.data(), i), 0u) << i;
}

TEST(BitPack, SignFastEqualsReference) {
  for (std::size_t n : sizes()) {
    SCOPED_TRACE("n=" + std::to_string(n));
    for (SignRule rule : {SignRule::kGreater, SignRule::kGreaterEqual}) {
      for (float t : {0.0f, 0.3f}) {
        const auto p = tricky_input(n, n + 5, t);
        const auto ref = guarded(packed1_bytes(n),
                                 [&](std::byte* o) { sign_encode_ref(p.data(), n, t, rule, o); });
        const auto fast =
            guarded(packed1_bytes(n), [&](std::byte* o) { sign_encode(p.data(), n, t, rule, o); });
        ASSERT_EQ(fast, ref);
        for (std::size_t i = 0; i < std::min<std::size_t>(n, 300); ++i) {
          const bool want = rule == SignRule::kGreater ? p[i] > t : p[i] >= t;
          ASSERT_EQ(bit1_at(ref.data(), i), want ? 1u : 0u) << i;
        }

        const Lut1 lut{{0.75f, -0.75f}};
        auto p_ref = p, p_fast = p;
        const auto fb_ref = guarded(packed1_bytes(n), [&](std::byte* o) {
          sign_encode_feedback_ref(p_ref.data(), n, t, rule, lut, o);
        });
        const auto fb_fast = guarded(packed1_bytes(n), [&](std::byte* o) {
          sign_encode_feedback(p_fast.data(), n, t, rule, lut, o);
        });
        ASSERT_EQ(fb_ref, ref);
        ASSERT_EQ(fb_fast, ref);
        ASSERT_TRUE(same_bits(p_fast, p_ref));
      }
    }
  }
}

// The checksummed encoders write the same bytes (and feedback) as the plain ones and
// return crc32c() of them, across the piece boundaries (kSignCrcPiece) and the parallel
// threshold.
TEST(BitPack, SignChecksummedEqualsEncodeThenCrc) {
  std::vector<std::size_t> ns = sizes();
  for (std::size_t n : {kSignCrcPiece - 1, kSignCrcPiece, kSignCrcPiece + 1, kSignCrcPiece + 32,
                        3 * kSignCrcPiece + 33}) {
    ns.push_back(n);
  }
  for (std::size_t n : ns) {
    SCOPED_TRACE("n=" + std::to_string(n));
    for (SignRule rule : {SignRule::kGreater, SignRule::kGreaterEqual}) {
      const float t = rule == SignRule::kGreater ? 0.3f : 0.0f;
      const auto p = tricky_input(n, n + 17, t);
      const auto plain =
          guarded(packed1_bytes(n), [&](std::byte* o) { sign_encode(p.data(), n, t, rule, o); });
      const std::uint32_t want = crc32c(std::as_bytes(std::span(plain)));
      std::uint32_t got = 0;
      const auto fused = guarded(
          packed1_bytes(n), [&](std::byte* o) { got = sign_encode_crc(p.data(), n, t, rule, o); });
      ASSERT_EQ(fused, plain);
      ASSERT_EQ(got, want);

      const Lut1 lut{{0.75f, -0.75f}};
      auto p_plain = p, p_fused = p;
      (void)guarded(packed1_bytes(n), [&](std::byte* o) {
        sign_encode_feedback(p_plain.data(), n, t, rule, lut, o);
      });
      const auto fb = guarded(packed1_bytes(n), [&](std::byte* o) {
        got = sign_encode_feedback_crc(p_fused.data(), n, t, rule, lut, o);
      });
      ASSERT_EQ(fb, plain);
      ASSERT_EQ(got, want);
      ASSERT_TRUE(same_bits(p_fused, p_plain));
    }
  }
}

TEST(BitPack, TernaryFastEqualsReference) {
  for (std::size_t n : sizes()) {
    SCOPED_TRACE("n=" + std::to_string(n));
    auto g = test::random_gradient(n, n + 9);
    for (std::size_t i = 0; i < n; i += 7) g[i] = (i % 2) ? 0.0f : -0.0f;
    const float s = std::bit_cast<float>(abs_max_bits_ref(g.data(), n));
    if (!(s > 0.0f)) continue;
    const CounterRng rng =
        CounterRng::for_step({.seed = 5, .step = n, .rank = 3}, RngScope::kPerRank);
    for (float bound : {std::numeric_limits<float>::infinity(), 0.5f * s}) {
      const float scale = std::min(s, bound);
      const auto ref = guarded(packed2_bytes(n), [&](std::byte* o) {
        ternary_encode_ref(g.data(), n, scale, bound, rng, o);
      });
      const auto fast = guarded(packed2_bytes(n), [&](std::byte* o) {
        ternary_encode(g.data(), n, scale, bound, rng, o);
      });
      ASSERT_EQ(fast, ref);
      // The definition, literally.
      for (std::size_t i = 0; i < std::min<std::size_t>(n, 300); ++i) {
        const float a = std::min(std::fabs(g[i]), bound);
        const bool sent = rng.uniform(static_cast<std::uint32_t>(i)) < a / scale;
        const unsigned want = sent ? (g[i] < 0 ? 2u : 3u) : 0u;
        ASSERT_EQ(code2_at(ref.data(), i), want) << i;
      }
    }
  }
}

TEST(BitPack, UnpackFastEqualsReference) {
  for (std::size_t n : sizes()) {
    SCOPED_TRACE("n=" + std::to_string(n));
    // Random codes, 01 included (the kernels map it through lut.v[1]; validation rejects
    // it before decoding in the codecs).
    const auto packed2 = random_bytes(packed2_bytes(n), n + 11);
    const auto packed1 = random_bytes(packed1_bytes(n), n + 12);
    const auto base = test::random_gradient(n, n + 13);
    const Lut2 lut2{{-0.0f, 7.0f, 0.3f, -0.3f}};
    const Lut1 lut1{{-1.5f, 2.5f}};

    std::vector<float> guard_ref(n + 16, 9.0f), guard_fast(n + 16, 9.0f);
    std::copy(base.begin(), base.end(), guard_ref.begin());
    std::copy(base.begin(), base.end(), guard_fast.begin());
    unpack2_add_ref(packed2.data(), n, lut2, guard_ref.data());
    unpack2_add(packed2.data(), n, lut2, guard_fast.data());
    ASSERT_TRUE(same_bits(guard_fast, guard_ref));
    for (std::size_t i = n; i < n + 16; ++i) ASSERT_EQ(guard_fast[i], 9.0f);
    for (std::size_t i = 0; i < std::min<std::size_t>(n, 300); ++i) {
      ASSERT_EQ(guard_ref[i], base[i] + lut2.v[code2_at(packed2.data(), i)]);
    }

    std::copy(base.begin(), base.end(), guard_ref.begin());
    std::copy(base.begin(), base.end(), guard_fast.begin());
    unpack1_add_ref(packed1.data(), n, lut1, guard_ref.data());
    unpack1_add(packed1.data(), n, lut1, guard_fast.data());
    ASSERT_TRUE(same_bits(guard_fast, guard_ref));
    for (std::size_t i = n; i < n + 16; ++i) ASSERT_EQ(guard_fast[i], 9.0f);
    for (std::size_t i = 0; i < std::min<std::size_t>(n, 300); ++i) {
      ASSERT_EQ(guard_ref[i], base[i] + lut1.v[bit1_at(packed1.data(), i)]);
    }
  }
}

TEST(BitPack, EncodeDecodeRoundTrip) {
  // Random codes -> pack_ref -> unpack (fast) recovers each code's lut value.
  for (std::size_t n : {std::size_t{0}, std::size_t{15}, std::size_t{16}, std::size_t{17},
                        std::size_t{33}, std::size_t{1000}, std::size_t{200003}}) {
    const CounterRng rng(n);
    std::vector<std::uint8_t> codes(n), bits(n);
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint32_t r = rng.below(static_cast<std::uint32_t>(i), 3);
      codes[i] = static_cast<std::uint8_t>(r == 0 ? 0 : r + 1);  // 00, 10, 11
      bits[i] = static_cast<std::uint8_t>(rng.bits(static_cast<std::uint32_t>(i)) >> 31);
    }
    std::vector<std::byte> p2(packed2_bytes(n)), p1(packed1_bytes(n));
    pack2_ref(codes.data(), n, p2.data());
    pack1_ref(bits.data(), n, p1.data());
    std::vector<float> d2(n, 0.0f), d1(n, 0.0f);
    unpack2_add(p2.data(), n, {{0.0f, 99.0f, -1.0f, 1.0f}}, d2.data());
    unpack1_add(p1.data(), n, {{-1.0f, 1.0f}}, d1.data());
    for (std::size_t i = 0; i < n; ++i) {
      ASSERT_EQ(d2[i], codes[i] == 0 ? 0.0f : (codes[i] == 3 ? 1.0f : -1.0f)) << i;
      ASSERT_EQ(d1[i], bits[i] ? 1.0f : -1.0f) << i;
    }
  }
}

TEST(BitPack, ScanFastEqualsReference) {
  for (std::size_t n : sizes()) {
    SCOPED_TRACE("n=" + std::to_string(n));
    for (int variant = 0; variant < 4; ++variant) {
      auto bytes = random_bytes(packed2_bytes(n), n * 4 + variant);
      if (variant >= 1) {
        // Clear every 01 (make codes valid) and the padding; variant 2 puts one 01 back,
        // variant 3 one padding bit.
        for (auto& b : bytes) {
          auto x = std::to_integer<unsigned>(b);
          x &= ~(~(x >> 1) & x & 0x55u);
          b = static_cast<std::byte>(x);
        }
        std::vector<std::uint8_t> codes(n);
        for (std::size_t i = 0; i < n; ++i)
          codes[i] = static_cast<std::uint8_t>(code2_at(bytes.data(), i));
        if (n > 0) pack2_ref(codes.data(), n, bytes.data());
        if (variant == 2 && n > 0) {
          const std::size_t at = (n * 7) / 11;
          bytes[at / 4] &= ~static_cast<std::byte>(3u << (6 - 2 * (at % 4)));
          bytes[at / 4] |= static_cast<std::byte>(1u << (6 - 2 * (at % 4)));
        }
        if (variant == 3 && n % 16 != 0) bytes.back() |= std::byte{1};
      }
      const Packed2Scan ref = scan_packed2_ref(bytes.data(), n);
      const Packed2Scan fast = scan_packed2(bytes.data(), n);
      ASSERT_EQ(fast.first_invalid, ref.first_invalid) << "variant " << variant;
      ASSERT_EQ(fast.any_nonzero, ref.any_nonzero) << "variant " << variant;
      ASSERT_EQ(fast.padding_clean, ref.padding_clean) << "variant " << variant;
      if (variant == 1) {
        ASSERT_EQ(ref.first_invalid, kNoIndex);
        ASSERT_TRUE(ref.padding_clean);
      }
      if (variant == 2 && n > 0) {
        ASSERT_EQ(ref.first_invalid, (n * 7) / 11);
      }
      if (variant == 3 && n % 16 != 0) {
        ASSERT_FALSE(ref.padding_clean);
      }
    }
  }
}

TEST(BitPack, OneBitPaddingCheck) {
  for (std::size_t n = 0; n <= 70; ++n) {
    std::vector<std::byte> bytes(packed1_bytes(n), std::byte{0xFF});
    std::vector<std::uint8_t> ones(n, 1);
    pack1_ref(ones.data(), n, bytes.data());
    ASSERT_TRUE(packed1_padding_clean(bytes.data(), n)) << n;
    for (std::size_t bit = n; bit < 8 * bytes.size(); ++bit) {
      auto bad = bytes;
      bad[bit / 8] |= static_cast<std::byte>(0x80u >> (bit % 8));
      ASSERT_FALSE(packed1_padding_clean(bad.data(), n)) << n << " bit " << bit;
    }
  }
}

TEST(BitPack, ReductionsFastEqualReference) {
  for (std::size_t n : sizes()) {
    SCOPED_TRACE("n=" + std::to_string(n));
    auto x = wide_input(n, n + 17);
    if (n > 5) x[n / 2] = -1e30f;
    EXPECT_EQ(abs_max_bits(x.data(), n), abs_max_bits_ref(x.data(), n));
    const double s_ref = abs_sum_ref(x.data(), n);
    const double s_fast = abs_sum(x.data(), n);
    EXPECT_EQ(std::bit_cast<std::uint64_t>(s_fast), std::bit_cast<std::uint64_t>(s_ref));
    const Moments m_ref = moments_ref(x.data(), n);
    const Moments m_fast = moments(x.data(), n);
    EXPECT_EQ(std::bit_cast<std::uint64_t>(m_fast.sum), std::bit_cast<std::uint64_t>(m_ref.sum));
    EXPECT_EQ(std::bit_cast<std::uint64_t>(m_fast.sum_sq),
              std::bit_cast<std::uint64_t>(m_ref.sum_sq));
    EXPECT_EQ(m_fast.abs_max_bits, abs_max_bits_ref(x.data(), n));
    EXPECT_EQ(m_ref.abs_max_bits, abs_max_bits_ref(x.data(), n));
    // And the sums are right (to rounding).
    double l1 = 0, sum = 0, sq = 0;
    for (float v : x) {
      l1 += std::fabs(double{v});
      sum += v;
      sq += double{v} * v;
    }
    EXPECT_NEAR(s_ref, l1, 1e-12 * l1);
    EXPECT_NEAR(m_ref.sum, sum, 1e-12 * l1);
    EXPECT_NEAR(m_ref.sum_sq, sq, 1e-12 * sq);
  }
}

TEST(BitPack, AbsMaxSeesNonFinite) {
  std::vector<float> x(100, 1.0f);
  x[37] = -std::numeric_limits<float>::infinity();
  EXPECT_EQ(abs_max_bits(x.data(), x.size()), 0x7F800000u);
  x[90] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_GT(abs_max_bits(x.data(), x.size()), 0x7F800000u);
  EXPECT_GT(moments(x.data(), x.size()).abs_max_bits, 0x7F800000u);
  // Past the parallel threshold too.
  std::vector<float> big(200003, 1.0f);
  big[100001] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_GT(abs_max_bits(big.data(), big.size()), 0x7F800000u);
  EXPECT_GT(moments(big.data(), big.size()).abs_max_bits, 0x7F800000u);
  x.assign(100, -0.0f);
  EXPECT_EQ(abs_max_bits(x.data(), x.size()), 0u);
  EXPECT_EQ(moments(x.data(), x.size()).abs_max_bits, 0u);
}

TEST(BitPack, BlockedSumOrderIsTheDocumentedOne) {
  // Lane l of a block sums offsets = l (mod 16); lanes combine as documented. With
  // values chosen so that float order matters, recompute the definition literally.
  const std::size_t n = 3 * kSumBlock + 40;
  const auto x = wide_input(n, 5);
  double naive = 0.0;
  for (float v : x) naive += std::fabs(v);
  double total = 0.0;
  for (std::size_t begin = 0; begin < n; begin += kSumBlock) {
    double lanes[16] = {};
    for (std::size_t i = begin; i < std::min(n, begin + kSumBlock); ++i)
      lanes[(i - begin) % 16] += std::fabs(x[i]);
    double s[4];
    for (int k = 0; k < 4; ++k) s[k] = (lanes[k] + lanes[k + 8]) + (lanes[k + 4] + lanes[k + 12]);
    total += (s[0] + s[2]) + (s[1] + s[3]);
  }
  EXPECT_EQ(std::bit_cast<std::uint64_t>(abs_sum(x.data(), n)),
            std::bit_cast<std::uint64_t>(total));
  EXPECT_EQ(std::bit_cast<std::uint64_t>(abs_sum_ref(x.data(), n)),
            std::bit_cast<std::uint64_t>(total));
  // The inputs are such that order matters (otherwise this test could not fail).
  EXPECT_NE(std::bit_cast<std::uint64_t>(naive), std::bit_cast<std::uint64_t>(total));
}

TEST(BitPack, TernaryComparisonIsStrict) {
  // g_i = sign * uniform(i) * s puts |g_i| / s exactly on the draw: uniform(i) < u_i is
  // false, so nothing is sent (in particular zeros, drawn u = 0, are never sent); one ulp
  // more and everything is sent.
  for (std::size_t n : {std::size_t{31}, std::size_t{1000}, std::size_t{200003}}) {
    const CounterRng rng = CounterRng::for_step({.seed = 11, .step = n}, RngScope::kPerRank);
    const float s = 4.0f;
    std::vector<float> on(n), above(n);
    for (std::size_t i = 0; i < n; ++i) {
      const float u = rng.uniform(static_cast<std::uint32_t>(i));
      const float sign = (i % 3 == 0) ? -1.0f : 1.0f;
      on[i] = sign * u * s;
      above[i] = sign * std::nextafter(u, 2.0f) * s;
    }
    const auto inf = std::numeric_limits<float>::infinity();
    const auto none = guarded(packed2_bytes(n),
                              [&](std::byte* o) { ternary_encode(on.data(), n, s, inf, rng, o); });
    const auto none_ref = guarded(
        packed2_bytes(n), [&](std::byte* o) { ternary_encode_ref(on.data(), n, s, inf, rng, o); });
    const auto all = guarded(
        packed2_bytes(n), [&](std::byte* o) { ternary_encode(above.data(), n, s, inf, rng, o); });
    ASSERT_EQ(none, none_ref);
    for (std::size_t i = 0; i < n; ++i) {
      ASSERT_EQ(code2_at(none.data(), i), 0u) << i;
      ASSERT_EQ(code2_at(all.data(), i), i % 3 == 0 ? 2u : 3u) << i;
    }
  }
}

}  // namespace
}  // namespace gradcomp::detail
