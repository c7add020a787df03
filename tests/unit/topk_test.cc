// Top-k selection against a brute-force reference (a full stable sort by |x| desc,
// index asc), the sampled DGC threshold's guarantees, and the topk codec's messages.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>

#include "gradcomp/error.h"
#include "gradcomp/kernels/half.h"
#include "gradcomp/kernels/select.h"
#include "gradcomp/registry.h"
#include "gradcomp/rng.h"
#include "gradcomp/wire.h"
#include "support/test_support.h"

namespace gradcomp {
namespace {

// ---- the reference ------------------------------------------------------------------

// All indices ordered by |x| descending, ties by index ascending (stable sort of 0..n-1).
std::vector<std::uint32_t> reference_order(std::span<const float> x) {
  std::vector<std::uint32_t> order(x.size());
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) {
    return std::fabs(x[a]) > std::fabs(x[b]);
  });
  return order;
}

// The reference top-k, ascending.
std::vector<std::uint32_t> reference_topk(const std::vector<std::uint32_t>& order, std::size_t k) {
  std::vector<std::uint32_t> top(
      order.begin(), order.begin() + static_cast<std::ptrdiff_t>(std::min(k, order.size())));
  std::sort(top.begin(), top.end());
  return top;
}

std::vector<std::uint32_t> exact(std::span<const float> x, std::size_t k) {
  std::vector<std::uint32_t> out(std::min(k, x.size()) + 1, 0xDEADBEEF);
  const std::size_t c = kernels::select_topk_exact(x, k, out, "test");
  EXPECT_EQ(out[std::min(k, x.size())], 0xDEADBEEFu) << "wrote past min(k, n)";
  out.resize(c);
  return out;
}

// Input families: Gaussian-ish with outliers, heavy integer ties, all zero, constant,
// values packed into one top-level radix bucket (forces refinement down to the last
// bits), and a mix of signed zeros, subnormals and huge values.
std::vector<float> make_input(int kind, std::size_t n, std::uint64_t seed) {
  switch (kind) {
    case 0:
      return test::random_gradient(n, seed);
    case 1:
      return test::integer_gradient(n, seed, 2);
    case 2:
      return std::vector<float>(n, 0.0f);
    case 3: {
      std::vector<float> v(n, -1.5f);
      for (std::size_t i = 0; i < n; i += 3) v[i] = 1.5f;
      return v;
    }
    case 4: {  // 1.0 + j ulps, j < 3000: one level-0 bucket, many level-1/2 collisions
      const CounterRng rng(seed);
      std::vector<float> v(n);
      for (std::size_t i = 0; i < n; ++i) {
        const std::uint32_t j = rng.below(static_cast<std::uint32_t>(i), 3000);
        v[i] = std::bit_cast<float>(0x3F800000u + j) * ((i & 1) ? -1.0f : 1.0f);
      }
      return v;
    }
    default: {
      const CounterRng rng(seed);
      const float pool[] = {0.0f, -0.0f, 1e-45f, -3e-42f, 1e-38f,
                            2.5f, -2.5f, 1e30f,  -3e38f,  std::numeric_limits<float>::max(),
                            7.0f};
      std::vector<float> v(n);
      for (std::size_t i = 0; i < n; ++i) v[i] = pool[rng.below(static_cast<std::uint32_t>(i), 11)];
      return v;
    }
  }
}
constexpr int kKinds = 6;

std::vector<std::size_t> test_sizes() {
  std::vector<std::size_t> sizes;
  for (std::size_t n = 0; n <= 130; ++n) sizes.push_back(n);
  for (std::size_t n : test::kSweepSizes) sizes.push_back(n);
  for (std::size_t n : {255, 256, 257, 1023, 1024, 1025, 4097, 20000, 65535, 65536}) {
    sizes.push_back(n);
  }
  return sizes;
}

std::vector<std::size_t> test_ks(std::size_t n) {
  std::vector<std::size_t> ks = {0, 1, 2, 3, n / 2, n > 0 ? n - 1 : 0, n, n + 5};
  for (double r : {0.001, 0.01, 0.07, 0.1, 0.25, 0.5, 0.9, 1.0}) {
    ks.push_back(kernels::count_for_fraction(r, n));
  }
  return ks;
}

