// signsgd and efsign: hand-computed messages, sign(0) := +1, the scale ||p||_1 / n, and
// EF-signSGD's update (Karimireddy et al. 2019, Algorithm 1) step by step.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "detail/bitpack.h"
#include "detail/reductions.h"
#include "gradcomp/error.h"
#include "gradcomp/registry.h"
#include "gradcomp/wire.h"
#include "support/test_support.h"

namespace gradcomp {
namespace {

using test::bytes_of;
using test::payload_of;
using test::same_bits;

TEST(SignSgd, HandComputedMessage) {
  auto c = builtin_registry().make_codec("signsgd");
  EXPECT_EQ(c->wire_id(), 11);
  // bit = p >= 0 (sign(0) = sign(-0) := +1, NaN -> -1): 1 0 1 1 1 0 0 1 | 0 1 -> 0xB9 0x40.
  const std::vector<float> p = {1.0f,    -1.0f,         0.0f, -0.0f, 1e-30f,
                                -1e-30f, std::nanf(""), 5.0f, -7.0f, 0.5f};
  const auto msg = test::encode(*c, p);
  EXPECT_EQ(payload_of(msg), bytes_of({0xB9, 0x40, 0x00, 0x00}));
  const std::vector<float> want = {1, -1, 1, 1, 1, -1, -1, 1, -1, 1};
  EXPECT_EQ(test::decode(*c, msg, p.size()), want);
  std::vector<float> acc(p.size(), 1.0f);
  c->decode_add(msg, acc, 0.125f);
  for (std::size_t i = 0; i < p.size(); ++i) EXPECT_EQ(acc[i], 1.0f + 0.125f * want[i]);
}

TEST(SignSgd, TraitsAndNoMemory) {
  auto c = builtin_registry().make_codec("signsgd");
  EXPECT_FALSE(c->traits().needs_memory);
  EXPECT_FALSE(c->traits().unbiased);
  EXPECT_FALSE(c->traits().linear);
  EXPECT_EQ(builtin_registry().make_memory("signsgd", 8)->spec(), "signsgd");
  EXPECT_EQ(c->max_encoded_bytes(100), kHeaderBytes + 16);
}

TEST(SignSgd, DecodedSumsAreTheVoteTally) {
  // Three workers: the sum of their decoded messages has the majority's sign.
  auto c = builtin_registry().make_codec("signsgd");
  const std::vector<std::vector<float>> m = {{1, -1, 2, -3}, {1, 1, -2, -1}, {-1, -1, 2, 4}};
  std::vector<float> tally(4, 0.0f);
  for (const auto& w : m) c->decode_add(test::encode(*c, w), tally);
  EXPECT_EQ(tally, (std::vector<float>{1, -1, 1, -1}));
}

TEST(EfSign, HandComputedMessage) {
  auto c = builtin_registry().make_codec("efsign");
  EXPECT_EQ(c->wire_id(), 12);
  EXPECT_TRUE(c->traits().needs_memory);
  EXPECT_EQ(builtin_registry().make_memory("efsign", 8)->spec(), "ef(efsign:block=0)");
  // ||p||_1 = 10.5, n = 5: scale 2.1; bits 1 0 1 0 1 -> 0xA8.
  const std::vector<float> p = {1.0f, -2.0f, 3.0f, -4.0f, 0.5f};
  const auto msg = test::encode(*c, p);
  const float scale = static_cast<float>(10.5 / 5.0);
  std::vector<std::byte> want(8);
  std::memcpy(want.data(), &scale, 4);
  want[4] = std::byte{0xA8};
  EXPECT_EQ(payload_of(msg), want);
  const auto d = test::decode(*c, msg, p.size());
  EXPECT_EQ(d, (std::vector<float>{scale, -scale, scale, -scale, scale}));

  auto fb = p;
  std::vector<std::byte> fmsg(c->max_encoded_bytes(p.size()));
  fmsg.resize(c->encode_feedback(fb, {}, fmsg));
  EXPECT_EQ(fmsg, msg);
  for (std::size_t i = 0; i < p.size(); ++i) EXPECT_EQ(fb[i], p[i] - d[i]) << i;
}

TEST(EfSign, BlockwiseScalesMatchAScalarReference) {
  // block = 32 on 70 elements: blocks [0,32), [32,64), [64,70), one scale each.
  auto c = builtin_registry().make_codec("efsign:block=32");
  const std::vector<float> p = test::random_gradient(70, 99);
  const auto msg = test::encode(*c, p);
  ASSERT_EQ(msg.size(), kHeaderBytes + 3 * 4 + 12);
  std::vector<float> want(p.size());
  for (std::size_t b = 0; b < 3; ++b) {
    const std::size_t begin = 32 * b;
    const std::size_t end = std::min<std::size_t>(begin + 32, p.size());
    double l1 = 0;
    for (std::size_t i = begin; i < end; ++i) l1 += std::fabs(static_cast<double>(p[i]));
    const float scale = static_cast<float>(l1 / static_cast<double>(end - begin));
    EXPECT_EQ(load_le<float>(msg.data() + kHeaderBytes + 4 * b), scale) << b;
    for (std::size_t i = begin; i < end; ++i) want[i] = p[i] >= 0.0f ? scale : -scale;
  }
  EXPECT_EQ(test::decode(*c, msg, p.size()), want);
  // A corrupt scale in the second block is rejected before anything is written.
  auto bad = msg;
  store_le<float>(bad.data() + kHeaderBytes + 4, -1.0f);
  reseal_message(bad);  // past the checksum, to the codec's own check
  std::vector<float> out(p.size(), 7.0f);
  EXPECT_THROW(c->decode_add(bad, out), CorruptMessage);
  EXPECT_EQ(out, std::vector<float>(p.size(), 7.0f));
  EXPECT_THROW(builtin_registry().make_codec("efsign:block=48"), InvalidArgument);
}

TEST(EfSign, EmptyAndZeroInputs) {
  auto c = builtin_registry().make_codec("efsign");
  const auto empty = test::encode(*c, std::vector<float>{});
  ASSERT_EQ(empty.size(), kHeaderBytes + 4);
  EXPECT_EQ(load_le<float>(empty.data() + kHeaderBytes), 0.0f);
  // All zeros: scale 0, every bit 1 (sign(0) := +1), decodes to zeros.
  const std::vector<float> z(40, 0.0f);
  const auto msg = test::encode(*c, z);
  EXPECT_EQ(load_le<float>(msg.data() + kHeaderBytes), 0.0f);
  EXPECT_EQ(payload_of(msg), bytes_of({0, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0}));
  EXPECT_EQ(test::decode(*c, msg, z.size()), z);
}

TEST(EfSign, NonFiniteInputIsRejected) {
  auto c = builtin_registry().make_codec("efsign");
  std::vector<float> g(70, 1.0f);
  g[69] = std::numeric_limits<float>::infinity();
  std::vector<std::byte> msg(c->max_encoded_bytes(g.size()));
  EXPECT_THROW(c->encode(g, {}, msg), InvalidArgument);
  g[69] = std::nanf("");
  EXPECT_THROW(c->encode(g, {}, msg), InvalidArgument);
  // The fused path throws before touching p.
  const auto before = g;
  EXPECT_THROW(c->encode_feedback(g, {}, msg), InvalidArgument);
  EXPECT_EQ(0, std::memcmp(g.data(), before.data(), 4 * g.size()));
}

// EF-signSGD (Karimireddy et al. 2019, Alg. 1), with the learning rate left to the caller:
//   p = g + e;  delta = (||p||_1 / n) sign(p);  e = p - delta.
TEST(EfSign, MatchesTheAlgorithmStepByStep) {
  for (std::size_t n : {std::size_t{1}, std::size_t{33}, std::size_t{1000}, std::size_t{70001}}) {
    SCOPED_TRACE("n=" + std::to_string(n));
    auto memory = builtin_registry().make_memory("efsign", n);
    std::vector<float> e(n, 0.0f);
    std::vector<std::byte> msg(memory->max_encoded_bytes());
    for (std::uint64_t step = 0; step < 10; ++step) {
      const auto g = test::random_gradient(n, 500 + step);
      std::vector<float> p(n);
      double naive_l1 = 0.0;
      for (std::size_t i = 0; i < n; ++i) {
        p[i] = g[i] + e[i];
        naive_l1 += std::fabs(double{p[i]});
      }
      // The codec's deterministic sum (blocked, 16 lanes) equals the naive one to rounding.
      const float scale =
          static_cast<float>(detail::abs_sum_ref(p.data(), n) / static_cast<double>(n));
      const double naive = naive_l1 / static_cast<double>(n);
      EXPECT_NEAR(scale, naive, 1e-6 * naive);
      for (std::size_t i = 0; i < n; ++i) {
        const float delta = p[i] >= 0.0f ? scale : -scale;
        e[i] = p[i] - delta;
      }
      const std::size_t bytes = memory->compress(g, {.step = step}, msg);
      ASSERT_EQ(load_le<float>(msg.data() + kHeaderBytes), scale) << "step " << step;
      ASSERT_TRUE(same_bits(memory->state().at(0).data, e)) << "step " << step;
      const auto d = test::decode(memory->codec(), {msg.data(), bytes}, n);
      for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(d[i], p[i] >= 0.0f ? scale : -scale) << i;
    }
  }
}

}  // namespace
}  // namespace gradcomp
