// Payload attacks on the bit-packed quantizers (2bit, 1bit, terngrad, signsgd, efsign):
// invalid code 01 anywhere (the last element included), every padding bit, bad scales,
// terngrad's s = 0 with nonzero codes. Each must throw CorruptMessage naming the codec
// and leave the destination untouched.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "detail/bitpack.h"
#include "gradcomp/error.h"
#include "gradcomp/registry.h"
#include "gradcomp/wire.h"
#include "support/test_support.h"

namespace gradcomp {
namespace {

// The attacks edit a valid message; resealed (a valid checksum over the edited bytes),
// they reach the codec's own payload validation, which is what these tests are about.
std::vector<std::byte> resealed(std::span<const std::byte> msg) {
  std::vector<std::byte> out(msg.begin(), msg.end());
  if (out.size() >= kHeaderBytes) reseal_message(out);
  return out;
}

// Expects the edited message, resealed, rejected with a CorruptMessage whose text
// contains `needle`, with `out` unchanged.
void expect_rejected(const Codec& c, std::span<const std::byte> msg, std::size_t n,
                     const std::string& needle) {
  auto out = test::random_gradient(n, 5);
  const auto before = out;
  try {
    c.decode_add(resealed(msg), out);
    ADD_FAILURE() << "accepted a corrupt message (" << needle << ")";
  } catch (const CorruptMessage& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).rfind(c.name() + " decode", 0), 0u) << e.what();
  }
  EXPECT_EQ(0, std::memcmp(out.data(), before.data(), 4 * n)) << "destination modified";
}

// Sets the 2-bit code of element i in a payload starting at `codes`.
void set_code(std::byte* codes, std::size_t i, unsigned code) {
  const unsigned shift = 6 - 2 * static_cast<unsigned>(i % 4);
  codes[i / 4] &= ~static_cast<std::byte>(3u << shift);
  codes[i / 4] |= static_cast<std::byte>(code << shift);
}

struct TwoBitCase {
  const char* spec;
  std::size_t codes_at;  // payload offset of the codes
};

TEST(QuantCorrupt, InvalidCode01AtAnyPosition) {
  for (TwoBitCase tc : {TwoBitCase{"2bit:threshold=0.5", 0}, TwoBitCase{"2bit", 4},
                        TwoBitCase{"terngrad", 4}, TwoBitCase{"terngrad:clip=2.5", 4}}) {
    auto c = builtin_registry().make_codec(tc.spec);
    for (std::size_t n : {1u, 16u, 37u, 64u, 1000u}) {
      const auto msg = test::encode(*c, test::random_gradient(n, n), {.seed = 1});
      std::vector<std::size_t> positions = {0, n / 2, n - 1};
      if (n > 5) positions.push_back(5);
      for (std::size_t at : positions) {
        SCOPED_TRACE(std::string(tc.spec) + " n=" + std::to_string(n) +
                     " at=" + std::to_string(at));
        auto bad = msg;
        set_code(bad.data() + kHeaderBytes + tc.codes_at, at, 1);
        expect_rejected(*c, bad, n, "invalid code 01 at element " + std::to_string(at));
      }
    }
  }
}

TEST(QuantCorrupt, NonzeroPaddingBits2Bit) {
  for (TwoBitCase tc :
       {TwoBitCase{"2bit:threshold=0.5", 0}, TwoBitCase{"2bit", 4}, TwoBitCase{"terngrad", 4}}) {
    auto c = builtin_registry().make_codec(tc.spec);
    for (std::size_t n : {1u, 3u, 15u, 17u, 30u, 33u}) {
      const auto msg = test::encode(*c, test::random_gradient(n, n + 1), {.seed = 2});
      const std::size_t bits = 8 * detail::packed2_bytes(n);
      for (std::size_t bit = 2 * n; bit < bits; ++bit) {  // every padding bit, one at a time
        SCOPED_TRACE(std::string(tc.spec) + " n=" + std::to_string(n) +
                     " bit=" + std::to_string(bit));
        auto bad = msg;
        bad[kHeaderBytes + tc.codes_at + bit / 8] |= static_cast<std::byte>(0x80u >> (bit % 8));
        expect_rejected(*c, bad, n, "nonzero padding");
      }
    }
  }
}

TEST(QuantCorrupt, NonzeroPaddingBits1Bit) {
  for (TwoBitCase tc : {TwoBitCase{"1bit", 0}, TwoBitCase{"signsgd", 0}, TwoBitCase{"efsign", 4}}) {
    auto c = builtin_registry().make_codec(tc.spec);
    for (std::size_t n : {1u, 7u, 9u, 31u, 33u, 63u}) {
      const auto msg = test::encode(*c, test::random_gradient(n, n + 2), {.seed = 3});
      const std::size_t bits = 8 * detail::packed1_bytes(n);
      for (std::size_t bit = n; bit < bits; ++bit) {
        SCOPED_TRACE(std::string(tc.spec) + " n=" + std::to_string(n) +
                     " bit=" + std::to_string(bit));
        auto bad = msg;
        bad[kHeaderBytes + tc.codes_at + bit / 8] |= static_cast<std::byte>(0x80u >> (bit % 8));
        expect_rejected(*c, bad, n, "nonzero padding");
      }
    }
  }
}

