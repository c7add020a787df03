// Payload attacks on qsgd and randomk: each well-framed but invalid payload must be
// rejected with CorruptMessage naming the problem, and leave the destination as it was.
// (Framing, truncation and header attacks are in codec_corrupt_test.cc.)
#include <gtest/gtest.h>

#include <bit>
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

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<std::byte> resealed(std::span<const std::byte> msg);

// Expects the edited message, resealed, rejected naming `needle`, with `out` unchanged.
void expect_rejected(const Codec& c, std::span<const std::byte> msg, std::size_t n,
                     const std::string& needle) {
  SCOPED_TRACE(needle);
  auto out = test::random_gradient(n, 77);
  const auto before = out;
  try {
    c.decode_add(resealed(msg), out);
    ADD_FAILURE() << "accepted a corrupt message";
  } catch (const CorruptMessage& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
  EXPECT_EQ(0, std::memcmp(out.data(), before.data(), 4 * n)) << "destination modified";
}

// The attacks edit a valid message; resealed (a valid checksum over the edited bytes),
// they reach the codec's own payload validation, which is what these tests are about.
std::vector<std::byte> resealed(std::span<const std::byte> msg) {
  std::vector<std::byte> out(msg.begin(), msg.end());
  if (out.size() >= kHeaderBytes) reseal_message(out);
  return out;
}

// A qsgd message opened up: norms and codes, editable, and re-serialised.
struct QsgdMessage {
  std::size_t n, d, nb;
  unsigned m, w;
  std::vector<std::byte> msg;
  std::vector<std::uint32_t> codes;

  QsgdMessage(const Codec& c, std::uint32_t s, std::size_t d_, std::vector<float> g)
      : n(g.size()), d(d_), nb((g.size() + d_ - 1) / d_) {
    m = static_cast<unsigned>(std::bit_width(s));
    w = m + 1;
    msg = test::encode(c, g, {.seed = 11, .step = 3});
    codes.resize(n);
    detail::unpack_codes_ref(stream(), n, w, codes.data());
  }
  std::byte* stream() { return msg.data() + kHeaderBytes + 4 * nb; }
  void set_norm(std::size_t b, float v) { store_le<float>(msg.data() + kHeaderBytes + 4 * b, v); }
  float norm(std::size_t b) const { return load_le<float>(msg.data() + kHeaderBytes + 4 * b); }
  std::vector<std::byte> with_code(std::size_t i, std::uint32_t code) {
    auto c = codes;
    c[i] = code;
    std::vector<std::byte> out = msg;
    detail::pack_codes_ref(c.data(), n, w, out.data() + kHeaderBytes + 4 * nb);
    return out;
  }
};

std::shared_ptr<const Codec> qsgd(std::uint32_t s, std::size_t d) {
  return builtin_registry().make_codec("qsgd:levels=" + std::to_string(s) +
                                       ",bucket=" + std::to_string(d));
}

TEST(QsgdCorrupt, BadNormsAreRejected) {
  auto c = qsgd(16, 64);
  for (std::size_t n : {200, 300000}) {
    QsgdMessage q(*c, 16, 64, test::random_gradient(n, 1));
    for (float bad : {kNaN, kInf, -kInf, -1.0f, -0.0f, -std::numeric_limits<float>::denorm_min()}) {
      auto bad_msg = q;
      bad_msg.set_norm(q.nb - 1, bad);
      expect_rejected(*c, bad_msg.msg, n, "qsgd decode: bucket " + std::to_string(q.nb - 1));
    }
  }
}

TEST(QsgdCorrupt, LevelAboveSIsRejected) {
  // s = 16: m = 5 bits hold levels up to 31; 17..31 are invalid.
  auto c = qsgd(16, 512);
  for (std::size_t n : {100, 5000, 300000}) {  // first block, a later block, parallel path
    QsgdMessage q(*c, 16, 512, test::random_gradient(n, 2));
    const std::size_t i = n - 3;
    for (std::uint32_t level : {17u, 31u}) {
      for (std::uint32_t sign : {0u, 1u}) {
        expect_rejected(*c, q.with_code(i, level | sign << q.m), n,
                        "element " + std::to_string(i) + " has level " + std::to_string(level) +
                            " > levels 16");
      }
    }
    EXPECT_NO_THROW(test::decode(*c, resealed(q.with_code(i, 16)), n));  // level s itself is valid
  }
  // s = 255 (w = 9, an AVX2 group width > 8) and s = 65535 (w = 17, the generic path).
  for (std::uint32_t s : {200u, 40000u}) {
    auto cs = qsgd(s, 100);
    QsgdMessage q(*cs, s, 100, test::random_gradient(1000, 3));
    expect_rejected(*cs, q.with_code(777, s + 1), 1000, "level " + std::to_string(s + 1));
  }
}

TEST(QsgdCorrupt, NegativeZeroIsRejected) {
  for (std::uint32_t s : {1u, 15u, 16u, 65535u}) {
    auto c = qsgd(s, 33);
    QsgdMessage q(*c, s, 33, test::random_gradient(500, 4));
    expect_rejected(*c, q.with_code(123, 1u << q.m), 500, "element 123 is a negative zero");
  }
}

TEST(QsgdCorrupt, NonzeroLevelInAZeroNormBucketIsRejected) {
  auto c = qsgd(16, 64);
  auto g = test::random_gradient(640, 5);
  std::fill(g.begin() + 128, g.begin() + 192, 0.0f);  // bucket 2 is all zero
  QsgdMessage q(*c, 16, 64, g);
  ASSERT_EQ(q.norm(2), 0.0f);
  expect_rejected(*c, q.with_code(150, 1), 640, "element 150 has level 1 but bucket 2 has norm 0");
  expect_rejected(*c, q.with_code(191, 16 | 1u << q.m), 640, "bucket 2 has norm 0");
  // A norm zeroed under nonzero codes.
  auto zeroed = q;
  zeroed.set_norm(5, 0.0f);
  expect_rejected(*c, zeroed.msg, 640, "bucket 5 has norm 0");
}

TEST(QsgdCorrupt, NonzeroPaddingBitsAreRejected) {
  for (std::uint32_t s : {1u, 16u, 255u, 65535u}) {
    auto c = qsgd(s, 10);
    for (std::size_t n : {1, 7, 33, 1001}) {
      QsgdMessage q(*c, s, 10, test::random_gradient(n, 6));
      const std::size_t first = n * q.w, end = 8 * detail::packed_bytes(n, q.w);
      ASSERT_LT(first, end) << "choose sizes that leave padding";
      for (std::size_t bit = first; bit < end; ++bit) {
        auto bad = q.msg;
        bad[kHeaderBytes + 4 * q.nb + bit / 8] ^=
            std::byte{static_cast<std::uint8_t>(1u << (bit % 8))};
        expect_rejected(*c, bad, n, "nonzero padding bits");
      }
    }
  }
}

// ---- randomk ------------------------------------------------------------------------

TEST(RandomkCorrupt, NonFiniteValuesAreRejected) {
  for (const char* spec : {"randomk:ratio=0.1", "randomk:ratio=0.1,rescale=1", "randomk:ratio=1"}) {
    auto c = builtin_registry().make_codec(spec);
    const std::size_t n = 1000;
    const auto msg = test::encode(*c, test::random_gradient(n, 7), {.seed = 1});
    const std::size_t k = (msg.size() - kHeaderBytes - 8) / 4;
    for (std::size_t r : {std::size_t{0}, k / 2, k - 1}) {
      for (float bad : {kNaN, kInf, -kInf}) {
        auto b = msg;
        store_le<float>(b.data() + kHeaderBytes + 8 + 4 * r, bad);
        expect_rejected(*c, b, n,
                        "randomk decode: value " + std::to_string(r) + " of " + std::to_string(k));
      }
    }
  }
}

TEST(RandomkCorrupt, WrongValueCountIsRejected) {
  auto c = builtin_registry().make_codec("randomk:ratio=0.1");
  const std::size_t n = 1000;
  const auto msg = test::encode(*c, test::random_gradient(n, 8), {.seed = 2});
  for (std::ptrdiff_t delta : {-4, -1, 1, 4}) {
    std::vector<std::byte> b = msg;
    b.resize(static_cast<std::size_t>(static_cast<std::ptrdiff_t>(msg.size()) + delta));
    store_le<std::uint32_t>(b.data() + 16, static_cast<std::uint32_t>(b.size() - kHeaderBytes));
    expect_rejected(*c, b, n, "randomk decode: payload of");
  }
}

// Any key is a valid key: a flipped key decodes to other indices, all within bounds.
TEST(RandomkCorrupt, AnyKeyStaysInBounds) {
  auto c = builtin_registry().make_codec("randomk:ratio=0.3");
  const std::size_t n = 333;
  const auto msg = test::encode(*c, test::random_gradient(n, 9), {.seed = 3});
  for (int bit = 0; bit < 64; ++bit) {
    auto b = msg;
    b[kHeaderBytes + bit / 8] ^= std::byte{static_cast<std::uint8_t>(1u << (bit % 8))};
    test::Guarded<float> out(n, 42.0f);
    std::fill(out.data(), out.data() + n, 0.0f);
    c->decode_add(resealed(b), out.span());
    ASSERT_TRUE(out.guard_intact());
  }
}

}  // namespace
}  // namespace gradcomp
