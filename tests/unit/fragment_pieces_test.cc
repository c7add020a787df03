// Streaming outer loops' fragments (gradcomp/layout.h, fragment_pieces): every element of
// every parameter in exactly one piece, pieces of whole rows, fragments within a row of
// equal, and F == 1 the plan itself.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

#include "gradcomp/error.h"
#include "gradcomp/layout.h"

namespace gradcomp {
namespace {

// The default MLP: 784-1536-1536-10.
std::vector<ParamInfo> mlp() {
  return {{"fc1.weight", 1536 * 784, 2, 1536},  {"fc1.bias", 1536, 1, 1536},
          {"fc2.weight", 1536 * 1536, 2, 1536}, {"fc2.bias", 1536, 1, 1536},
          {"fc3.weight", 10 * 1536, 2, 10},     {"fc3.bias", 10, 1, 10}};
}

// Which piece (fragment, index) holds each element of each parameter: each exactly once.
void expect_a_partition(std::span<const ParamInfo> params,
                        const std::vector<std::vector<BucketPlan>>& fragments) {
  std::vector<std::vector<int>> seen(params.size());
  for (std::size_t p = 0; p < params.size(); ++p) {
    seen[p].assign(static_cast<std::size_t>(params[p].numel), 0);
  }
  std::vector<std::uint32_t> ids;
  for (const std::vector<BucketPlan>& pieces : fragments) {
    for (const BucketPlan& piece : pieces) {
      ids.push_back(piece.id);
      std::size_t covered = 0;
      for (const BucketPlan::Slot& s : piece.slots) {
        ASSERT_LT(s.param, params.size());
        ASSERT_LE(s.param_offset + s.numel, seen[s.param].size());
        EXPECT_EQ(s.offset, covered) << piece.name;  // slots laid end to end
        covered += s.numel;
        for (std::size_t i = 0; i < s.numel; ++i) ++seen[s.param][s.param_offset + i];
      }
      EXPECT_EQ(covered, piece.numel) << piece.name;
    }
  }
  for (std::size_t p = 0; p < params.size(); ++p) {
    EXPECT_TRUE(std::all_of(seen[p].begin(), seen[p].end(), [](int n) { return n == 1; }))
        << params[p].name;
  }
  // Ids 0, 1, ... without gaps (memories and RNG streams are keyed by them).
  std::sort(ids.begin(), ids.end());
  for (std::size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(ids[i], i);
}

std::size_t elements(const std::vector<BucketPlan>& pieces) {
  std::size_t n = 0;
  for (const BucketPlan& p : pieces) n += p.numel;
  return n;
}

TEST(FragmentPieces, OneFragmentIsThePlan) {
  const auto params = mlp();
  const auto plan = plan_buckets(params, {});
  const auto fragments = fragment_pieces(plan, 1);
  ASSERT_EQ(fragments.size(), 1u);
  ASSERT_EQ(fragments[0].size(), plan.size());
  for (std::size_t b = 0; b < plan.size(); ++b) {
    EXPECT_EQ(fragments[0][b].id, plan[b].id);
    EXPECT_EQ(fragments[0][b].name, plan[b].name);
    EXPECT_EQ(fragments[0][b].numel, plan[b].numel);
    EXPECT_EQ(fragments[0][b].rows, plan[b].rows);
  }
}

TEST(FragmentPieces, TheMlpsFragmentsAreEqualWithinARow) {
  const auto params = mlp();
  const auto plan = plan_buckets(params, {});
  std::size_t compressible = 0;
  for (const BucketPlan& b : plan) compressible += b.compressible ? b.numel : 0;
  for (const int f : {2, 3, 4, 5, 8, 30}) {
    SCOPED_TRACE(f);
    const auto fragments = fragment_pieces(plan, f);
    ASSERT_EQ(fragments.size(), static_cast<std::size_t>(f));
    expect_a_partition(params, fragments);
    for (const std::vector<BucketPlan>& pieces : fragments) {
      std::size_t n = 0;
      for (const BucketPlan& p : pieces) {
        if (!p.compressible) continue;
        n += p.numel;
        // A piece of a matrix is a matrix of whole rows of it.
        ASSERT_GT(p.rows, 0u) << p.name;
        ASSERT_EQ(p.numel % p.rows, 0u) << p.name;
        const ParamInfo& whole = params[p.slots[0].param];
        EXPECT_EQ(p.numel / p.rows, static_cast<std::size_t>(whole.numel / whole.rows)) << p.name;
        EXPECT_EQ(p.slots[0].param_offset % (p.numel / p.rows), 0u) << p.name;
      }
      // The widest row is fc1's and fc2's 1536 (a cut moves by at most half a row).
      const double share = static_cast<double>(compressible) / f;
      EXPECT_NEAR(static_cast<double>(n), share, 1536.0) << "fragment of " << n;
    }
  }
  // Two fragments: the first takes fc1 and fc2's first 381 rows, 1789440 elements, the
  // second the rest, as many; the dense bucket joins the first on the tie.
  const auto two = fragment_pieces(plan, 2);
  ASSERT_EQ(two[0].size(), 3u);
  EXPECT_EQ(two[0][0].name, "fc1.weight");
  EXPECT_EQ(two[0][1].name, "fc2.weight[rows 0:381]");
  EXPECT_FALSE(two[0][2].compressible);
  ASSERT_EQ(two[1].size(), 2u);
  EXPECT_EQ(two[1][0].name, "fc2.weight[rows 381:1536]");
  EXPECT_EQ(two[1][0].slots[0].param_offset, 381u * 1536u);
  EXPECT_EQ(two[1][0].rows, 1536u - 381u);
  EXPECT_EQ(two[1][1].name, "fc3.weight");
}

TEST(FragmentPieces, TheDenseBucketGoesToTheLightestFragment) {
  const auto params = mlp();
  const auto plan = plan_buckets(params, {});
  const auto fragments = fragment_pieces(plan, 3);
  int dense = 0;
  for (std::size_t f = 0; f < fragments.size(); ++f) {
    for (const BucketPlan& p : fragments[f]) {
      if (p.compressible) continue;
      ++dense;
      EXPECT_EQ(p.id, fragments[0].size() + fragments[1].size() + fragments[2].size() - 1);
      EXPECT_EQ(p.numel, plan.back().numel);
      for (std::size_t g = 0; g < fragments.size(); ++g) {
        EXPECT_LE(elements(fragments[f]) - p.numel, elements(fragments[g])) << f << " " << g;
      }
    }
  }
  EXPECT_EQ(dense, 1);
}

TEST(FragmentPieces, FusedBucketsAreCutBetweenElements) {
  // Fused buckets have no matrix view: a cut may fall anywhere, even inside a parameter.
  const std::vector<ParamInfo> params = {
      {"a", 3001, 2, 3001}, {"b", 4999, 2, 1}, {"c", 1, 1, 1}, {"d", 2048, 2, 2}};
  const auto plan = plan_buckets(params, {.bucket_mb = 1.0, .min_elements = 0});
  ASSERT_EQ(plan.size(), 2u);
  ASSERT_EQ(plan[0].rows, 0u);
  for (const int f : {1, 2, 3, 7, 10049}) {
    SCOPED_TRACE(f);
    const auto fragments = fragment_pieces(plan, f);
    expect_a_partition(params, fragments);
    for (const std::vector<BucketPlan>& pieces : fragments) {
      std::size_t n = 0;
      for (const BucketPlan& p : pieces) n += p.compressible ? p.numel : 0;
      EXPECT_NEAR(static_cast<double>(n), 10048.0 / f, 1.0);
    }
  }
}

TEST(FragmentPieces, MoreFragmentsThanRowsLeavesSomeEmpty) {
  const std::vector<ParamInfo> params = {{"w", 3 * 1000, 2, 3}, {"bias", 3, 1, 3}};
  const auto plan = plan_buckets(params, {});
  const auto fragments = fragment_pieces(plan, 8);
  expect_a_partition(params, fragments);
  int empty = 0;
  for (const std::vector<BucketPlan>& pieces : fragments) {
    for (const BucketPlan& p : pieces) {
      if (p.compressible) {
        EXPECT_EQ(p.numel, 1000u) << p.name;
      }
    }
    empty += pieces.empty() ? 1 : 0;
  }
  EXPECT_EQ(empty, 4);  // 3 rows and the dense bucket in 4 of 8 fragments
}

TEST(FragmentPieces, EmptyAndDegeneratePlans) {
  const auto none = fragment_pieces({}, 3);
  ASSERT_EQ(none.size(), 3u);
  for (const std::vector<BucketPlan>& pieces : none) EXPECT_TRUE(pieces.empty());
  const std::vector<ParamInfo> zero = {{"w", 0, 2, 5}, {"v", 6, 2, 3}};
  const auto plan = plan_buckets(zero, {.min_elements = 0});
  for (const int f : {1, 2, 4}) expect_a_partition(zero, fragment_pieces(plan, f));
  EXPECT_THROW(fragment_pieces(plan, 0), InvalidArgument);
  EXPECT_THROW(fragment_pieces(plan, -2), InvalidArgument);
}

// Each bad layout option is named alone: DiLoCo sets only min_elements, and its message
// spoke of a bucket_mb the caller never passed.
TEST(PlanBuckets, ABadOptionIsNamedAlone) {
  const std::vector<ParamInfo> params = {{"w", 12, 2, 3}};
  const auto message = [&](const LayoutOptions& o) {
    try {
      plan_buckets(params, o);
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_EQ(message({.min_elements = -1}), "layout: min_elements -1 must be >= 0");
  EXPECT_EQ(message({.bucket_mb = -0.5}), "layout: bucket_mb -0.5 must be >= 0");
}

}  // namespace
}  // namespace gradcomp
