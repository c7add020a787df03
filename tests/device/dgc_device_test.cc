// DGC on the device (src/device/dgc.cc) on CPU tensors against the host memory
// (src/core/memory/dgc.cc), exactly: per bucket, step for step, the messages byte for
// byte and the state (momentum, accumulator, learning rate) bit for bit; then the device
// allgather reducer against the host reducer over a real Gloo group (one thread per rank),
// the reduced gradients, the states and the bytes on the wire alike, the dense fallback of
// the warm-up's dense stage included.
//
// The cases cover the sampled threshold and exact selection, Nesterov, correction=0,
// masking=0, lr_rescale=0, clipping (bit for bit on CPU tensors: the device runs the
// host's norm there), warm-up (steps_per_epoch set: the density changes every two steps)
// and a learning rate that changes, and once is not given (0), between steps.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "../dist/dist_test_support.h"
#include "device/dgc.h"
#include "device_test_support.h"
#include "gradcomp/device/codec.h"
#include "gradcomp/device/reducer.h"
#include "gradcomp/dist/reducers.h"
#include "gradcomp/error.h"
#include "gradcomp/method.h"

namespace gradcomp::device {
namespace {

using dist::test::run_ranks;
using test::floats;
using test::name_of;
using test::same_bits;

const std::vector<std::string> kSpecs = {
    "dgc:density=0.01",  // sampled, warm-up over 4 epochs (8 steps here)
    "dgc:density=0.05,select=exact,warmup_epochs=0",
    "dgc:density=0.02,select=exact",  // exact through the warm-up's densities
    "dgc:density=0.01,nesterov=1",
    "dgc:density=0.02,correction=0,warmup_epochs=0",
    "dgc:density=0.01,masking=0,warmup_epochs=1",
    "dgc:density=0.01,lr_rescale=0",
    "dgc:density=0.01,clip=5",  // clipped on most steps (the gradient's 1e5 entries)
    "dgc:density=0.05,select=exact,nesterov=1,clip=0.5,warmup_epochs=0",
    "dgc:density=0.001,sample=0.1,warmup_epochs=0.5",
};

const std::vector<std::int64_t> kSizes = {0, 1, 3, 17, 1000, 4097, 65537, 300007};

constexpr int kSteps = 8;
constexpr std::uint64_t kStepsPerEpoch = 2;
// The rate per step: changes, stays, and once is not given (0: v left as it is).
constexpr float kRates[kSteps] = {0.1f, 0.1f, 0.05f, 0.0f, 0.05f, 0.01f, 0.03f, 0.03f};

// A gradient with a few large entries (clipping, ties at the top) and exact zeros.
at::Tensor gradient(std::int64_t n, std::uint64_t seed) {
  at::manual_seed(seed);
  at::Tensor g = at::randn({n}, at::TensorOptions().dtype(at::kFloat)) * 0.01;
  std::mt19937_64 rng(seed);
  for (std::int64_t i = 0; i < n; i += 97) g[i] = (rng() % 2 ? 1.0f : -1.0f) * 1e5f;
  for (std::int64_t i = 5; i < n; i += 101) g[i] = 0.0f;
  return g;
}

StepContext context(int step, std::uint32_t bucket = 3) {
  StepContext ctx;
  ctx.seed = 42;
  ctx.step = static_cast<std::uint64_t>(step);
  ctx.rank = 1;
  ctx.world = 4;  // clipping's W^-1/2
  ctx.bucket = bucket;
  ctx.steps_per_epoch = kStepsPerEpoch;
  ctx.lr = kRates[step % kSteps];
  return ctx;
}

// One bucket's memory on the host and on the device, built from one method.
struct Memories {
  Method method;
  std::unique_ptr<Memory> host;
  std::unique_ptr<DgcMemory> dev;

