// Wire header framing and the counter-based RNG.
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <vector>

#include "gradcomp/error.h"
#include "gradcomp/rng.h"
#include "gradcomp/wire.h"

namespace gradcomp {
namespace {

TEST(Wire, HeaderRoundTripsLittleEndian) {
  std::vector<std::byte> buf(kHeaderBytes + 3);
  write_header(buf, 0x1234, 0xDEADBEEF, 70000, 3);
  EXPECT_EQ(buf[0], std::byte{'G'});
  EXPECT_EQ(buf[3], std::byte{'P'});
  EXPECT_EQ(buf[4], std::byte{2});  // version 2: the one with the checksum
  EXPECT_EQ(buf[6], std::byte{0x34});
  EXPECT_EQ(buf[12], std::byte{0x70});  // 70000 = 0x00011170
  EXPECT_EQ(buf[14], std::byte{0x01});
  EXPECT_EQ(buf[16], std::byte{3});
  EXPECT_EQ(kHeaderBytes, 24u);
  const WireHeader h = read_header(buf, "test");
  EXPECT_EQ(h.codec_id, 0x1234);
  EXPECT_EQ(h.config_tag, 0xDEADBEEFu);
  EXPECT_EQ(h.elements, 70000u);
  EXPECT_EQ(h.payload_bytes, 3u);
}

TEST(Wire, ReadHeaderRejectsBadFraming) {
  std::vector<std::byte> buf(kHeaderBytes);
  write_header(buf, 1, 2, 3, 0);
  EXPECT_NO_THROW(read_header(buf, "t"));
  EXPECT_THROW(read_header({buf.data(), 19}, "t"), CorruptMessage);
  auto bad = buf;
  bad[4] = std::byte{1};  // a version-1 message (no checksum)
  EXPECT_THROW(read_header(bad, "t"), CorruptMessage);
  buf.push_back(std::byte{0});
  EXPECT_THROW(read_header(buf, "t"), CorruptMessage);
  try {
    read_header({buf.data(), 5}, "topk decode");
  } catch (const CorruptMessage& e) {
    EXPECT_EQ(std::string(e.what()), "topk decode: message of 5 bytes < header 24");
  }
}

TEST(Wire, WriteHeaderRejectsOversizedCounts) {
  std::vector<std::byte> buf(kHeaderBytes);
  EXPECT_THROW(write_header(buf, 1, 2, kMaxElements + 1, 0), InvalidArgument);
  EXPECT_THROW(write_header({buf.data(), 10}, 1, 2, 1, 0), InvalidArgument);
}

TEST(CounterRng, RepeatsForTheSameKeyAndDiffersOtherwise) {
  const StepContext a{.seed = 1, .step = 2, .rank = 3, .bucket = 4};
  auto r1 = CounterRng::for_step(a, RngScope::kPerRank);
  auto r2 = CounterRng::for_step(a, RngScope::kPerRank);
  EXPECT_EQ(r1.bits(10), r2.bits(10));
  std::set<std::uint64_t> keys;
  for (auto ctx : {a, StepContext{2, 2, 3, 4}, StepContext{1, 3, 3, 4}, StepContext{1, 2, 4, 4},
                   StepContext{1, 2, 3, 5}}) {
    keys.insert(CounterRng::for_step(ctx, RngScope::kPerRank).key());
  }
  EXPECT_EQ(keys.size(), 5u);
  // Shared scope ignores the rank (random-k indices, sketch hashes).
  StepContext other_rank = a;
  other_rank.rank = 9;
  EXPECT_EQ(CounterRng::for_step(a, RngScope::kShared).key(),
            CounterRng::for_step(other_rank, RngScope::kShared).key());
  EXPECT_NE(CounterRng::for_step(a, RngScope::kShared, 1).key(),
            CounterRng::for_step(a, RngScope::kShared, 2).key());
}

TEST(CounterRng, UniformIsUniform) {
  const CounterRng rng(42);
  const int n = 1 << 20;
  double sum = 0, sum_sq = 0;
  std::vector<int> hist(16, 0);
  for (int i = 0; i < n; ++i) {
    const float u = rng.uniform(static_cast<std::uint32_t>(i));
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    sum += u;
    sum_sq += double(u) * u;
    ++hist[static_cast<int>(u * 16)];
  }
  EXPECT_NEAR(sum / n, 0.5, 0.002);
  EXPECT_NEAR(sum_sq / n - 0.25, 1.0 / 12, 0.002);
  for (int h : hist) EXPECT_NEAR(h, n / 16, 5 * std::sqrt(n / 16.0));  // chi-square-ish
}

TEST(CounterRng, BelowStaysInRange) {
  const CounterRng rng(7);
  for (std::uint32_t bound : {1u, 2u, 3u, 1000u, 0xFFFFFFFFu}) {
    for (std::uint32_t i = 0; i < 10000; ++i) ASSERT_LT(rng.below(i, bound), bound);
  }
}

}  // namespace
}  // namespace gradcomp
