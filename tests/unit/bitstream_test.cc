// Fixed-width code packing: the fast paths (AVX2 groups, 64-bit accumulator tails)
// against the bit-by-bit references, for every width and many lengths.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "detail/bitstream.h"
#include "gradcomp/rng.h"
#include "gradcomp/wire.h"
#include "support/test_support.h"

namespace gradcomp::detail {
namespace {

std::vector<std::uint32_t> random_codes(std::size_t n, unsigned w, std::uint64_t seed) {
  const CounterRng rng(splitmix64(seed * 131 + w));
  std::vector<std::uint32_t> c(n);
  const std::uint32_t mask = (std::uint32_t{1} << w) - 1;
  for (std::size_t i = 0; i < n; ++i) {
    c[i] = rng.bits(static_cast<std::uint32_t>(i)) & mask;
    // Runs of all-ones and zeros catch shifts that leak into neighbours.
    if (i % 37 == 5) c[i] = mask;
    if (i % 41 == 7) c[i] = 0;
  }
  return c;
}

std::vector<std::size_t> lengths() {
  std::vector<std::size_t> ns;
  for (std::size_t n = 0; n <= 200; ++n) ns.push_back(n);
  for (std::size_t n : test::kSweepSizes) ns.push_back(n);
  for (std::size_t n : {255, 256, 257, 2047, 2048, 2049, 4096 + 31}) ns.push_back(n);
  return ns;
}

TEST(Bitstream, PackedBytesRoundsUpToWords) {
  EXPECT_EQ(packed_bytes(0, 5), 0u);
  EXPECT_EQ(packed_bytes(1, 2), 4u);
  EXPECT_EQ(packed_bytes(16, 2), 4u);
  EXPECT_EQ(packed_bytes(17, 2), 8u);
  EXPECT_EQ(packed_bytes(32, 17), 68u);
  EXPECT_EQ(packed_bytes(33, 17), 72u);
}

// Hand-computed: code i at bits [i*w, (i+1)*w), LSB first, little-endian.
TEST(Bitstream, LayoutIsLsbFirstLittleEndian) {
  const std::uint32_t codes[] = {1, 2, 3};  // w = 3: 001, 010, 011 -> 0b011'010'001
  std::byte out[4];
  pack_codes(codes, 3, 3, out);
  EXPECT_EQ(out[0], std::byte{0xD1});
  EXPECT_EQ(out[1], std::byte{0x00});
  const std::uint32_t wide[] = {0x1FFFF, 0x00001};  // w = 17: bit 17 = the second code
  std::byte out2[8];
  pack_codes(wide, 2, 17, out2);
  EXPECT_EQ(load_le<std::uint32_t>(out2), 0x0003FFFFu);
  EXPECT_EQ(load_le<std::uint32_t>(out2 + 4), 0u);
}

TEST(Bitstream, FastEqualsReferenceForEveryWidthAndLength) {
  for (unsigned w = kMinCodeBits; w <= kMaxCodeBits; ++w) {
    for (std::size_t n : lengths()) {
      SCOPED_TRACE("w=" + std::to_string(w) + " n=" + std::to_string(n));
      const auto codes = random_codes(n, w, n);
      const std::size_t bytes = packed_bytes(n, w);

      test::Guarded<std::byte> fast(bytes, std::byte{0x5A});
      std::fill(fast.data(), fast.data() + bytes, std::byte{0xFF});  // must be overwritten
      std::vector<std::byte> ref(bytes);
      pack_codes(codes.data(), n, w, fast.data());
      pack_codes_ref(codes.data(), n, w, ref.data());
      ASSERT_TRUE(fast.guard_intact()) << "pack wrote past packed_bytes";
      ASSERT_TRUE(bytes == 0 || std::memcmp(fast.data(), ref.data(), bytes) == 0);
      ASSERT_TRUE(padding_is_zero(ref.data(), n, w));

      // Unpack from an exactly sized buffer (ASan catches reads past its end).
      std::vector<std::uint32_t> back(n + 8, 0xDEADBEEF), back_ref(n, 0);
      unpack_codes(ref.data(), n, w, back.data());
      unpack_codes_ref(ref.data(), n, w, back_ref.data());
      for (std::size_t i = 0; i < n; ++i) {
        ASSERT_EQ(back[i], codes[i]) << i;
        ASSERT_EQ(back_ref[i], codes[i]) << i;
      }
      for (std::size_t i = n; i < n + 8; ++i)
        ASSERT_EQ(back[i], 0xDEADBEEF) << "unpack wrote past n";
    }
  }
}

// Chunks that start at a multiple of 32 codes start on a word boundary: packing a
// stream in such chunks gives the same bytes as packing it whole.
TEST(Bitstream, AlignedChunksTile) {
  for (unsigned w = kMinCodeBits; w <= kMaxCodeBits; ++w) {
    const std::size_t n = 1000;
    const auto codes = random_codes(n, w, 99);
    std::vector<std::byte> whole(packed_bytes(n, w)), chunked(packed_bytes(n, w));
    pack_codes(codes.data(), n, w, whole.data());
    for (std::size_t i0 = 0; i0 < n; i0 += 96) {
      const std::size_t len = std::min<std::size_t>(96, n - i0);
      pack_codes(codes.data() + i0, len, w, chunked.data() + i0 * w / 8);
    }
    EXPECT_EQ(whole, chunked) << "w=" << w;
  }
}

TEST(Bitstream, PaddingCheckSeesEveryPaddingBit) {
  for (unsigned w = kMinCodeBits; w <= kMaxCodeBits; ++w) {
    for (std::size_t n : {1, 3, 7, 31, 33}) {
      const auto codes = random_codes(n, w, 5);
      std::vector<std::byte> buf(packed_bytes(n, w));
      pack_codes(codes.data(), n, w, buf.data());
      ASSERT_TRUE(padding_is_zero(buf.data(), n, w));
      for (std::size_t bit = n * w; bit < 8 * buf.size(); ++bit) {
        auto bad = buf;
        bad[bit / 8] ^= std::byte{static_cast<std::uint8_t>(1u << (bit % 8))};
        EXPECT_FALSE(padding_is_zero(bad.data(), n, w))
            << "w=" << w << " n=" << n << " bit=" << bit;
      }
      // A flipped code bit is not padding.
      auto flipped = buf;
      flipped[0] ^= std::byte{1};
      EXPECT_TRUE(padding_is_zero(flipped.data(), n, w));
    }
  }
}

}  // namespace
}  // namespace gradcomp::detail
