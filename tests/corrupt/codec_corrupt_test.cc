// Hostile messages against every registered codec: each must be rejected with
// CorruptMessage (never a crash, an out-of-bounds access, or another exception), and
// a rejected message must leave the destination untouched. Run under ASan+UBSan by
// the test command. Codec-specific payload attacks (index >= n, NaN scale, invalid
// code) live in each codec's own test file.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "gradcomp/error.h"
#include "gradcomp/rng.h"
#include "gradcomp/wire.h"
#include "support/test_support.h"

namespace gradcomp {
namespace {

class CorruptCodec : public ::testing::TestWithParam<std::string> {
 protected:
  std::shared_ptr<const Codec> codec() const { return builtin_registry().make_codec(GetParam()); }

  // Expects decode_add to throw CorruptMessage and leave `out` unchanged.
  static void expect_rejected(const Codec& c, std::span<const std::byte> msg, std::size_t n,
                              const std::string& what) {
    SCOPED_TRACE(what);
    auto out = test::random_gradient(n, 77);
    const auto before = out;
    EXPECT_THROW(c.decode_add(msg, out), CorruptMessage);
    EXPECT_EQ(out, before) << "destination modified";
  }
};

TEST_P(CorruptCodec, TruncatedAtEveryLength) {
  auto c = codec();
  for (std::size_t n : {0, 1, 17, 100}) {
    const auto msg = test::encode(*c, test::random_gradient(n, 1), {.seed = 2});
    for (std::size_t len = 0; len < msg.size(); ++len) {
      expect_rejected(*c, {msg.data(), len}, n,
                      "n=" + std::to_string(n) + " len=" + std::to_string(len));
    }
    auto longer = msg;
    longer.push_back(std::byte{0});
    expect_rejected(*c, longer, n, "one byte appended");
  }
}

TEST_P(CorruptCodec, EveryHeaderByteIsChecked) {
  auto c = codec();
  const std::size_t n = 100;
  const auto msg = test::encode(*c, test::random_gradient(n, 3), {.seed = 4});
  for (std::size_t b = 0; b < kHeaderBytes; ++b) {
    for (int flip : {0x01, 0x80, 0xFF}) {
      auto bad = msg;
      bad[b] ^= static_cast<std::byte>(flip);
      expect_rejected(*c, bad, n,
                      "header byte " + std::to_string(b) + " ^ " + std::to_string(flip));
    }
  }
}

// The same edits of the checksummed header fields with the checksum recomputed: each
// field is still validated on its own (a peer that writes a wrong field with a right
// checksum, e.g. another codec or other parameters).
TEST_P(CorruptCodec, EveryHeaderFieldIsCheckedBehindAValidChecksum) {
  auto c = codec();
  const std::size_t n = 100;
  const auto msg = test::encode(*c, test::random_gradient(n, 3), {.seed = 4});
  for (std::size_t b = 0; b < kCrcOffset; ++b) {
    for (int flip : {0x01, 0x80, 0xFF}) {
      auto bad = msg;
      bad[b] ^= static_cast<std::byte>(flip);
      reseal_message(bad);
      expect_rejected(*c, bad, n,
                      "resealed header byte " + std::to_string(b) + " ^ " + std::to_string(flip));
    }
  }
}

// Every single-bit error anywhere in a message (header, checksum, payload) is
// rejected: CRC-32C detects all of them, so no flip decodes into another gradient.
// Between the first 2 KiB (the header and the start of every payload) and the last 64
// bytes, the bits of a long message (a sketch's 40 KiB table) are all alike to the
// checksum: every 61st of them is flipped there. The sketch then decodes about 15x fewer
// messages; its flips took 88 of the hostile tests' 151 s under ASan.
TEST_P(CorruptCodec, EverySingleBitFlipIsRejected) {
  constexpr std::size_t kHeadBits = 8 * 2048, kTailBits = 8 * 64, kStride = 61;
  auto c = codec();
  for (std::size_t n : {1, 100, 777}) {
    const auto msg = test::encode(*c, test::random_gradient(n, 13), {.seed = 14});
    const std::size_t bits = 8 * msg.size();
    for (std::size_t bit = 0; bit < bits;
         bit += bit < kHeadBits || bit + kTailBits >= bits ? 1 : kStride) {
      auto bad = msg;
      bad[bit / 8] ^= std::byte{static_cast<std::uint8_t>(1u << (bit % 8))};
      std::vector<float> out(n, 0.5f);
      try {
        c->decode_add(bad, out);
        ADD_FAILURE() << "n=" << n << ": flipping bit " << bit << " of " << 8 * msg.size()
                      << " was accepted";
        break;
      } catch (const CorruptMessage&) {
      }
      ASSERT_EQ(out, std::vector<float>(n, 0.5f)) << "destination modified, bit " << bit;
    }
  }
}

TEST_P(CorruptCodec, WrongDestinationSize) {
  auto c = codec();
  const std::size_t n = 64;
  const auto msg = test::encode(*c, test::random_gradient(n, 5), {.seed = 6});
  expect_rejected(*c, msg, n - 1, "destination n-1");
  expect_rejected(*c, msg, n + 1, "destination n+1");
  expect_rejected(*c, msg, 0, "destination 0");
}

// Payload truncated with the header's length patched to match and the checksum
// recomputed: the codec's own payload validation must catch it, or (variable-length
// codecs) decode a shorter, well-formed message within bounds.
TEST_P(CorruptCodec, ShortPayloadWithConsistentHeader) {
  auto c = codec();
  const std::size_t n = 100;
  const auto msg = test::encode(*c, test::random_gradient(n, 7), {.seed = 8});
  for (std::size_t len = kHeaderBytes; len < msg.size(); ++len) {
    auto bad = std::vector<std::byte>(msg.begin(), msg.begin() + static_cast<std::ptrdiff_t>(len));
    store_le<std::uint32_t>(bad.data() + 16, static_cast<std::uint32_t>(len - kHeaderBytes));
    reseal_message(bad);
    std::vector<float> out(n, 0.0f);
    try {
      c->decode_add(bad, out);
    } catch (const CorruptMessage&) {
    }
  }
}

// Random bit flips in the payload behind a recomputed checksum (a sender's bug, or a
// hostile peer, rather than the wire): either rejected or decoded within bounds.
TEST_P(CorruptCodec, RandomPayloadFlipsNeverEscapeValidation) {
  auto c = codec();
  const std::size_t n = 257;
  const auto msg = test::encode(*c, test::random_gradient(n, 9), {.seed = 10});
  if (msg.size() == kHeaderBytes) return;
  const CounterRng rng(1234);
  for (std::uint32_t trial = 0; trial < 500; ++trial) {
    auto bad = msg;
    const std::uint32_t flips = 1 + rng.below(3 * trial, 4);
    for (std::uint32_t f = 0; f < flips; ++f) {
      const auto pos =
          kHeaderBytes +
          rng.below(3 * trial + 1 + 7 * f, static_cast<std::uint32_t>(msg.size() - kHeaderBytes));
      bad[pos] ^= std::byte{static_cast<std::uint8_t>(1u << rng.below(3 * trial + 2 + 7 * f, 8))};
    }
    reseal_message(bad);
    std::vector<float> out(n, 0.0f);
    try {
      c->decode_add(bad, out);
    } catch (const CorruptMessage&) {
    }
  }
}

// A message from one codec fed to another (same n) is rejected by its header.
TEST_P(CorruptCodec, MessagesOfOtherCodecsAreRejected) {
  auto c = codec();
  const std::size_t n = 50;
  for (const auto& other_spec : test::all_codec_specs()) {
    auto other = builtin_registry().make_codec(other_spec);
    if (other->spec() == c->spec()) continue;
    const auto msg = test::encode(*other, test::random_gradient(n, 11), {.seed = 12});
    expect_rejected(*c, msg, n, "message from " + other->spec());
  }
}

INSTANTIATE_TEST_SUITE_P(AllCodecs, CorruptCodec, ::testing::ValuesIn(test::all_codec_specs()),
                         [](const auto& p) { return test::spec_test_name(p.param); });

}  // namespace
}  // namespace gradcomp