// ---- exact ---------------------------------------------------------------------------

TEST(TopkSelect, ExactEqualsFullSortOverSizesRatiosAndTies) {
  for (std::size_t n : test_sizes()) {
    for (int kind = 0; kind < kKinds; ++kind) {
      const auto x = make_input(kind, n, 100 + n);
      const auto order = reference_order(x);
      for (std::size_t k : test_ks(n)) {
        SCOPED_TRACE("n=" + std::to_string(n) + " kind=" + std::to_string(kind) +
                     " k=" + std::to_string(k));
        ASSERT_EQ(exact(x, k), reference_topk(order, k));
      }
    }
  }
}

TEST(TopkSelect, ExactBreaksTiesByLowerIndex) {
  const std::vector<float> x = {1, -3, 3, 2, -3, 3, 0, 3};
  EXPECT_EQ(exact(x, 1), (std::vector<std::uint32_t>{1}));
  EXPECT_EQ(exact(x, 3), (std::vector<std::uint32_t>{1, 2, 4}));
  EXPECT_EQ(exact(x, 5), (std::vector<std::uint32_t>{1, 2, 4, 5, 7}));
  EXPECT_EQ(exact(x, 6), (std::vector<std::uint32_t>{1, 2, 3, 4, 5, 7}));
}

TEST(TopkSelect, TopkAmongSubsetEqualsReference) {
  for (std::size_t n : {0, 1, 5, 100, 5000, 65539}) {
    for (int kind = 0; kind < kKinds; ++kind) {
      const auto x = make_input(kind, n, 7 + n);
      // Every third index plus a random few: an ascending subset.
      std::vector<std::uint32_t> subset;
      const CounterRng rng(n);
      for (std::uint32_t i = 0; i < n; ++i) {
        if (i % 3 == 0 || rng.below(i, 5) == 0) subset.push_back(i);
      }
      std::vector<float> sub_x;
      for (auto i : subset) sub_x.push_back(x[i]);
      const auto order = reference_order(sub_x);
      for (std::size_t k : test_ks(subset.size())) {
        SCOPED_TRACE("n=" + std::to_string(n) + " kind=" + std::to_string(kind) +
                     " k=" + std::to_string(k));
        auto list = subset;
        list.resize(kernels::select_topk_among(x, list, k));
        std::vector<std::uint32_t> want;
        for (auto j : reference_topk(order, k)) want.push_back(subset[j]);
        ASSERT_EQ(list, want);
      }
    }
  }
}

TEST(TopkSelect, KthLargestAndAtLeastEqualReference) {
  for (std::size_t n : {1, 2, 17, 1000, 65539}) {
    for (int kind = 0; kind < kKinds; ++kind) {
      const auto x = make_input(kind, n, 3 + n);
      std::vector<float> mags;
      for (float v : x) mags.push_back(std::fabs(v));
      std::sort(mags.begin(), mags.end(), std::greater<>());
      for (std::size_t k : {std::size_t{1}, n / 3 + 1, n}) {
        const std::uint32_t t = kernels::kth_largest_abs_bits(x, k, "test");
        ASSERT_EQ(t, std::bit_cast<std::uint32_t>(mags[k - 1])) << n << " " << kind << " " << k;
        std::vector<std::uint32_t> got(n);
        got.resize(kernels::select_at_least(x, t, got, "test"));
        std::vector<std::uint32_t> want;
        for (std::uint32_t i = 0; i < n; ++i) {
          if (std::fabs(x[i]) >= mags[k - 1]) want.push_back(i);
        }
        ASSERT_EQ(got, want);
      }
    }
  }
}

