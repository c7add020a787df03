// The device scatter reducer (src/device/scatter.cc) against the host one
// (src/dist/scatter_reducer.cc) over real Gloo groups, one thread per rank, on CPU tensors:
// every bucket bit for bit after every step, the memories under the host's names with the
// host's values, the same bytes sent. Buckets of 0, 1 and odd sizes, fewer values than
// ranks (empty slices), buckets never compressed, a step that compresses none and one that
// compresses only some (the memories gathered from the flat ones and written back).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "../dist/dist_test_support.h"
#include "device_test_support.h"
#include "gradcomp/device/reducer.h"
#include "gradcomp/dist/reducers.h"
#include "gradcomp/error.h"
#include "gradcomp/method.h"

namespace gradcomp::device {
namespace {

using dist::test::run_ranks;
using test::expect_same_state;
using test::name_of;
using test::same_bits;

const std::vector<BucketShape> kShapes = {
    {0, 4096, true, 64}, {1, 64, false, 0},  {2, 1, true, 0},   {3, 0, true, 0},
    {4, 2, true, 0},     {5, 1001, true, 0}, {6, 33, false, 0}, {7, 65537, true, 256},
};
constexpr int kSteps = 5;

// Step 2 sends every bucket dense; step 3 compresses only the even-numbered ones.
bool compressed_at(int step, std::size_t b) {
  if (!kShapes[b].compressible || step == 2) return false;
  return step != 3 || b % 2 == 0;
}

std::vector<at::Tensor> step_gradients(int rank, int step) {
  at::manual_seed(1000 * static_cast<std::uint64_t>(rank) + static_cast<std::uint64_t>(step));
  std::vector<at::Tensor> out;
  for (const BucketShape& s : kShapes) {
    at::Tensor g = at::randn({static_cast<std::int64_t>(s.numel)});
    if (s.numel > 10) g.narrow(0, 0, 5).mul_(50);  // a few large entries
    out.push_back(g);
  }
  return out;
}

StepContext context(int step) {
  StepContext c;
  c.seed = 5;
  c.step = static_cast<std::uint64_t>(step);
  c.lr = 0.1f;
  c.momentum = 0.9f;
  return c;
}

void check_against_host(const std::string& spec, dist::Communicator& comm) {
  const Method method = Method::parse(spec, {.reducer = ReducerKind::kScatter});
  ASSERT_TRUE(Reducer::supports(method)) << spec;
  auto host = dist::make_reducer(method, comm, kShapes);
  auto dev = make_device_reducer(method, comm, kShapes, at::Device(at::kCPU));
  EXPECT_EQ(dev->describe(), host->describe() + " on cpu");
  for (int t = 0; t < kSteps; ++t) {
    const std::string where =
        spec + " rank " + std::to_string(comm.rank()) + " step " + std::to_string(t);
    const std::vector<at::Tensor> g = step_gradients(comm.rank(), t);
    // The device's buckets are views of one tensor, as a DDP bucket's slots are.
    const at::Tensor joined = at::cat(g);
    std::vector<at::Tensor> views;
    std::vector<float> arena(joined.data_ptr<float>(), joined.data_ptr<float>() + joined.numel());
    std::vector<BucketRef> refs;
    std::unique_ptr<bool[]> flags(new bool[kShapes.size()]);
    std::int64_t at = 0;
    for (std::size_t b = 0; b < kShapes.size(); ++b) {
      const auto n = static_cast<std::int64_t>(kShapes[b].numel);
      flags[b] = compressed_at(t, b);
      views.push_back(joined.narrow(0, at, n));
      refs.push_back({kShapes[b].id,
                      std::span<float>(arena).subspan(static_cast<std::size_t>(at),
                                                      static_cast<std::size_t>(n)),
                      flags[b]});
      at += n;
    }
    host->reduce(refs, context(t));
    dev->reduce(views, std::span<const bool>(flags.get(), kShapes.size()), context(t));
    for (std::size_t b = 0; b < kShapes.size(); ++b) {
      const at::Tensor h = at::tensor(std::vector<float>(refs[b].grad.begin(), refs[b].grad.end()));
      EXPECT_TRUE(same_bits(views[b], h)) << where << " bucket " << b;
    }
    expect_same_state(host->state(), dev->state(), where);
    EXPECT_EQ(host->take_stats().bytes_sent, dev->take_stats().bytes_sent) << where;
  }
}

class DeviceScatter : public ::testing::TestWithParam<std::string> {};

TEST_P(DeviceScatter, ReducesAsTheHostScatterReducer) {
  for (const int world : {1, 2, 3, 4}) {
    SCOPED_TRACE("world " + std::to_string(world));
    run_ranks(world, [&](dist::Communicator& comm) { check_against_host(GetParam(), comm); });
  }
}

// int (scatter's default), its error feedback at both ends, and none; a codec whose size
// varies (2-bit: slots of its bound), top-k's sampled selection (the slices' RNG keys), a
// momentum memory, and an unbiased-looking bare codec that keeps no owner residual.
INSTANTIATE_TEST_SUITE_P(Methods, DeviceScatter,
                         ::testing::Values("int", "efm(int:bits=2,block=7)",
                                           "noef(int:bits=8,block=256)", "2bit",
                                           "ef(topk:ratio=0.05,select=sampled)", "efm(1bit)",
                                           "noef(fp16)", "ef(efsign:block=32)"),
                         [](const ::testing::TestParamInfo<std::string>& p) {
                           return name_of(p.param);
                         });

// int's batches as whole blocks (its path on CUDA; GRADCOMP_DEVICE_BATCH=1 on CPU tensors):
// the same bits as the host reducer, the rank-ordered sum of 3 ranks' decodes included.
TEST(DeviceScatter, IntBatchedAsWholeBlocksReducesAsTheHostScatterReducer) {
  ::setenv("GRADCOMP_DEVICE_BATCH", "1", 1);
  for (const char* spec : {"int", "efm(int:bits=2,block=7)", "noef(int:bits=8,block=256)"}) {
    for (const int world : {1, 2, 3}) {
      SCOPED_TRACE(std::string(spec) + ", world " + std::to_string(world));
      run_ranks(world, [&](dist::Communicator& comm) { check_against_host(spec, comm); });
    }
  }
  ::unsetenv("GRADCOMP_DEVICE_BATCH");
}

TEST(DeviceScatter, MisshapenBucketsAreRefusedInOneLine) {
  run_ranks(2, [&](dist::Communicator& comm) {
    const Method method = Method::parse("int", {.reducer = ReducerKind::kScatter});
    auto dev = make_device_reducer(method, comm, kShapes, at::Device(at::kCPU));
    std::vector<at::Tensor> grads;
    for (const BucketShape& s : kShapes)
      grads.push_back(at::zeros({static_cast<std::int64_t>(s.numel)}));
    std::unique_ptr<bool[]> flags(new bool[kShapes.size()]());
    const std::span<const bool> all(flags.get(), kShapes.size());
    const auto refused = [&](std::span<const at::Tensor> g, std::span<const bool> c) {
      try {
        dev->reduce(g, c, context(0));
      } catch (const InvalidArgument& e) {
        return std::string(e.what());
      }
      return std::string("accepted");
    };
    EXPECT_EQ(refused(std::span<const at::Tensor>(grads).first(3), all.first(3)),
              "device reduce: 3 buckets, reducer built for 8");
    grads[5] = at::zeros({1000});
    EXPECT_EQ(refused(grads, all), "device reduce: bucket 5 has 1000 elements, expected 1001");
    grads[5] = at::zeros({1001}, at::kDouble);
    EXPECT_NE(refused(grads, all).find("device reduce"), std::string::npos);
  });
}

TEST(DeviceScatter, RunsOnlyWhatItCanRunOnTheDevice) {
  const auto scatter = [](const std::string& spec) {
    return Method::parse(spec, {.reducer = ReducerKind::kScatter});
  };
  EXPECT_TRUE(Reducer::supports(scatter("int")));
  EXPECT_TRUE(Reducer::supports(scatter("noef(topk)")));
  EXPECT_FALSE(Reducer::supports(scatter("qsgd")));  // no device codec
  run_ranks(1, [&](dist::Communicator& comm) {
    try {
      (void)make_device_reducer(scatter("qsgd"), comm, kShapes, at::Device(at::kCPU));
      ADD_FAILURE() << "qsgd under scatter was built on the device";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("does not run on the device"), std::string::npos)
          << e.what();
    }
  });
}

}  // namespace
}  // namespace gradcomp::device
