// CRC-32C against published check values (RFC 3720 B.4, the "123456789" check), every
// implementation this CPU can run (forced on with crc32c_on_path) against the portable
// one at every length 0..4096 and alignment 0..63, at random long lengths, across the
// three-stream block boundaries and across splits; crc32c_combine; and the checksum in
// the wire header.
#include "gradcomp/crc32c.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "detail/checksum_switch.h"
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

// Every path this CPU can run (always portable and, on x86-64, nearly always more).
std::vector<Crc32cPath> runnable_paths() {
  std::vector<Crc32cPath> paths;
  for (Crc32cPath p : kAllCrc32cPaths) {
    if (crc32c_path_available(p)) paths.push_back(p);
  }
  return paths;
}

TEST(Crc32c, EveryPathGivesThePublishedCheckValues) {
  for (Crc32cPath p : runnable_paths()) {
    SCOPED_TRACE(crc32c_path_name(p));
    EXPECT_EQ(crc32c_on_path(p, as_bytes("123456789")), 0xE3069283u);
    EXPECT_EQ(crc32c_on_path(p, {}), 0u);
    // 1 KiB of zeros and of 0xFF: long enough for every folding path.
    std::vector<std::byte> v(1024, std::byte{0});
    EXPECT_EQ(crc32c_on_path(p, v), crc32c_portable(v));
    std::fill(v.begin(), v.end(), std::byte{0xFF});
    EXPECT_EQ(crc32c_on_path(p, v), crc32c_portable(v));
  }
}

TEST(Crc32c, ActivePathIsTheBestAvailableOne) {
  // The fastest available of vpclmul512, vpclmul256, sse4.2, portable (pclmul is never
  // chosen automatically), unless GRADCOMP_CRC32C selects one.
  Crc32cPath best = Crc32cPath::kPortable;
  for (Crc32cPath p : runnable_paths()) {
    if (p != Crc32cPath::kPclmul) best = p;
  }
  const char* cap = std::getenv("GRADCOMP_CRC32C");
  if (cap == nullptr || *cap == '\0') {
    EXPECT_EQ(crc32c_active_path(), best) << crc32c_implementation();
  } else {
    EXPECT_LE(static_cast<int>(crc32c_active_path()), static_cast<int>(best));
  }
  EXPECT_EQ(crc32c_uses_hardware(), crc32c_active_path() != Crc32cPath::kPortable);
  EXPECT_NE(std::string(crc32c_implementation()).find(crc32c_path_name(crc32c_active_path())),
            std::string::npos);
}

TEST(Crc32c, UnavailablePathIsRefused) {
  for (Crc32cPath p : kAllCrc32cPaths) {
    if (!crc32c_path_available(p)) {
      EXPECT_THROW((void)crc32c_on_path(p, as_bytes("x")), InvalidArgument);
    }
  }
}

// Every length 0..4096 at every alignment 0..63, from a non-zero CRC, on every path.
TEST(Crc32c, EveryPathMatchesPortableAtEveryLengthAndAlignment) {
  const auto data = pattern(4096 + 64, 11);
  const auto paths = runnable_paths();
  for (std::size_t off = 0; off < 64; ++off) {
    for (std::size_t n = 0; n <= 4096; ++n) {
      const auto s = std::span<const std::byte>(data).subspan(off, n);
      const std::uint32_t seed = static_cast<std::uint32_t>(n * 2654435761u + off);
      const std::uint32_t expected = crc32c_portable(s, seed);
      for (Crc32cPath p : paths) {
        if (crc32c_on_path(p, s, seed) != expected) {
          FAIL() << crc32c_path_name(p) << ": offset " << off << " length " << n;
        }
      }
    }
  }
}