TEST(TopkSelect, NonFiniteInputsAreRejectedWithTheFirstIndex) {
  for (std::size_t n : {1, 40, 1000, 300000}) {
    for (float bad :
         {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
          -std::numeric_limits<float>::infinity()}) {
      auto x = test::random_gradient(n, 5);
      const std::size_t at = n * 2 / 3;
      x[at] = bad;
      if (at + 1 < n) x[at + 1] = bad;
      const std::string want = "topk encode: non-finite value at index " + std::to_string(at);
      std::vector<std::uint32_t> out(kernels::sampled_max_count(n));
      for (std::size_t k : {std::size_t{1}, n / 100 + 1, n}) {
        try {
          kernels::select_topk_exact(x, k, out, "topk encode");
          ADD_FAILURE() << "exact accepted a non-finite value";
        } catch (const InvalidArgument& e) {
          EXPECT_EQ(e.what(), want);
        }
        try {
          kernels::select_topk_sampled(x, k, 0.01, CounterRng(9), out, "topk encode");
          ADD_FAILURE() << "sampled accepted a non-finite value";
        } catch (const InvalidArgument& e) {
          EXPECT_EQ(e.what(), want);
        }
      }
      auto c = builtin_registry().make_codec("topk:ratio=0.01");
      EXPECT_THROW(test::encode(*c, x), InvalidArgument);
    }
  }
}

TEST(TopkSelect, CountForFractionIsRobust) {
  EXPECT_EQ(kernels::count_for_fraction(0.07, 100), 7u);  // 0.07*100 = 7.000000000000001
  EXPECT_EQ(kernels::count_for_fraction(0.7, 10), 7u);
  EXPECT_EQ(kernels::count_for_fraction(0.3, 10), 3u);
  EXPECT_EQ(kernels::count_for_fraction(0.29, 100), 29u);
  EXPECT_EQ(kernels::count_for_fraction(0.57, 100), 57u);
  EXPECT_EQ(kernels::count_for_fraction(0.001, 25000000), 25000u);
  EXPECT_EQ(kernels::count_for_fraction(0.5, 3), 2u);
  EXPECT_EQ(kernels::count_for_fraction(0.1, 3), 1u);
  EXPECT_EQ(kernels::count_for_fraction(0.34, 3), 2u);  // 1.02 is not an integer
  EXPECT_EQ(kernels::count_for_fraction(1e-9, 5), 1u);  // at least one
  EXPECT_EQ(kernels::count_for_fraction(1.0, 65539), 65539u);
  EXPECT_EQ(kernels::count_for_fraction(0.5, 0), 0u);
  // Every decimal ratio r = j/1000 times n = 1000 is exactly j.
  for (int j = 1; j <= 1000; ++j) {
    ASSERT_EQ(kernels::count_for_fraction(j / 1000.0, 1000), static_cast<std::size_t>(j)) << j;
  }
  for (int j = 1; j <= 100; ++j) {
    ASSERT_EQ(kernels::count_for_fraction(j * 0.01, 100), static_cast<std::size_t>(j)) << j;
  }
}

TEST(TopkSelect, SampledMaxCount) {
  EXPECT_EQ(kernels::sampled_max_count(0), 0u);
  EXPECT_EQ(kernels::sampled_max_count(1), 1u);
  EXPECT_EQ(kernels::sampled_max_count(3), 3u);
  EXPECT_EQ(kernels::sampled_max_count(7), 9u);
  EXPECT_EQ(kernels::sampled_max_count(10), 13u);
  EXPECT_EQ(kernels::sampled_max_count(25000), 32500u);
  EXPECT_EQ(kernels::sampled_max_count(4294967295u), 5583457483u);
}

// ---- sampled -------------------------------------------------------------------------

// A valid top set: every selected |x| >= every unselected |x|, and where the selection
// splits a group of equal |x|, it took the lowest indices.
void expect_valid_top_set(std::span<const float> x, const std::vector<std::uint32_t>& sel) {
  ASSERT_TRUE(std::is_sorted(sel.begin(), sel.end()));
  ASSERT_TRUE(std::adjacent_find(sel.begin(), sel.end()) == sel.end());
  std::vector<char> in(x.size(), 0);
  float min_sel = std::numeric_limits<float>::infinity();
  for (auto i : sel) {
    ASSERT_LT(i, x.size());
    in[i] = 1;
    min_sel = std::min(min_sel, std::fabs(x[i]));
  }
  bool skipped_tie = false;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const float a = std::fabs(x[i]);
    if (in[i]) {
      if (a == min_sel) {
        ASSERT_FALSE(skipped_tie) << "tie at " << i << " taken after a lower one was left";
      }
    } else {
      ASSERT_LE(a, min_sel) << "unselected " << i << " above the selection";
      if (a == min_sel) skipped_tie = true;
    }
  }
}

