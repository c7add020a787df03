// CRC-32C against published check values (RFC 3720 B.4, the "123456789" check), the
// hardware path against the portable one at every length and alignment around the
// three-stream block boundaries, and the checksum in the wire header.
#include "gradcomp/crc32c.h"

#include <gtest/gtest.h>

#include <string_view>
#include <vector>

#include "gradcomp/error.h"
#include "gradcomp/rng.h"
#include "gradcomp/wire.h"
#include "support/test_support.h"

namespace gradcomp {
namespace {

std::span<const std::byte> as_bytes(std::string_view s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

std::vector<std::byte> pattern(std::size_t n, std::uint64_t seed) {
  std::vector<std::byte> v(n);
  const CounterRng rng(seed);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = static_cast<std::byte>(rng.below(static_cast<std::uint32_t>(i), 256));
  return v;
}

TEST(Crc32c, PublishedCheckValues) {
  using Fn = std::uint32_t (*)(std::span<const std::byte>, std::uint32_t);
  for (Fn f : {Fn{&crc32c}, Fn{&crc32c_portable}}) {
    EXPECT_EQ(f(as_bytes("123456789"), 0), 0xE3069283u);
    EXPECT_EQ(f({}, 0), 0u);
    std::vector<std::byte> v(32, std::byte{0});
    EXPECT_EQ(f(v, 0), 0x8A9136AAu);  // RFC 3720 B.4: 32 bytes of zeros
    std::fill(v.begin(), v.end(), std::byte{0xFF});
    EXPECT_EQ(f(v, 0), 0x62A8AB43u);  // 32 bytes of 0xFF
    for (std::size_t i = 0; i < 32; ++i) v[i] = static_cast<std::byte>(i);
    EXPECT_EQ(f(v, 0), 0x46DD794Eu);  // 0x00, 0x01, ..., 0x1F
    for (std::size_t i = 0; i < 32; ++i) v[i] = static_cast<std::byte>(31 - i);
    EXPECT_EQ(f(v, 0), 0x113FDB5Cu);  // 0x1F, 0x1E, ..., 0x00
  }
}

TEST(Crc32c, DispatchMatchesPortableAtEveryLengthAndAlignment) {
  if (!crc32c_uses_hardware()) GTEST_SKIP() << "no SSE4.2 here: crc32c() is the portable path";
  // The block sizes of the three-stream loop are 8192 and 256 bytes: cover lengths on
  // both sides of 3 * 256 and 3 * 8192 (and twice those), at every 8-byte misalignment.
  const auto data = pattern(2 * 3 * 8192 + 3 * 256 + 64, 1);
  std::vector<std::size_t> lengths;
  for (std::size_t n = 0; n <= 1000; ++n) lengths.push_back(n);
  for (std::size_t base : {3 * 8192, 2 * 3 * 8192, 3 * 8192 + 3 * 256}) {
    for (std::size_t d = 0; d < 20; ++d) lengths.push_back(base - 10 + d);
  }
  for (std::size_t off = 0; off < 8; ++off) {
    for (std::size_t n : lengths) {
      const auto s = std::span<const std::byte>(data).subspan(off, n);
      ASSERT_EQ(crc32c(s, 0x1234567u), crc32c_portable(s, 0x1234567u))
          << "offset " << off << " length " << n;
    }
  }
}

TEST(Crc32c, ContinuesAcrossSplits) {
  const auto data = pattern(30000, 2);
  const std::uint32_t whole = crc32c(data);
  for (std::size_t cut : {0, 1, 7, 100, 8192, 24576, 29999, 30000}) {
    const auto s = std::span<const std::byte>(data);
    EXPECT_EQ(crc32c(s.subspan(cut), crc32c(s.first(cut))), whole) << cut;
  }
}

TEST(WireChecksum, HeaderCarriesTheCrcOfHeaderAndPayload) {
  auto c = builtin_registry().make_codec("topk:ratio=0.1");
  const auto msg = test::encode(*c, test::random_gradient(300, 3));
  const auto s = std::span<const std::byte>(msg);
  const std::uint32_t expected = crc32c(s.subspan(kHeaderBytes), crc32c(s.first(kCrcOffset)));
  EXPECT_EQ(load_le<std::uint32_t>(msg.data() + kCrcOffset), expected);
  EXPECT_EQ(message_crc(msg), expected);
  EXPECT_EQ(read_header(msg, "t").crc32c, expected);
  EXPECT_EQ(msg[4], std::byte{kWireVersion});
}

TEST(WireChecksum, MismatchIsRejectedNamingTheChecksumAndResealRestores) {
  auto c = builtin_registry().make_codec("2bit");
  auto msg = test::encode(*c, test::random_gradient(64, 4));
  msg.back() ^= std::byte{0x10};
  try {
    (void)test::decode(*c, msg, 64);
    FAIL() << "accepted";
  } catch (const CorruptMessage& e) {
    EXPECT_NE(std::string(e.what()).find("2bit decode: checksum mismatch"), std::string::npos)
        << e.what();
  }
  reseal_message(msg);
  EXPECT_NO_THROW(read_header(msg, "t"));
}

// The report of issue #15: a top-k message whose element count (byte 15, the count's
// top byte) was changed must be rejected, not decoded into a 4 GB destination.
TEST(WireChecksum, ChangedElementCountIsRejectedByReadHeader) {
  auto c = builtin_registry().make_codec("topk:ratio=0.01");
  auto msg = test::encode(*c, test::random_gradient(1000, 5));
  msg[15] = std::byte{0x41};
  EXPECT_THROW(read_header(msg, "topk decode"), CorruptMessage);
}

}  // namespace
}  // namespace gradcomp