// Random lengths up to 1 MiB + 255 at random alignments; each long folding loop, its
// lane reduction and every tail length are reached many times over.
TEST(Crc32c, EveryPathMatchesPortableAtRandomLongLengths) {
  const auto data = pattern((1 << 20) + 256 + 64, 12);
  std::mt19937_64 gen(13);
  const auto paths = runnable_paths();
  for (int trial = 0; trial < 300; ++trial) {
    const std::size_t n = trial < 150 ? gen() % 70000 : gen() % ((1 << 20) + 256);
    const std::size_t off = gen() % 64;
    const auto seed = static_cast<std::uint32_t>(gen());
    const auto s = std::span<const std::byte>(data).subspan(off, n);
    const std::uint32_t expected = crc32c_portable(s, seed);
    for (Crc32cPath p : paths) {
      ASSERT_EQ(crc32c_on_path(p, s, seed), expected)
          << crc32c_path_name(p) << ": offset " << off << " length " << n;
    }
  }
}

// crc(b, crc(a)) == crc(a + b) on every path, the split anywhere, both pieces possibly
// shorter than a folding round.
TEST(Crc32c, EveryPathChainsAcrossSplits) {
  const auto data = pattern(20000, 14);
  const auto s = std::span<const std::byte>(data);
  const std::uint32_t whole = crc32c_portable(s);
  std::mt19937_64 gen(15);
  std::vector<std::size_t> cuts = {0,   1,   3,   4,   15,  16,  17,    63,    64,    127,
                                   128, 255, 256, 511, 512, 513, 19487, 19488, 19999, 20000};
  for (int i = 0; i < 200; ++i) cuts.push_back(gen() % 20001);
  for (Crc32cPath p : runnable_paths()) {
    for (std::size_t cut : cuts) {
      ASSERT_EQ(crc32c_on_path(p, s.subspan(cut), crc32c_on_path(p, s.first(cut))), whole)
          << crc32c_path_name(p) << ": cut " << cut;
    }
    // Three pieces, the middle one short.
    for (std::size_t a : {100, 1000, 5000}) {
      for (std::size_t b : {0, 5, 16, 300, 700}) {
        const std::uint32_t c1 = crc32c_on_path(p, s.first(a));
        const std::uint32_t c2 = crc32c_on_path(p, s.subspan(a, b), c1);
        ASSERT_EQ(crc32c_on_path(p, s.subspan(a + b), c2), whole)
            << crc32c_path_name(p) << ": " << a << " + " << b;
      }
    }
  }
}

// crc32c_copy == memcpy then crc32c, on every path: every length 0..4096 at source
// alignments 0..63 (the destination at another alignment), random long lengths; the
// bytes around the destination stay untouched.
TEST(Crc32c, CopyOnEveryPathCopiesAndMatchesPortable) {
  const auto data = pattern((1 << 18) + 128, 18);
  std::vector<std::byte> dst_buf;
  std::mt19937_64 gen(19);
  auto check = [&](Crc32cPath p, std::size_t off, std::size_t doff, std::size_t n,
                   std::uint32_t seed) {
    dst_buf.assign(doff + n + 64, std::byte{0x5A});  // 64 guard bytes after
    const auto src = std::span<const std::byte>(data).subspan(off, n);
    const std::uint32_t got = crc32c_copy_on_path(p, dst_buf.data() + doff, src, seed);
    if (got != crc32c_portable(src, seed)) return false;
    if (n > 0 && std::memcmp(dst_buf.data() + doff, src.data(), n) != 0) return false;
    for (std::size_t i = 0; i < doff; ++i) {
      if (dst_buf[i] != std::byte{0x5A}) return false;
    }
    for (std::size_t i = doff + n; i < dst_buf.size(); ++i) {
      if (dst_buf[i] != std::byte{0x5A}) return false;
    }
    return true;
  };
  for (Crc32cPath p : runnable_paths()) {
    for (std::size_t off = 0; off < 64; ++off) {
      for (std::size_t n = 0; n <= 4096; n += (off == 0 ? 1 : 1 + n / 64)) {
        const std::size_t doff = (off * 7 + n) % 64;
        ASSERT_TRUE(check(p, off, doff, n, static_cast<std::uint32_t>(n + off)))
            << crc32c_path_name(p) << ": offset " << off << " length " << n;
      }
    }
    for (int trial = 0; trial < 40; ++trial) {
      const std::size_t n = gen() % (1 << 18);
      const std::size_t off = gen() % 64;
      const std::size_t doff = gen() % 64;
      ASSERT_TRUE(check(p, off, doff, n, static_cast<std::uint32_t>(gen())))
          << crc32c_path_name(p) << ": offset " << off << " length " << n;
    }
  }
  std::vector<std::byte> out(9);
  EXPECT_EQ(crc32c_copy(out.data(), as_bytes("123456789")), 0xE3069283u);
}