std::vector<std::uint32_t> sampled(std::span<const float> x, std::size_t k, double sample,
                                   std::uint64_t key) {
  std::vector<std::uint32_t> out(kernels::sampled_max_count(std::min(k, x.size())) + 1, 0xDEADBEEF);
  const std::size_t c = kernels::select_topk_sampled(x, k, sample, CounterRng(key), out, "test");
  EXPECT_EQ(out.back(), 0xDEADBEEFu) << "wrote past sampled_max_count";
  out.resize(c);
  return out;
}

TEST(TopkSampled, ReturnsAValidTopSetOfBoundedSize) {
  for (std::size_t n : {0, 1, 15, 16, 17, 1000, 4096, 65539, 300007}) {
    for (int kind = 0; kind < kKinds; ++kind) {
      const auto x = make_input(kind, n, 11 + n);
      for (double ratio : {0.001, 0.01, 0.05, 0.3}) {
        for (double sample : {0.001, 0.01, 0.2}) {
          const std::size_t k = kernels::count_for_fraction(ratio, n);
          SCOPED_TRACE("n=" + std::to_string(n) + " kind=" + std::to_string(kind) +
                       " ratio=" + std::to_string(ratio) + " sample=" + std::to_string(sample));
          const auto sel = sampled(x, k, sample, 77);
          EXPECT_GE(10 * sel.size(), 8 * k);
          EXPECT_LE(sel.size(), kernels::sampled_max_count(k));
          expect_valid_top_set(x, sel);
          // Exactly k entries can only be the exact top-k.
          if (sel.size() == k) {
            ASSERT_EQ(sel, exact(x, k));
          }
          ASSERT_EQ(sampled(x, k, sample, 77), sel) << "not deterministic";
        }
      }
    }
  }
}

TEST(TopkSampled, GaussianMillionLandsWithinTheBand) {
  const std::size_t n = 1000000;
  std::mt19937 gen(42);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(n);
  for (auto& v : x) v = normal(gen);
  int accepted_inexact = 0;
  for (double ratio : {0.001, 0.01}) {
    const std::size_t k = kernels::count_for_fraction(ratio, n);
    for (std::uint64_t key = 0; key < 8; ++key) {
      const auto sel = sampled(x, k, 0.01, key);
      EXPECT_GE(10 * sel.size(), 8 * k);
      EXPECT_LE(10 * sel.size(), 13 * k);
      expect_valid_top_set(x, sel);
      accepted_inexact += sel.size() != k;
    }
  }
  // The sampled estimate must be doing the work (accepting 0.8k..1.3k), not the exact
  // fallback every time.
  EXPECT_GT(accepted_inexact, 4);
}

// ---- the codec -----------------------------------------------------------------------

struct Entry {
  std::uint32_t index;
  float value;
};

std::vector<Entry> parse(const std::vector<std::byte>& msg, bool fp16) {
  const std::byte* p = msg.data() + kHeaderBytes;
  const auto c = load_le<std::uint32_t>(p);
  EXPECT_EQ(msg.size(), kHeaderBytes + 4 + c * (fp16 ? 6u : 8u));
  std::vector<Entry> out;
  for (std::uint32_t j = 0; j < c; ++j) {
    const auto i = load_le<std::uint32_t>(p + 4 + 4 * j);
    const float v = fp16 ? kernels::fp16_to_float_ref(load_le<std::uint16_t>(p + 4 + 4 * c + 2 * j))
                         : load_le<float>(p + 4 + 4 * c + 4 * j);
    out.push_back({i, v});
  }
  return out;
}

