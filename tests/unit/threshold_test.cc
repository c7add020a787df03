// Gradient dropping (threshold) and the masking ablation (mask) against brute force:
// the message holds exactly the nonzero entries with |x| >= thr, thr fixed or taken
// from a full sort (nearest-rank percentile / k-th largest).
#include <gtest/gtest.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>

#include "gradcomp/error.h"
#include "gradcomp/kernels/select.h"
#include "gradcomp/registry.h"
#include "gradcomp/wire.h"
#include "support/test_support.h"

namespace gradcomp {
namespace {

struct Entry {
  std::uint32_t index;
  float value;
  bool operator==(const Entry&) const = default;
};

std::vector<Entry> parse(const std::vector<std::byte>& msg) {
  const std::byte* p = msg.data() + kHeaderBytes;
  const auto c = load_le<std::uint32_t>(p);
  EXPECT_EQ(msg.size(), kHeaderBytes + 4 + 8 * std::size_t{c});
  std::vector<Entry> out;
  for (std::uint32_t j = 0; j < c; ++j) {
    out.push_back({load_le<std::uint32_t>(p + 4 + 4 * j), load_le<float>(p + 4 + 4 * c + 4 * j)});
  }
  return out;
}

// Shortest round-trip text of a double (std::to_string prints 1e-40 as "0.000000").
std::string fmt(double v) {
  char buf[64];
  return std::string(buf, std::to_chars(buf, buf + sizeof buf, v).ptr);
}

std::vector<Entry> brute_force(std::span<const float> x, float thr) {
  std::vector<Entry> out;
  for (std::uint32_t i = 0; i < x.size(); ++i) {
    if (x[i] != 0.0f && std::fabs(x[i]) >= thr) out.push_back({i, x[i]});
  }
  return out;
}

// |x| sorted ascending.
std::vector<float> sorted_mags(std::span<const float> x) {
  std::vector<float> m;
  for (float v : x) m.push_back(std::fabs(v));
  std::sort(m.begin(), m.end());
  return m;
}

std::vector<std::vector<float>> inputs(std::size_t n) {
  return {test::random_gradient(n, 1), test::integer_gradient(n, 2, 3), std::vector<float>(n, 0.0f),
          test::random_gradient(n, 3, 1e-39f)};  // subnormal magnitudes
}

TEST(Threshold, FixedTauSendsEveryEntryAtOrAboveIt) {
  for (double tau : {0.5, 1.0, 2.0, 1e-40, 100.0}) {
    auto c = builtin_registry().make_codec("threshold:tau=" + fmt(tau));
    for (std::size_t n : {0, 1, 17, 1000, 65539}) {
      for (const auto& x : inputs(n)) {
        const auto msg = test::encode(*c, x);
        ASSERT_EQ(parse(msg), brute_force(x, static_cast<float>(tau))) << tau << " " << n;
      }
    }
  }
  // A tau too small for a float still means "fixed" (everything nonzero), not percentile.
  auto tiny = builtin_registry().make_codec("threshold:tau=1e-60");
  const auto x = test::random_gradient(100, 4);
  EXPECT_EQ(parse(test::encode(*tiny, x)).size(), 100u);
}

TEST(Threshold, PercentileIsTheNearestRankOfTheSortedMagnitudes) {
  for (double pct : {1.0, 50.0, 90.0, 99.0, 99.9, 100.0}) {
    auto c = builtin_registry().make_codec("threshold:percentile=" + fmt(pct));
    for (std::size_t n : {1, 2, 17, 100, 1000, 65539}) {
      for (const auto& x : inputs(n)) {
        const auto m = sorted_mags(x);
        // Nearest rank: the smallest value with at least pct% of the data at or below it.
        std::size_t rank = 1;
        while (rank < n &&
               100.0 * static_cast<double>(rank) < pct * static_cast<double>(n) * (1 - 1e-12))
          ++rank;
        const float thr = m[rank - 1];
        SCOPED_TRACE("pct=" + std::to_string(pct) + " n=" + std::to_string(n));
        ASSERT_EQ(parse(test::encode(*c, x)), brute_force(x, thr));
      }
    }
  }
}

TEST(Threshold, DefaultSendsAboutOnePercent) {
  auto c = builtin_registry().make_codec("threshold");
  const std::size_t n = 100000;
  const auto entries = parse(test::encode(*c, test::random_gradient(n, 8)));
  EXPECT_GE(entries.size(), 1000u);
  EXPECT_LE(entries.size(), 1010u);
  EXPECT_TRUE(c->traits().needs_memory);
  EXPECT_EQ(c->max_encoded_bytes(n), kHeaderBytes + 4 + 8 * n);
}

TEST(Threshold, FusedFeedbackZeroesExactlyTheSentEntries) {
  auto c = builtin_registry().make_codec("threshold:tau=1");
  const auto x = test::integer_gradient(5000, 9, 3);
  auto p = x;
  std::vector<std::byte> msg(c->max_encoded_bytes(p.size()));
  msg.resize(c->encode_feedback(p, {}, msg));
  for (std::size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(p[i], std::fabs(x[i]) >= 1.0f ? 0.0f : x[i]) << i;
  }
}

TEST(Mask, KeepsTheRatioLargestWithTiesAndHasNoMemory) {
  for (double ratio : {0.001, 0.01, 0.1, 0.5, 1.0}) {
    auto c = builtin_registry().make_codec("mask:ratio=" + fmt(ratio));
    EXPECT_FALSE(c->traits().needs_memory);
    for (std::size_t n : {1, 33, 1000, 65539}) {
      for (const auto& x : inputs(n)) {
        const auto m = sorted_mags(x);
        const std::size_t k = kernels::count_for_fraction(ratio, n);
        const float thr = m[n - k];  // the k-th largest; its ties are kept too
        SCOPED_TRACE("ratio=" + std::to_string(ratio) + " n=" + std::to_string(n));
        const auto got = parse(test::encode(*c, x));
        ASSERT_EQ(got, brute_force(x, thr));
        std::size_t nonzero = 0;
        for (float v : x) nonzero += v != 0.0f;
        EXPECT_GE(got.size(), std::min(k, nonzero));
      }
    }
  }
  // The default spec has no error feedback: a plain "mask" builds a stateless memory.
  auto mem = builtin_registry().make_memory("mask", 100);
  EXPECT_TRUE(mem->state().empty());
  auto ef = builtin_registry().make_memory("threshold", 100);
  EXPECT_FALSE(ef->state().empty());
}

TEST(Mask, FixedTau) {
  auto c = builtin_registry().make_codec("mask:tau=1.5");
  const auto x = test::random_gradient(3000, 10);
  EXPECT_EQ(parse(test::encode(*c, x)), brute_force(x, 1.5f));
}

TEST(Threshold, NonFiniteInputIsRejected) {
  for (const char* spec : {"threshold", "threshold:tau=0.5", "mask", "mask:tau=2"}) {
    auto c = builtin_registry().make_codec(spec);
    for (float bad :
         {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
      auto x = test::random_gradient(1000, 11);
      x[321] = bad;
      try {
        test::encode(*c, x);
        ADD_FAILURE() << spec << " accepted a non-finite value";
      } catch (const InvalidArgument& e) {
        EXPECT_EQ(std::string(e.what()), c->name() + " encode: non-finite value at index 321");
      }
    }
  }
}

TEST(Threshold, BadParametersAreRejectedByTheRegistry) {
  for (const char* spec : {"threshold:tau=-1", "threshold:percentile=0", "threshold:percentile=101",
                           "mask:ratio=0", "mask:ratio=2", "mask:tau=-0.5", "mask:percentile=5"}) {
    EXPECT_THROW(builtin_registry().make_codec(spec), InvalidArgument) << spec;
  }
}

}  // namespace
}  // namespace gradcomp
