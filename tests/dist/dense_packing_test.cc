// DensePacking (src/dist/dense_packing.h), without a communicator: the layout in
// the order slots are added, the in-place case, the means written back, the capacity.
#include <gtest/gtest.h>

#include <vector>

#include "../../src/dist/dense_packing.h"
#include "gradcomp/error.h"

namespace gradcomp::dist {
namespace {

// Stands in for the allreduce of W ranks holding the same values: every float times W.
void sum_of_identical_ranks(std::span<float> data, int w) {
  for (float& x : data) x *= static_cast<float>(w);
}

TEST(DensePacking, SlotsLieInTheOrderTheyAreAdded) {
  std::vector<float> a = {1, 2}, c = {3, 4, 5};
  DensePacking packing(2 + 3 + 3);
  packing.begin(3);
  packing.add_dense(a);
  const std::span<float> extra = packing.add_summed(3);
  extra[0] = 10, extra[1] = 11, extra[2] = 12;
  packing.add_dense(c);
  EXPECT_FALSE(packing.in_place());
  const std::span<float> packed = packing.pack();
  EXPECT_EQ(std::vector<float>(packed.begin(), packed.end()),
            (std::vector<float>{1, 2, 10, 11, 12, 3, 4, 5}));

  sum_of_identical_ranks(packed, 4);
  packing.write_means(1.0f / 4.0f);
  EXPECT_EQ(a, (std::vector<float>{1, 2}));
  EXPECT_EQ(c, (std::vector<float>{3, 4, 5}));
  EXPECT_EQ(std::vector<float>(extra.begin(), extra.end()), (std::vector<float>{40, 44, 48}));
}

TEST(DensePacking, BucketsBackToBackAreSummedInPlace) {
  std::vector<float> flat = {1, 2, 3, 4, 5};
  const std::span<float> all(flat);
  DensePacking packing(flat.size());
  packing.begin(2);
  packing.add_dense(all.first(2));
  packing.add_dense(all.subspan(2));
  ASSERT_TRUE(packing.in_place());
  const std::span<float> packed = packing.pack();
  EXPECT_EQ(packed.data(), flat.data());
  EXPECT_EQ(packed.size(), flat.size());
  sum_of_identical_ranks(packed, 2);
  packing.write_means(0.5f);
  EXPECT_EQ(flat, (std::vector<float>{1, 2, 3, 4, 5}));
}

TEST(DensePacking, NotInPlaceUnlessEveryBucketIsDenseAndAdjacent) {
  std::vector<float> flat(6, 1.0f);
  const std::span<float> all(flat);
  DensePacking packing(flat.size());

  packing.begin(3);  // one bucket travels elsewhere (a gathered message)
  packing.add_dense(all.first(2));
  packing.add_dense(all.subspan(2, 2));
  EXPECT_FALSE(packing.in_place());

  packing.begin(2);  // a gap between the buckets
  packing.add_dense(all.first(2));
  packing.add_dense(all.subspan(3, 2));
  EXPECT_FALSE(packing.in_place());

  packing.begin(2);  // a summed slot
  packing.add_dense(all.first(2));
  packing.add_summed(0);
  EXPECT_FALSE(packing.in_place());

  packing.begin(0);  // nothing at all
  EXPECT_FALSE(packing.in_place());
  EXPECT_TRUE(packing.pack().empty());
}

TEST(DensePacking, MeanIsTheSumTimesTheReciprocal) {
  std::vector<float> g = {1.0f, 0.1f, 3.0f};
  std::vector<float> sum = g;
  DensePacking packing(g.size() + 1);
  packing.begin(2);
  packing.add_summed(1);  // keeps the bucket from being summed in place
  packing.add_dense(g);
  const std::span<float> packed = packing.pack();
  for (std::size_t i = 0; i < sum.size(); ++i) packed[1 + i] = sum[i] = 3 * g[i];
  const float inv_w = 1.0f / 3.0f;
  packing.write_means(inv_w);
  for (std::size_t i = 0; i < g.size(); ++i) EXPECT_EQ(g[i], sum[i] * inv_w) << i;
}

TEST(DensePacking, AStepPastItsCapacityThrows) {
  std::vector<float> g(4);
  DensePacking packing(3);
  packing.begin(1);
  EXPECT_THROW(packing.add_dense(g), Error);
  packing.begin(1);
  EXPECT_THROW(packing.add_summed(4), Error);
}

}  // namespace
}  // namespace gradcomp::dist
