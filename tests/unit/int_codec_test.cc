// The int codec against a scalar reference (absmax per block, round half to even), its
// error bound, and its payload validation (IntCorrupt: each well-framed but invalid payload
// is refused with the destination untouched).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "detail/bitstream.h"
#include "gradcomp/error.h"
#include "gradcomp/registry.h"
#include "gradcomp/wire.h"
#include "support/test_support.h"

namespace gradcomp {
namespace {

std::shared_ptr<const Codec> int_codec(unsigned bits, std::size_t block) {
  return builtin_registry().make_codec("int:bits=" + std::to_string(bits) +
                                       ",block=" + std::to_string(block));
}

// The format as docs/algorithms/quantization.md states it, element by element.
std::vector<float> reference_roundtrip(std::span<const float> g, unsigned bits, std::size_t d) {
  const double q = (1u << (bits - 1)) - 1;
  std::vector<float> out(g.size());
  for (std::size_t b0 = 0; b0 < g.size(); b0 += d) {
    const std::size_t end = std::min(g.size(), b0 + d);
    float s = 0;
    for (std::size_t i = b0; i < end; ++i) s = std::max(s, std::fabs(g[i]));
    const float step = s / static_cast<float>(q);
    for (std::size_t i = b0; i < end; ++i) {
      const double c = s == 0 ? 0 : std::nearbyint(static_cast<double>(g[i]) * (q / s));
      out[i] = 1.0f * (static_cast<float>(c) * step) + 0.0f;
    }
  }
  return out;
}

TEST(IntCodec, MatchesTheReferenceAndItsBound) {
  for (unsigned bits : {2u, 4u, 8u}) {
    for (std::size_t d : {1u, 7u, 64u, 1000u}) {
      auto c = int_codec(bits, d);
      for (std::size_t n : test::kSweepSizes) {
        SCOPED_TRACE("bits " + std::to_string(bits) + " d " + std::to_string(d) + " n " +
                     std::to_string(n));
        auto g = test::random_gradient(n, 5 + n);
        if (n > 10) std::fill(g.begin() + 2, g.begin() + 9, 0.0f);  // a zero block at d = 7
        const auto msg = test::encode(*c, g, {});
        ASSERT_EQ(msg.size(), c->max_encoded_bytes(n));
        const auto got = test::decode(*c, msg, n);
        const auto want = reference_roundtrip(g, bits, d);
        const float q = static_cast<float>((1u << (bits - 1)) - 1);
        for (std::size_t i = 0; i < n; ++i) {
          ASSERT_EQ(got[i], want[i]) << "i " << i;
          float s = 0;
          for (std::size_t k = i / d * d; k < std::min(n, i / d * d + d); ++k) {
            s = std::max(s, std::fabs(g[k]));
          }
          ASSERT_LE(std::fabs(got[i] - g[i]), s / (2 * q) + s * 1e-6f) << "i " << i;
        }
      }
    }
  }
}

TEST(IntCodec, FourBitsCostAQuarterOfFp16) {
  const std::size_t n = 1 << 20;
  const double ratio =
      static_cast<double>(int_codec(4, 64)->max_encoded_bytes(n)) /
      static_cast<double>(builtin_registry().make_codec("fp16")->max_encoded_bytes(n));
  EXPECT_NEAR(ratio, (4.0 + 32.0 / 64) / 16.0, 1e-4);
}

TEST(IntCodec, RefusesNonFiniteInput) {
  auto c = int_codec(4, 8);
  for (float bad :
       {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    auto g = test::random_gradient(100, 3);
    g[50] = bad;
    std::vector<std::byte> out(c->max_encoded_bytes(g.size()));
    EXPECT_THROW(c->encode(g, {}, out), InvalidArgument);
  }
}

// ---- corrupt payloads

struct IntMessage {
  std::size_t n, d, nb;
  unsigned w;
  std::vector<std::byte> msg;
  std::vector<std::uint32_t> codes;

  IntMessage(const Codec& c, unsigned bits, std::size_t d_, std::vector<float> g)
      : n(g.size()), d(d_), nb((g.size() + d_ - 1) / d_), w(bits) {
    msg = test::encode(c, g, {});
    codes.resize(n);
    detail::unpack_codes_ref(stream(), n, w, codes.data());
  }
  std::byte* stream() { return msg.data() + kHeaderBytes + 4 * nb; }
  void set_scale(std::size_t b, float v) { store_le<float>(msg.data() + kHeaderBytes + 4 * b, v); }
  std::vector<std::byte> with_code(std::size_t i, std::uint32_t code) const {
    auto c = codes;
    c[i] = code;
    std::vector<std::byte> out = msg;
    detail::pack_codes_ref(c.data(), n, w, out.data() + kHeaderBytes + 4 * nb);
    return out;
  }
};

void expect_rejected(const Codec& c, std::vector<std::byte> msg, std::size_t n,
                     const std::string& needle) {
  SCOPED_TRACE(needle);
  reseal_message(msg);
  auto out = test::random_gradient(n, 77);
  const auto before = out;
  try {
    c.decode_add(msg, out);
    ADD_FAILURE() << "accepted a corrupt message";
  } catch (const CorruptMessage& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
  EXPECT_EQ(0, std::memcmp(out.data(), before.data(), 4 * n)) << "destination modified";
}

TEST(IntCorrupt, BadScalesAreRejected) {
  auto c = int_codec(4, 64);
  const IntMessage m(*c, 4, 64, test::random_gradient(300, 1));
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    -1.0f, -0.0f}) {
    IntMessage e = m;
    e.set_scale(m.nb - 1, bad);
    expect_rejected(*c, e.msg, m.n, "block " + std::to_string(m.nb - 1) + " has scale");
  }
}

TEST(IntCorrupt, CodesPastTheLevelsAreRejected) {
  for (unsigned bits : {2u, 4u, 8u}) {
    auto c = int_codec(bits, 64);
    const IntMessage m(*c, bits, 64, test::random_gradient(1000, 2));
    const std::uint32_t top = (1u << bits) - 1;  // 2q + 1
    expect_rejected(*c, m.with_code(997, top), m.n, "element 997 has code " + std::to_string(top));
    std::vector<std::byte> ok = m.with_code(997, top - 1);
    reseal_message(ok);
    EXPECT_NO_THROW(test::decode(*c, ok, m.n));
  }
}

TEST(IntCorrupt, NonzeroCodeInAZeroBlockIsRejected) {
  auto c = int_codec(4, 16);
  auto g = test::random_gradient(100, 4);
  std::fill(g.begin() + 16, g.begin() + 32, 0.0f);
  const IntMessage m(*c, 4, 16, g);
  expect_rejected(*c, m.with_code(20, 8), m.n, "element 20 is nonzero in block 1 of scale 0");
}

TEST(IntCorrupt, PaddingAndLengthAreChecked) {
  auto c = int_codec(4, 64);
  IntMessage m(*c, 4, 64, test::random_gradient(9, 5));  // 36 bits: 28 bits of padding
  std::vector<std::byte> bad = m.msg;
  ASSERT_FALSE(bad.empty());  // (and GCC 12 then knows back() is in bounds)
  bad.back() |= std::byte{0x80};
  expect_rejected(*c, bad, m.n, "nonzero padding");
  std::vector<std::byte> shorter(m.msg.begin(), m.msg.end() - 4);
  store_le<std::uint32_t>(shorter.data() + 16,
                          static_cast<std::uint32_t>(shorter.size() - kHeaderBytes));
  expect_rejected(*c, shorter, m.n, "int decode");
}

}  // namespace
}  // namespace gradcomp