TEST(Crc32c, CombineEqualsTheCrcOfTheConcatenation) {
  const auto data = pattern(70000, 16);
  const auto s = std::span<const std::byte>(data);
  std::mt19937_64 gen(17);
  for (int trial = 0; trial < 300; ++trial) {
    const std::size_t a = trial < 20 ? static_cast<std::size_t>(trial) : gen() % 30000;
    const std::size_t b = trial % 20 == 0 ? 0 : gen() % 40000;
    const std::uint32_t whole = crc32c_portable(s.first(a + b));
    EXPECT_EQ(crc32c_combine(crc32c(s.first(a)), crc32c(s.subspan(a, b)), b), whole)
        << a << " + " << b;
  }
  EXPECT_EQ(crc32c_combine(0x12345678u, 0, 0), 0x12345678u);
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

// none checksums its payload while copying it (crc32c_copy) and combines that with the
// header's: the result must be the CRC of one pass over the message, with error
// feedback too (fp16 and bf16: the separate pass, for comparison).
TEST(WireChecksum, FusedChecksumEqualsOnePassOverTheMessage) {
  for (const char* spec : {"none", "fp16", "fp16:format=bf16"}) {
    auto c = builtin_registry().make_codec(spec);
    for (std::size_t n : {0, 1, 7, 4095, 4096, 4097, 8192, 12289, 100000}) {
      SCOPED_TRACE(std::string(spec) + " n=" + std::to_string(n));
      const auto g = test::random_gradient(n, 30 + n);
      std::vector<std::byte> msg(c->max_encoded_bytes(n));
      const std::size_t bytes = c->encode(g, {}, msg);
      msg.resize(bytes);
      EXPECT_EQ(load_le<std::uint32_t>(msg.data() + kCrcOffset), message_crc(msg));
      EXPECT_EQ(
          message_crc(msg),
          crc32c_portable(std::span<const std::byte>(msg).subspan(kHeaderBytes),
                          crc32c_portable(std::span<const std::byte>(msg).first(kCrcOffset))));
      EXPECT_NO_THROW((void)test::decode(*c, msg, n));
      // encode_feedback writes the same message.
      auto p = g;
      std::vector<std::byte> fb(c->max_encoded_bytes(n));
      fb.resize(c->encode_feedback(p, {}, fb));
      EXPECT_EQ(fb, msg);
    }
  }
}

// The benchmark-only switch: no checksum while it lives (decode then refuses the
// message), the normal one after.
TEST(WireChecksum, ScopedChecksumOffLeavesTheFieldZeroOnlyInItsScope) {
  for (const char* spec : {"none", "fp16", "topk:ratio=0.1", "2bit"}) {
    SCOPED_TRACE(spec);
    auto c = builtin_registry().make_codec(spec);
    const auto g = test::random_gradient(5000, 31);
    std::vector<std::byte> msg(c->max_encoded_bytes(g.size()));
    std::size_t bytes = 0;
    {
      const detail::ScopedChecksumOff off;
      EXPECT_TRUE(detail::checksum_disabled());
      bytes = c->encode(g, {}, msg);
      EXPECT_EQ(load_le<std::uint32_t>(msg.data() + kCrcOffset), 0u);
    }
    EXPECT_FALSE(detail::checksum_disabled());
    EXPECT_THROW((void)test::decode(*c, std::span<const std::byte>(msg.data(), bytes), g.size()),
                 CorruptMessage);
    const auto good = test::encode(*c, g);
    EXPECT_EQ(load_le<std::uint32_t>(good.data() + kCrcOffset), message_crc(good));
    EXPECT_NO_THROW((void)test::decode(*c, good, g.size()));
  }
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