  Memories(const std::string& spec, std::size_t n)
      : method(Method::parse(spec)),
        host(method.make_memory(n)),
        dev(std::make_unique<DgcMemory>(detail::DgcOptions::from(method.memory_params()), n,
                                        at::TensorOptions().dtype(at::kFloat))) {}

  std::vector<std::byte> host_message(const at::Tensor& g, const StepContext& ctx) {
    std::vector<std::byte> msg(host->max_encoded_bytes());
    msg.resize(host->compress(floats(g), ctx, msg));
    return msg;
  }
  std::vector<std::byte> dev_message(const at::Tensor& g, const StepContext& ctx) {
    return frame_message(*method.codec(), static_cast<std::size_t>(g.numel()),
                         dev->compress(g, ctx).cpu());
  }
};

// The device state: the host's names in its order, its values bit for bit.
void expect_same_state(Memories& m, const std::string& where) {
  std::vector<std::pair<std::string, at::Tensor>> dev;
  m.dev->append_state("", dev);
  test::expect_same_state(m.host->state(), dev, where);
}

class DgcDeviceMemory : public ::testing::TestWithParam<std::string> {};

// Each step's message byte for byte and the state after it bit for bit, for every size;
// step 5 goes through compress_dense (the dense fallback) instead.
TEST_P(DgcDeviceMemory, StepsAsTheHostMemory) {
  for (const std::int64_t n : kSizes) {
    Memories m(GetParam(), static_cast<std::size_t>(n));
    for (int step = 0; step < kSteps; ++step) {
      const std::string where = "n=" + std::to_string(n) + " step " + std::to_string(step);
      const StepContext ctx = context(step);
      ASSERT_EQ(m.dev->step_max_encoded_bytes(*m.method.codec(), ctx),
                m.host->step_max_encoded_bytes(ctx))
          << where;
      const at::Tensor g = gradient(n, 1000 * static_cast<std::uint64_t>(step) + n);
      if (step == 5) {
        at::Tensor out_host = g.clone();
        at::Tensor out_dev = g.clone();
        m.host->compress_dense(floats(g), ctx, floats(out_host));
        m.dev->compress_dense(out_dev, ctx);
        ASSERT_TRUE(same_bits(out_dev, out_host)) << where << " (dense)";
      } else {
        const at::Tensor before = g.clone();
        const std::vector<std::byte> want = m.host_message(g, ctx);
        ASSERT_EQ(m.dev_message(g, ctx), want) << where;
        ASSERT_TRUE(same_bits(g, before)) << where << ": the gradient was written";
      }
      expect_same_state(m, where);
      if (HasFatalFailure()) return;
    }
  }
}

// A state written into the device memory (a checkpoint restored: learning rate included)
// continues as the host memory it came from. It resumes at a step whose rate differs from
// the restored one (0.05, then 0.01), so v is rescaled by the rate read back.
TEST_P(DgcDeviceMemory, RestoredFromTheHostStateContinuesAsTheHost) {
  const std::int64_t n = 4097;
  Memories m(GetParam(), static_cast<std::size_t>(n));
  constexpr int kResume = 5;
  for (int step = 0; step < kResume; ++step) m.host_message(gradient(n, step), context(step));
  std::vector<std::pair<std::string, at::Tensor>> dev;
  m.dev->append_state("", dev);
  const std::vector<StateBuffer> host = m.host->state();
  ASSERT_EQ(dev.size(), host.size());
  for (std::size_t i = 0; i < host.size(); ++i) {
    dev[i].second.copy_(at::tensor(std::vector<float>(host[i].data.begin(), host[i].data.end())));
  }
  for (int step = kResume; step < kSteps; ++step) {
    const at::Tensor g = gradient(n, step);
    const StepContext ctx = context(step);
    ASSERT_EQ(m.dev_message(g, ctx), m.host_message(g, ctx)) << "step " << step;
    expect_same_state(m, "step " + std::to_string(step));
  }
}

// A non-finite gradient: the host's InvalidArgument, word for word, and the state it
// leaves (accumulated, nothing sent).
TEST_P(DgcDeviceMemory, NonFiniteGradientRefusedAsTheHostRefusesIt) {
  for (const std::int64_t n : {std::int64_t{17}, std::int64_t{65537}}) {
    Memories m(GetParam(), static_cast<std::size_t>(n));
    m.dev_message(gradient(n, 1), context(0));
    m.host_message(gradient(n, 1), context(0));
    at::Tensor g = gradient(n, 2);
    g[n - 3] = NAN;
    g[n / 2] = INFINITY;
    std::string host_error, dev_error;
    try {
      m.host_message(g, context(1));
    } catch (const InvalidArgument& e) {
      host_error = e.what();
    }
    try {
      m.dev_message(g, context(1));
    } catch (const InvalidArgument& e) {
      dev_error = e.what();
    }
    EXPECT_NE(host_error.find("dgc compress: non-finite value at index"), std::string::npos)
        << host_error;
    EXPECT_EQ(dev_error, host_error);
    expect_same_state(m, "n=" + std::to_string(n) + " after the refusal");
  }
}

INSTANTIATE_TEST_SUITE_P(Specs, DgcDeviceMemory, ::testing::ValuesIn(kSpecs),
                         [](const ::testing::TestParamInfo<std::string>& p) {
                           return name_of(p.param);
                         });

// ---- the reducers

// A large bucket (sampled selection from a real sample), odd ones, a dense one, an empty
// one and a single element.
const std::vector<BucketShape> kShapes = {
    {10, 70001, true, 0}, {11, 1000, true, 40}, {12, 17, false, 0},
    {13, 0, true, 0},     {14, 1, true, 0},     {15, 4099, true, 0},
};

std::vector<float> bucket_gradient(int rank, int step, std::size_t b) {
  const at::Tensor g = gradient(static_cast<std::int64_t>(kShapes[b].numel),
                                100003ull * static_cast<std::uint64_t>(rank) + 101ull * step + b);
  return {g.data_ptr<float>(), g.data_ptr<float>() + g.numel()};
}

StepContext reducer_context(int step) {
  StepContext c;
  c.seed = 7;
  c.step = static_cast<std::uint64_t>(step);
  c.steps_per_epoch = kStepsPerEpoch;
  c.lr = kRates[step % kSteps];
  return c;
}

// The host reducer and a device one (batched, or one bucket at a time) on one rank for
// kSteps steps (step 3 dense for all, as --dense-steps does), compared after each. Returns
// the dense fallbacks taken. The host's buckets lie back to back, as GradientExchange's
// and the hook's do: an all-dense step is then the host's one in-place allreduce, which is
// what the device reducer does for one.
std::uint64_t check_reducers(const std::string& spec, dist::Communicator& comm, bool batched) {
  const Method method = Method::parse(spec);
  EXPECT_TRUE(Reducer::supports(method)) << spec;
  auto host = dist::make_reducer(method, comm, kShapes);
  // On CPU tensors the reducer batches only when asked to.
  if (batched) ::setenv("GRADCOMP_DEVICE_BATCH", "1", 1);
  auto dev = make_device_reducer(method, comm, kShapes, at::Device(at::kCPU));
  ::unsetenv("GRADCOMP_DEVICE_BATCH");
  std::uint64_t fallbacks = 0;
  for (int t = 0; t < kSteps; ++t) {
    const std::string where = "rank " + std::to_string(comm.rank()) + " step " + std::to_string(t);
    std::vector<float> arena;
    std::vector<at::Tensor> dev_grads;
    for (std::size_t b = 0; b < kShapes.size(); ++b) {
      const std::vector<float> g = bucket_gradient(comm.rank(), t, b);
      arena.insert(arena.end(), g.begin(), g.end());
      dev_grads.push_back(at::tensor(g).reshape({-1}).clone());
    }
    std::vector<std::span<float>> host_grads;
    std::vector<BucketRef> refs;
    std::unique_ptr<bool[]> flags(new bool[kShapes.size()]);
    std::size_t offset = 0;
    for (std::size_t b = 0; b < kShapes.size(); ++b) {
      host_grads.push_back(std::span<float>(arena).subspan(offset, kShapes[b].numel));
      offset += kShapes[b].numel;
      flags[b] = t != 3 && kShapes[b].compressible;
      refs.push_back({kShapes[b].id, host_grads[b], flags[b]});
    }
    host->reduce(refs, reducer_context(t));
    dev->reduce(dev_grads, std::span<const bool>(flags.get(), kShapes.size()), reducer_context(t));
    for (std::size_t b = 0; b < kShapes.size(); ++b) {
      EXPECT_TRUE(same_bits(
          dev_grads[b],
          at::tensor(std::vector<float>(host_grads[b].begin(), host_grads[b].end())).reshape({-1})))
          << where << " bucket " << kShapes[b].id;
    }
    test::expect_same_state(host->state(), dev->state(), where);
    const ReduceStats h = host->take_stats();
    const ReduceStats d = dev->take_stats();
    EXPECT_EQ(h.bytes_sent, d.bytes_sent) << where;
    EXPECT_EQ(h.bytes_received, d.bytes_received) << where;
    EXPECT_EQ(h.dense_fallbacks, d.dense_fallbacks) << where;
    fallbacks += d.dense_fallbacks;
  }
  return fallbacks;
}

class DgcDeviceReducer : public ::testing::TestWithParam<std::string> {};

// 5 ranks: the warm-up's first density (0.25) costs more gathered than the dense
// allreduce, so the first steps fall back to dense (compress_dense) where they warm up:
// the large bucket first, while the small ones are sent (a batch then gathers the memories
// of those sent).
void check_worlds(const std::string& spec, bool batched) {
  for (const int world : {1, 2, 5}) {
    SCOPED_TRACE("world " + std::to_string(world));
    std::vector<std::uint64_t> fallbacks(static_cast<std::size_t>(world));
    run_ranks(world, [&](dist::Communicator& comm) {
      fallbacks[static_cast<std::size_t>(comm.rank())] = check_reducers(spec, comm, batched);
    });
    const bool warms_up = Method::parse(spec).memory_params().get_float("warmup_epochs") > 0;
    if (world == 5 && warms_up) {
      EXPECT_GT(fallbacks[0], 0u) << "no dense fallback taken";
    }
  }
}

TEST_P(DgcDeviceReducer, ReducesAsTheHostReducer) { check_worlds(GetParam(), false); }

TEST_P(DgcDeviceReducer, BatchedReducesAsTheHostReducer) { check_worlds(GetParam(), true); }

INSTANTIATE_TEST_SUITE_P(Specs, DgcDeviceReducer,
                         ::testing::Values("dgc:density=0.01", "dgc:density=0.02,select=exact",
                                           "dgc:density=0.01,nesterov=1,clip=5",
                                           "dgc:density=0.02,correction=0,warmup_epochs=0"),
                         [](const ::testing::TestParamInfo<std::string>& p) {
                           return name_of(p.param);
                         });

TEST(DgcDeviceReducerState, NamedAsTheHostsAndDescribed) {
  run_ranks(1, [&](dist::Communicator& comm) {
    const auto r = make_device_reducer(Method::parse("dgc:density=0.01,lr_rescale=0"), comm,
                                       kShapes, at::Device(at::kCPU));
    EXPECT_EQ(r->describe().rfind("allgather(dgc:density=0.01,", 0), 0u) << r->describe();
    const auto state = r->state();
    ASSERT_EQ(state.size(), 2 * kShapes.size());
    EXPECT_EQ(state[0].first, "bucket10.momentum");
    EXPECT_EQ(state[1].first, "bucket10.accumulator");
  });
}

}  // namespace
}  // namespace gradcomp::device