TEST(TopkCodec, MessageHoldsTheReferenceTopkAndItsValues) {
  for (const char* values : {"fp32", "fp16"}) {
    const bool fp16 = std::string(values) == "fp16";
    for (double ratio : {0.001, 0.07, 0.5, 1.0}) {
      const std::string spec =
          "topk:select=exact,ratio=" + std::to_string(ratio) + ",values=" + values;
      auto c = builtin_registry().make_codec(spec);
      for (std::size_t n : {1, 100, 65539}) {
        const auto x = test::random_gradient(n, 21, 10000.0f);  // some beyond fp16 range
        const std::size_t k = kernels::count_for_fraction(ratio, n);
        const auto msg = test::encode(*c, x);
        EXPECT_EQ(msg.size(), c->max_encoded_bytes(n)) << "exact mode sends exactly k";
        const auto entries = parse(msg, fp16);
        const auto want = reference_topk(reference_order(x), k);
        ASSERT_EQ(entries.size(), want.size());
        for (std::size_t j = 0; j < want.size(); ++j) {
          ASSERT_EQ(entries[j].index, want[j]);
          const float v = x[want[j]];
          const float expect = fp16 ? kernels::fp16_to_float_ref(kernels::float_to_fp16_ref(v)) : v;
          ASSERT_EQ(entries[j].value, expect);
          if (fp16) {
            ASSERT_LE(std::fabs(entries[j].value), 65504.0f);
          }
        }
        // Fused error feedback: sent positions keep only the fp16 rounding error.
        auto p = x;
        std::vector<std::byte> fb(c->max_encoded_bytes(n));
        fb.resize(c->encode_feedback(p, {}, fb));
        ASSERT_EQ(fb, msg);
        std::vector<char> sent(n, 0);
        for (auto i : want) sent[i] = 1;
        for (std::size_t i = 0; i < n; ++i) {
          const float e =
              sent[i] ? (fp16 ? x[i] - kernels::fp16_to_float_ref(kernels::float_to_fp16_ref(x[i]))
                              : 0.0f)
                      : x[i];
          ASSERT_EQ(std::bit_cast<std::uint32_t>(p[i]), std::bit_cast<std::uint32_t>(e)) << i;
        }
      }
    }
  }
}

TEST(TopkCodec, MaxPayloadIsExact) {
  auto ex = builtin_registry().make_codec("topk:ratio=0.07,select=exact");
  EXPECT_EQ(ex->max_encoded_bytes(100), kHeaderBytes + 4 + 8 * 7);
  EXPECT_EQ(ex->max_encoded_bytes(0), kHeaderBytes + 4);
  auto sa = builtin_registry().make_codec("topk:ratio=0.1,select=sampled");
  EXPECT_EQ(sa->max_encoded_bytes(1000), kHeaderBytes + 4 + 8 * 130);
  auto h = builtin_registry().make_codec("topk:ratio=0.1,select=exact,values=fp16");
  EXPECT_EQ(h->max_encoded_bytes(1000), kHeaderBytes + 4 + 6 * 100);
  auto au = builtin_registry().make_codec("topk:ratio=0.01");
  EXPECT_EQ(au->max_encoded_bytes(262143), kHeaderBytes + 4 + 8 * 2622);
  EXPECT_EQ(au->max_encoded_bytes(262144), kHeaderBytes + 4 + 8 * 3408);  // 1.3 * 2622
  EXPECT_TRUE(au->traits().needs_memory);
  EXPECT_FALSE(au->traits().linear);
  EXPECT_FALSE(au->traits().unbiased);
  EXPECT_FALSE(ex->traits().stochastic);
}

TEST(TopkCodec, AutoSamplesLargeTensorsAndStaysInTheBand) {
  auto c = builtin_registry().make_codec("topk:ratio=0.01");
  const std::size_t n = 262144;
  const auto x = test::random_gradient(n, 3);
  for (std::uint64_t step = 0; step < 4; ++step) {
    const auto msg = test::encode(*c, x, {.seed = 1, .step = step});
    const auto entries = parse(msg, false);
    EXPECT_GE(10 * entries.size(), 8u * 2622);
    EXPECT_LE(entries.size(), 3408u);
    std::vector<std::uint32_t> idx;
    for (const auto& e : entries) idx.push_back(e.index);
    expect_valid_top_set(x, idx);
  }
}

TEST(TopkCodec, BadParametersAreRejectedByTheRegistry) {
  for (const char* spec : {"topk:ratio=0", "topk:ratio=1.5", "topk:ratio=-0.1", "topk:select=fast",
                           "topk:values=int8", "topk:sample=0", "topk:sample=2", "topk:k=5"}) {
    EXPECT_THROW(builtin_registry().make_codec(spec), InvalidArgument) << spec;
  }
}

}  // namespace
}  // namespace gradcomp