TEST(QuantCorrupt, BadScales) {
  const float kBad[] = {std::numeric_limits<float>::quiet_NaN(),
                        std::numeric_limits<float>::infinity(),
                        -std::numeric_limits<float>::infinity(),
                        -1.0f,
                        -0.0f,
                        -std::numeric_limits<float>::denorm_min()};
  for (const char* spec : {"terngrad", "efsign", "2bit"}) {
    auto c = builtin_registry().make_codec(spec);
    const std::size_t n = 100;
    const auto msg = test::encode(*c, test::random_gradient(n, 4), {.seed = 4});
    for (float s : kBad) {
      SCOPED_TRACE(std::string(spec) + " s=" + std::to_string(s));
      auto bad = msg;
      store_le<float>(bad.data() + kHeaderBytes, s);
      expect_rejected(*c, bad, n, std::signbit(s) && std::isfinite(s) ? "< 0" : "not finite");
    }
    // A NaN with another payload (signalling, negative) too.
    auto bad = msg;
    store_le<std::uint32_t>(bad.data() + kHeaderBytes, 0xFF800001u);
    expect_rejected(*c, bad, n, "not finite");
  }
}

TEST(QuantCorrupt, AdaptiveTwoBitZeroTauWithNonzeroCodes) {
  auto c = builtin_registry().make_codec("2bit");
  for (std::size_t n : {1u, 20u, 100u}) {
    const auto msg = test::encode(*c, std::vector<float>(n, 0.0f));
    for (unsigned code : {2u, 3u}) {
      auto bad = msg;
      set_code(bad.data() + kHeaderBytes + 4, n - 1, code);
      expect_rejected(*c, bad, n, "tau = 0 with nonzero codes");
    }
  }
}

TEST(QuantCorrupt, TernGradZeroScaleWithNonzeroCodes) {
  auto c = builtin_registry().make_codec("terngrad");
  for (std::size_t n : {1u, 20u, 100u}) {
    const std::vector<float> zero(n, 0.0f);
    const auto msg = test::encode(*c, zero);
    for (unsigned code : {2u, 3u}) {
      auto bad = msg;
      set_code(bad.data() + kHeaderBytes + 4, n - 1, code);
      expect_rejected(*c, bad, n, "s = 0 with nonzero codes");
    }
  }
  // s > 0 with all codes zero is a legal (if unlikely) message.
  auto msg = test::encode(*c, std::vector<float>(20, 0.0f));
  store_le<float>(msg.data() + kHeaderBytes, 1.0f);
  reseal_message(msg);
  std::vector<float> out(20, 2.0f);
  c->decode_add(msg, out);
  EXPECT_EQ(out, std::vector<float>(20, 2.0f));
}

TEST(QuantCorrupt, WrongPayloadLength) {
  for (const char* spec : {"2bit", "2bit:threshold=0.5", "1bit", "terngrad", "signsgd", "efsign"}) {
    auto c = builtin_registry().make_codec(spec);
    const std::size_t n = 40;
    const auto msg = test::encode(*c, test::random_gradient(n, 6));
    // Drop / add 4 bytes, header length patched to match.
    for (int delta : {-4, 4}) {
      auto bad = msg;
      bad.resize(static_cast<std::size_t>(static_cast<std::ptrdiff_t>(bad.size()) + delta));
      store_le<std::uint32_t>(bad.data() + 16,
                              static_cast<std::uint32_t>(bad.size() - kHeaderBytes));
      expect_rejected(*c, bad, n, "payload of");
    }
  }
}

TEST(QuantCorrupt, ValidMessagesWithEveryCodeStillDecode) {
  // The validators must not reject what an encoder can write: codes 00/10/11 anywhere.
  auto c = builtin_registry().make_codec("2bit:threshold=0.5");
  for (std::size_t n : {1u, 4u, 16u, 17u, 100u}) {
    auto msg = test::encode(*c, std::vector<float>(n, 0.0f));
    for (std::size_t i = 0; i < n; ++i) {
      set_code(msg.data() + kHeaderBytes, i, static_cast<unsigned>(i % 3 == 0 ? 0 : i % 3 + 1));
    }
    reseal_message(msg);
    const auto d = test::decode(*c, msg, n);
    for (std::size_t i = 0; i < n; ++i)
      ASSERT_EQ(d[i], (i % 3 == 0) ? 0.0f : (i % 3 == 1 ? -0.5f : 0.5f)) << i;
  }
}

}  // namespace
}  // namespace gradcomp
