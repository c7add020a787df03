#include <gtest/gtest.h>

#include <cmath>

#include "gradcomp/error.h"
#include "gradcomp/registry.h"
#include "train/layout.h"
#include "train/local_reducer.h"

namespace gradcomp::train {
namespace {

std::vector<ParamInfo> sample_params() {
  return {{"fc1.weight", 4096, 2}, {"fc1.bias", 64, 1},      {"fc2.weight", 100, 2},
          {"fc2.bias", 10, 1},     {"conv.weight", 2000, 4}, {"fc3.weight", 300000, 2},
          {"fc4.weight", 5000, 2}};
}

TEST(Layout, PerLayerBucketsAndOneDenseBucket) {
  const auto params = sample_params();
  const auto plan = plan_buckets(params, LayoutOptions{0.0, 1024});
  ASSERT_EQ(plan.size(), 5u);
  const std::vector<std::size_t> first_param = {0, 4, 5, 6};
  for (std::size_t b = 0; b < 4; ++b) {
    EXPECT_EQ(plan[b].id, b);
    EXPECT_TRUE(plan[b].compressible);
    ASSERT_EQ(plan[b].slots.size(), 1u);
    EXPECT_EQ(plan[b].slots[0].param, first_param[b]);
    EXPECT_EQ(plan[b].numel, static_cast<std::size_t>(params[first_param[b]].numel));
  }
  // 1-D tensors and fc2.weight (100 < 1024 elements) share the dense bucket, last.
  EXPECT_EQ(plan[4].id, 4u);
  EXPECT_FALSE(plan[4].compressible);
  ASSERT_EQ(plan[4].slots.size(), 3u);
  EXPECT_EQ(plan[4].slots[0].param, 1u);
  EXPECT_EQ(plan[4].slots[1].param, 2u);
  EXPECT_EQ(plan[4].slots[1].offset, 64u);
  EXPECT_EQ(plan[4].slots[2].param, 3u);
  EXPECT_EQ(plan[4].numel, 174u);
}

TEST(Layout, FusedBucketsRespectTheCap) {
  const auto params = sample_params();
  // 0.05 MiB = 13107 floats: fc1.weight + conv.weight fit (6096), fc3.weight alone
  // (larger than the cap), fc4.weight starts a new one.
  const auto plan = plan_buckets(params, LayoutOptions{0.05, 1024});
  ASSERT_EQ(plan.size(), 4u);
  ASSERT_EQ(plan[0].slots.size(), 2u);
  EXPECT_EQ(plan[0].slots[1].param, 4u);
  EXPECT_EQ(plan[0].slots[1].offset, 4096u);
  EXPECT_EQ(plan[0].numel, 6096u);
  EXPECT_EQ(plan[0].name, "fc1.weight+conv.weight");
  EXPECT_EQ(plan[1].numel, 300000u);
  EXPECT_EQ(plan[2].numel, 5000u);
  EXPECT_FALSE(plan[3].compressible);
  // min_elements 0: only dim <= 1 stays dense; fc2.weight joins the fused bucket.
  const auto plan0 = plan_buckets(params, LayoutOptions{0.05, 0});
  EXPECT_EQ(plan0[0].numel, 6196u);
  EXPECT_EQ(plan0.back().numel, 74u);
  // Same input, same plan (ids are stable).
  const auto again = plan_buckets(params, LayoutOptions{0.05, 1024});
  for (std::size_t i = 0; i < plan.size(); ++i) EXPECT_EQ(again[i].name, plan[i].name);
  EXPECT_THROW(plan_buckets(params, LayoutOptions{-1.0, 1024}), InvalidArgument);
}

TEST(Layout, DenseShareKeepsTheSmallestTensorsDense) {
  const auto params = sample_params();  // 311270 elements in all
  LayoutOptions o{0.0, 1024};
  // 2% = 6225 elements: conv.weight (2000), then fc1.weight (4096: 6096 in all) fit;
  // fc4.weight (5000) would not.
  o.dense_share = 0.02;
  const auto plan = plan_buckets(params, o);
  ASSERT_EQ(plan.size(), 3u);
  EXPECT_EQ(plan[0].name, "fc3.weight");
  EXPECT_EQ(plan[1].name, "fc4.weight");
  EXPECT_FALSE(plan[2].compressible);
  ASSERT_EQ(plan[2].slots.size(), 5u);  // parameters 0..4, in parameter order
  for (std::size_t s = 0; s < 5; ++s) EXPECT_EQ(plan[2].slots[s].param, s);
  EXPECT_EQ(plan[2].numel, 4096u + 64 + 100 + 10 + 2000);
  // 1%: conv.weight alone.
  o.dense_share = 0.01;
  const auto one = plan_buckets(params, o);
  ASSERT_EQ(one.size(), 4u);
  EXPECT_EQ(one[0].name, "fc1.weight");
  EXPECT_EQ(one.back().numel, 64u + 100 + 10 + 2000);
  // 0 changes nothing; 1 makes everything dense.
  o.dense_share = 0.0;
  EXPECT_EQ(plan_buckets(params, o).size(), 5u);
  o.dense_share = 1.0;
  const auto all = plan_buckets(params, o);
  ASSERT_EQ(all.size(), 1u);
  EXPECT_FALSE(all[0].compressible);
  for (double bad : {-0.1, 1.5, std::nan("")}) {
    o.dense_share = bad;
    EXPECT_THROW(plan_buckets(params, o), InvalidArgument) << bad;
  }
}

TEST(Layout, NoDenseBucketWhenNothingIsDense) {
  const std::vector<ParamInfo> params = {{"a", 2048, 2}, {"b", 4096, 2}};
  const auto plan = plan_buckets(params, LayoutOptions{1.0, 1024});
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_EQ(plan[0].numel, 6144u);
}

TEST(GradientBuffers, RoundTripThroughTheBuckets) {
  torch::manual_seed(1);
  std::vector<torch::Tensor> params = {torch::zeros({40, 30}), torch::zeros({30}),
                                       torch::zeros({10, 40}), torch::zeros({5, 300})};
  std::vector<ParamInfo> infos;
  for (std::size_t i = 0; i < params.size(); ++i) {
    infos.push_back(
        {std::string{"p"}.append(std::to_string(i)), params[i].numel(), params[i].dim()});
  }
  auto plan = plan_buckets(infos, LayoutOptions{0.005, 1000});  // 1310 floats per bucket
  GradientBuffers buffers(params, plan);
  ASSERT_EQ(buffers.plan().size(), 3u);  // {p0}, {p3}, dense {p1, p2}
  EXPECT_EQ(buffers.total_elements(), 1200u + 30u + 400u + 1500u);
  std::vector<torch::Tensor> grads;
  for (auto& p : params) {
    grads.push_back(torch::randn_like(p));
    p.mutable_grad() = grads.back().clone();
  }
  params[1].mutable_grad().reset();  // an unused parameter: gathered as zeros
  buffers.gather();
  const auto dense = buffers.bucket(2);
  EXPECT_EQ(dense[0], 0.0f);
  EXPECT_EQ(dense[30], grads[2].flatten()[0].item<float>());
  EXPECT_EQ(buffers.bucket(1)[7], grads[3].flatten()[7].item<float>());
  for (float& v : buffers.bucket(0)) v *= 2.0f;
  for (auto& p : params) p.mutable_grad().reset();
  buffers.scatter();
  EXPECT_TRUE(torch::equal(params[0].grad(), grads[0] * 2));
  EXPECT_TRUE(torch::equal(params[1].grad(), torch::zeros({30})));
  EXPECT_TRUE(torch::equal(params[2].grad(), grads[2]));
  EXPECT_TRUE(torch::equal(params[3].grad(), grads[3]));
  // refs: the dense warm-up marks everything dense; ids and spans are stable.
  const auto on = buffers.refs(true);
  const auto off = buffers.refs(false);
  ASSERT_EQ(on.size(), 3u);
  EXPECT_TRUE(on[0].compressed && on[1].compressed && !on[2].compressed);
  EXPECT_TRUE(!off[0].compressed && !off[1].compressed && !off[2].compressed);
  EXPECT_EQ(on[1].grad.data(), buffers.bucket(1).data());
  EXPECT_EQ(on[2].id, 2u);
}

TEST(LocalReducer, CompressesAndDecodesLikeOneWorker) {
  // top-k with ratio 0.25 under error feedback: the bucket keeps its 25% largest
  // magnitudes; the rest waits in the residual and the dense bucket passes untouched.
  std::vector<float> a(16), d(4);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i) - 7.5f;
  for (std::size_t i = 0; i < d.size(); ++i) d[i] = static_cast<float>(i);
  const std::vector<BucketShape> shapes = {{0, 16, true}, {1, 4, false}};
  LocalReducer r(Method::parse("ef(topk:ratio=0.25)"), shapes);
  const std::vector<BucketRef> refs = {{0, a, true}, {1, d, false}};
  r.reduce(refs, StepContext{});
  int nonzero = 0;
  for (float v : a) nonzero += v != 0.0f;
  EXPECT_EQ(nonzero, 4);
  EXPECT_EQ(a[0], -7.5f);
  EXPECT_EQ(a[15], 7.5f);
  EXPECT_EQ(d, (std::vector<float>{0, 1, 2, 3}));
  const auto state = r.state();
  ASSERT_EQ(state.size(), 1u);
  EXPECT_EQ(state[0].name, "bucket0.residual");
  // Sent: -7.5, -6.5, 6.5, 7.5 (indices 0, 1, 14, 15); the rest stays behind.
  EXPECT_EQ(a[1], -6.5f);
  EXPECT_EQ(state[0].data[1], 0.0f);
  EXPECT_EQ(state[0].data[2], -5.5f);
  EXPECT_EQ(state[0].data[13], 5.5f);
  const ReduceStats s = r.take_stats();
  EXPECT_EQ(s.steps, 1u);
  EXPECT_GT(s.bytes_sent, 16u);
  EXPECT_LT(s.bytes_sent, 16u * 4u + 16u);
  EXPECT_EQ(r.take_stats().steps, 0u);
  EXPECT_THROW(r.reduce(std::span<const BucketRef>(refs.data(), 1), StepContext{}),
               InvalidArgument);
}

// Exchange groups: hand-over order (compressible buckets last layer first, then the
// dense bucket), cut at min_group_mb, a short last run joining the one before.
TEST(Layout, ExchangeGroupsFollowBackwardsOrder) {
  LayoutOptions o;
  o.min_elements = 1024;
  // Three matrices of 1 MiB, 2 MiB and 0.5 MiB of fp32, and a bias.
  const std::vector<ParamInfo> ps = {
      {"a", 262144, 2, 512}, {"b", 524288, 2, 512}, {"c", 131072, 2, 256}, {"bias", 10, 1, 10}};
  const std::vector<BucketPlan> plan = plan_buckets(ps, o);
  ASSERT_EQ(plan.size(), 4u);
  EXPECT_EQ(hand_over_order(plan), (std::vector<std::size_t>{2, 1, 0, 3}));
  using Groups = std::vector<std::vector<std::size_t>>;
  // 1 MiB: c (0.5) is short, b closes the first group; a, then the bias joins a.
  EXPECT_EQ(exchange_groups(plan, 1.0), (Groups{{2, 1}, {0, 3}}));
  EXPECT_EQ(exchange_groups(plan, 0.0), (Groups{{2}, {1}, {0}, {3}}));
  EXPECT_EQ(exchange_groups(plan, 100.0), (Groups{{2, 1, 0, 3}}));
  EXPECT_TRUE(exchange_groups(std::vector<BucketPlan>{}, 1.0).empty());
  EXPECT_THROW(exchange_groups(plan, -1.0), InvalidArgument);
  EXPECT_THROW(exchange_groups(plan, std::nan("")), InvalidArgument);
}

}  // namespace
}  // namespace gradcomp::train
