// GradientExchange (hooks during backward, buckets handed over as they complete) against
// the after-backward exchange the trainer runs: the same layout's buckets through one
// reducer after backward, bit for bit. Two ranks as threads over Gloo on 127.0.0.1.
// The device path (device reducers over a device buffer; on CPU tensors here, through
// ExchangeOptions::device_path_on_cpu) against the host path, and checkpoints across them.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "../dist/dist_test_support.h"
#include "gradcomp/dist/reducers.h"
#include "gradcomp/error.h"
#include "gradcomp/torch/gradient_exchange.h"

namespace gradcomp {
namespace {

using dist::Communicator;
using dist::test::run_ranks;

// A model with matrices of several sizes, biases, a parameter used twice in forward and
// one never used. Deterministic weights (no global RNG: ranks are threads).
// A test model: three layers (the middle one applied twice, so its gradient sums two
// uses), an unused parameter, deterministic weights, and its loss on deterministic batches.
struct NetShape {
  std::int64_t in, hidden, out, unused_rows;
  float weight_freq, weight_scale;
  bool tanh;  // else relu
  std::int64_t batch;
  float input_freq, input_freq_per_rank, input_shift_per_step;
};
constexpr NetShape kNetShape{40, 64, 10, 32, 0.37f, 0.2f, false, 8, 0.1f, 0.01f, 1.0f};

struct Net : torch::nn::Module {
  explicit Net(const NetShape& s = kNetShape) : shape(s) {
    fc1 = register_module("fc1", torch::nn::Linear(s.in, s.hidden));
    fc2 = register_module("fc2", torch::nn::Linear(s.hidden, s.hidden));  // applied twice
    fc3 = register_module("fc3", torch::nn::Linear(s.hidden, s.out));
    unused = register_parameter("unused", torch::zeros({s.unused_rows, s.in}));
    torch::NoGradGuard no_grad;
    float k = 0.0f;
    for (auto& p : parameters()) {
      p.copy_(torch::sin(
                  torch::arange(p.numel(), torch::kFloat).reshape(p.sizes()) * s.weight_freq + k) *
              s.weight_scale);
      k += 1.0f;
    }
  }
  torch::Tensor forward(torch::Tensor x) {
    const auto act = [&](const torch::Tensor& t) {
      return shape.tanh ? torch::tanh(t) : torch::relu(t);
    };
    x = act(fc1->forward(x));
    x = act(fc2->forward(x));
    x = act(fc2->forward(x));
    return fc3->forward(x);
  }
  NetShape shape;
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr};
  torch::Tensor unused;
};

torch::Tensor loss_of(Net& net, int rank, int step) {
  const NetShape& s = net.shape;
  const auto x = torch::cos(torch::arange(s.batch * s.in, torch::kFloat).reshape({s.batch, s.in}) *
                                (s.input_freq + s.input_freq_per_rank * static_cast<float>(rank)) +
                            s.input_shift_per_step * static_cast<float>(step));
  const auto y = torch::arange(s.batch, torch::kLong).remainder(s.out);
  return torch::nn::functional::cross_entropy(net.forward(x), y);
}

ExchangeOptions options_for(const std::string& spec) {
  ExchangeOptions o;
  o.compressor = spec;
  o.layout = {0.0, 1000, 0.0};  // fc3 (640) and biases dense; fc1, fc2 and unused compressed
  o.dense_steps = 1;
  o.seed = 5;
  o.momentum = 0.9f;
  return o;
}

// The trainer's exchange: after backward, every bucket of the plan flattened, one reducer.
std::vector<torch::Tensor> after_backward(Net& net, const std::vector<BucketPlan>& plan,
                                          Reducer& reducer, std::int64_t step,
                                          const ExchangeOptions& o) {
  auto params = net.parameters();
  std::vector<std::vector<float>> buffers;
  std::vector<BucketRef> refs;
  for (const BucketPlan& b : plan) {
    auto& buf = buffers.emplace_back(b.numel, 0.0f);
    for (const BucketPlan::Slot& s : b.slots) {
      const auto& g = params[s.param].grad();
      if (g.defined()) std::memcpy(buf.data() + s.offset, g.data_ptr<float>(), 4 * s.numel);
    }
  }
  for (std::size_t b = 0; b < plan.size(); ++b) {
    refs.push_back({plan[b].id, buffers[b], plan[b].compressible && step >= o.dense_steps});
  }
  StepContext ctx;
  ctx.seed = o.seed;
  ctx.step = static_cast<std::uint64_t>(step);
  ctx.momentum = o.momentum;
  reducer.reduce(refs, ctx);
  std::vector<torch::Tensor> out(params.size());
  for (const BucketPlan& b : plan) {
    for (const BucketPlan::Slot& s : b.slots) {
      out[s.param] =
          torch::from_blob(buffers[&b - plan.data()].data() + s.offset, params[s.param].sizes())
              .clone();
    }
  }
  return out;
}

// (compressor spec, min_group_mb): 0 exchanges every bucket alone; 0.004 MiB (1048
// floats) puts each matrix in a group of its own and the dense bucket (778 floats) with
// the last one; 1 MiB puts everything in one group.
class HookVsAfterBackward : public ::testing::TestWithParam<std::tuple<std::string, double>> {};

TEST_P(HookVsAfterBackward, BitIdenticalGradients) {
  const auto& [spec, min_group_mb] = GetParam();
  run_ranks(2, [&](Communicator& comm) {
    Net hooked;
    Net plain;
    ExchangeOptions o = options_for(spec);
    o.min_group_mb = min_group_mb;
    GradientExchange exchange(hooked.named_parameters(), comm, o);
    // The reference reducer, built like the trainer's (one reducer, every bucket), from
    // the spec as the exchange resolves it (a bare biased codec: efm under momentum).
    const auto plan = exchange.buckets();
    std::vector<BucketShape> shapes;
    for (const BucketPlan& b : plan) shapes.push_back({b.id, b.numel, b.compressible, b.rows});
    const std::string resolved = builtin_registry().with_default_memory(spec, o.momentum);
    auto reducer = dist::make_reducer(resolved, dist::ReducerKind::kAuto, comm, shapes);
    for (int step = 0; step < 4; ++step) {
      for (auto* net : {&hooked, &plain}) net->zero_grad();
      loss_of(hooked, comm.rank(), step).backward();
      exchange.finish();
      loss_of(plain, comm.rank(), step).backward();
      const auto expect = after_backward(plain, plan, *reducer, step, o);
      const auto got = hooked.parameters();
      for (std::size_t i = 0; i < got.size(); ++i) {
        ASSERT_TRUE(torch::equal(got[i].grad(), expect[i]))
            << spec << " step " << step << " parameter " << i;
      }
      // Both replicas step alike, so the next step starts from the same weights.
      torch::NoGradGuard no_grad;
      for (std::size_t i = 0; i < got.size(); ++i) {
        got[i].sub_(0.1 * got[i].grad());
        plain.parameters()[i].sub_(0.1 * expect[i]);
      }
    }
    EXPECT_EQ(exchange.step(), 4);
    const ExchangeStats s = exchange.take_stats();
    EXPECT_EQ(s.reduce.steps, 4u);
    EXPECT_GT(s.reduce.bytes_sent, 0u);
    EXPECT_FALSE(exchange.state().empty() && spec != "none");
    // The same state, in the same order (checkpoints are positional), however grouped.
    const auto mine = exchange.state();
    const auto reference = reducer->state();
    ASSERT_EQ(mine.size(), reference.size());
    for (std::size_t i = 0; i < mine.size(); ++i) {
      EXPECT_EQ(mine[i].name, reference[i].name);
      ASSERT_EQ(mine[i].data.size(), reference[i].data.size());
      EXPECT_TRUE(std::equal(mine[i].data.begin(), mine[i].data.end(), reference[i].data.begin()))
          << mine[i].name;
    }
  });
}

INSTANTIATE_TEST_SUITE_P(
    Specs, HookVsAfterBackward,
    ::testing::Combine(::testing::Values("none", "ef(topk:ratio=0.1,select=exact)",
                                         "efm(topk:ratio=0.1,select=exact)", "randomk:ratio=0.2",
                                         "powersgd:rank=2", "2bit"),
                       ::testing::Values(0.0, 0.004, 1.0)));

// No compressor named: the trainer's default for the reducer (dist::default_compressor),
// PowerSGD rank 4 under auto, a codec the reducer can run otherwise; each one exchanges.
TEST(GradientExchange, NoCompressorMeansTheDefaultForTheReducer) {
  run_ranks(2, [](Communicator& comm) {
    const std::vector<std::array<std::string, 3>> cases = {
        // reducer, default compressor, what describe() starts with
        {"auto", "powersgd", "powersgd:rank=4"},
        {"allreduce", "fp16", "allreduce(fp16"},
        {"allgather", "efm(topk:ratio=0.01)", "allgather(efm(topk:ratio=0.01"},
        {"dense", "none", "dense"}};
    for (const auto& [reducer, want, described] : cases) {
      SCOPED_TRACE(reducer);
      EXPECT_EQ(dist::default_compressor(dist::parse_reducer_kind(reducer)), want);
      Net net;
      ExchangeOptions o;
      o.reducer = parse_reducer_kind(reducer);
      o.momentum = 0.9f;
      GradientExchange exchange(net.named_parameters(), comm, o);
      EXPECT_EQ(exchange.describe().rfind(described, 0), 0u) << exchange.describe();
      loss_of(net, comm.rank(), 0).backward();
      exchange.finish();
    }
  });
}

TEST(GradientExchange, ANegativeGroupSizeIsRefused) {
  run_ranks(1, [&](Communicator& comm) {
    Net net;
    ExchangeOptions o = options_for("none");
    o.min_group_mb = -1;
    EXPECT_THROW(GradientExchange(net.named_parameters(), comm, o), InvalidArgument);
  });
}

// Without min_group_mb, a dense exchange keeps 1 MiB groups (each 2.4 MiB layer its own)
// and a compressed one takes 25 MiB groups (both layers together): counted in the
// collectives one step issues.
TEST(GradientExchange, DefaultGroupsAreSmallForDenseAndLargeWhenCompressed) {
  run_ranks(2, [](Communicator& comm) {
    const auto collectives_per_step = [&](const std::string& spec) {
      torch::nn::Sequential net(torch::nn::Linear(800, 800), torch::nn::Linear(800, 800));
      ExchangeOptions o;
      o.compressor = spec;
      GradientExchange exchange(net->named_parameters(), comm, o);
      (void)comm.take_counters();
      net->forward(torch::ones({2, 800})).sum().backward();
      exchange.finish();
      return comm.take_counters().operations;
    };
    EXPECT_EQ(collectives_per_step("none"), 2u);             // two groups, an allreduce each
    EXPECT_EQ(collectives_per_step("powersgd:rank=2"), 2u);  // one group: P, then Q
    // The same compressed exchange in 1 MiB groups: P and Q for each.
    torch::nn::Sequential net(torch::nn::Linear(800, 800), torch::nn::Linear(800, 800));
    ExchangeOptions o;
    o.compressor = "powersgd:rank=2";
    o.min_group_mb = 1.0;
    GradientExchange exchange(net->named_parameters(), comm, o);
    (void)comm.take_counters();
    net->forward(torch::ones({2, 800})).sum().backward();
    exchange.finish();
    EXPECT_EQ(comm.take_counters().operations, 4u);
  });
}

TEST(GradientExchange, UnusedParametersAreZerosAndTheMeanIsExact) {
  run_ranks(2, [](Communicator& comm) {
    Net net;
    GradientExchange exchange(net.named_parameters(), comm, options_for("none"));
    net.zero_grad();
    loss_of(net, comm.rank(), 0).backward();
    exchange.finish();
    EXPECT_TRUE(torch::equal(net.unused.grad(), torch::zeros({32, 40})));
  });
}

TEST(GradientExchange, TwoBackwardsBeforeFinishAreRefused) {
  run_ranks(1, [](Communicator& comm) {
    Net net;
    GradientExchange exchange(net.named_parameters(), comm, options_for("none"));
    loss_of(net, 0, 0).backward();
    EXPECT_THROW(loss_of(net, 0, 1).backward(), std::exception);
    exchange.finish();
  });
}

// A bare biased codec gets momentum-corrected error feedback when the optimizer has
// momentum (then momentum lives in the memory), plain error feedback when it has none.
TEST(GradientExchange, BareBiasedCodecsGetTheMemoryOfTheOptimizer) {
  run_ranks(1, [](Communicator& comm) {
    Net net;
    ExchangeOptions o = options_for("2bit");
    o.momentum = 0.9f;
    GradientExchange with(net.named_parameters(), comm, o);
    EXPECT_NE(with.describe().find("(efm(2bit:"), std::string::npos) << with.describe();
    EXPECT_TRUE(with.momentum_in_memory());
  });
  run_ranks(1, [](Communicator& comm) {
    Net net;
    ExchangeOptions o = options_for("2bit");
    o.momentum = 0.0f;
    GradientExchange without(net.named_parameters(), comm, o);
    EXPECT_NE(without.describe().find("(ef(2bit:"), std::string::npos) << without.describe();
    EXPECT_FALSE(without.momentum_in_memory());
  });
}

TEST(GradientExchange, ABadSpecIsRefused) {
  run_ranks(1, [](Communicator& comm) {
    Net net;
    EXPECT_THROW(GradientExchange(net.named_parameters(), comm, options_for("topkk")),
                 InvalidArgument);
  });
}

// The run's schedule line and warnings (Method::schedule, start_warnings) through the exchange:
// DGC's warm-up capped by ExchangeOptions::total_steps; a fixed 2-bit threshold far above
// the gradients reported once, after step 10.
TEST(GradientExchange, ScheduleAndWarnings) {
  run_ranks(1, [](Communicator& comm) {
    Net net;
    ExchangeOptions o = options_for("dgc:density=0.01");
    o.steps_per_epoch = 10;
    o.total_steps = 20;
    GradientExchange dgc(net.named_parameters(), comm, o);
    EXPECT_EQ(dgc.schedule().rfind("dgc warm-up: 2.5 steps of 20 (4 epochs capped", 0), 0u)
        << dgc.schedule();
    auto w = dgc.take_warnings();
    ASSERT_EQ(w.size(), 1u);
    EXPECT_NE(w[0].find("covers the whole run of 20 steps; capped at 2.5 steps"), std::string::npos)
        << w[0];
    EXPECT_TRUE(dgc.take_warnings().empty());  // taken
  });
  run_ranks(1, [](Communicator& comm) {
    Net net;
    GradientExchange exchange(net.named_parameters(), comm, options_for("2bit:threshold=50"));
    EXPECT_EQ(exchange.schedule(), "");
    for (int step = 0; step < 12; ++step) {
      net.zero_grad();
      loss_of(net, 0, step).backward();
      exchange.finish();
      const auto w = exchange.take_warnings();
      if (step == 10) {
        ASSERT_EQ(w.size(), 1u) << step;
        EXPECT_NE(w[0].find("2bit: threshold=50 is"), std::string::npos) << w[0];
        EXPECT_NE(w[0].find("at step 10"), std::string::npos) << w[0];
      } else {
        EXPECT_TRUE(w.empty()) << step << ": " << (w.empty() ? "" : w[0]);
      }
    }
  });
}

// A model of odd sizes for the device path: two compressible matrices (37x53 and 53x53,
// the second applied twice), and a dense bucket (fc3's 7x53, the biases, an unused
// 13x37) under min_elements 1000.
struct OddNet : Net {
  OddNet() : Net({37, 53, 7, 13, 0.41f, 0.3f, true, 9, 0.13f, 0.02f, 0.7f}) {}
};

ExchangeOptions odd_options(const std::string& spec, double min_group_mb, bool device_path) {
  ExchangeOptions o;
  o.compressor = spec;
  o.layout = {0.0, 1000, 0.0};
  o.min_group_mb = min_group_mb;
  o.dense_steps = 1;  // the warm-up step too: every bucket dense, through the device reducer
  o.seed = 11;
  o.momentum = 0.9f;
  o.device_path_on_cpu = device_path;
  return o;
}

// Steps both nets alike (SGD, lr 0.1) with `grads`, so their next step starts alike.
void step_alike(std::initializer_list<OddNet*> nets, const std::vector<torch::Tensor>& grads) {
  torch::NoGradGuard no_grad;
  for (OddNet* net : nets) {
    auto params = net->parameters();
    for (std::size_t i = 0; i < params.size(); ++i) params[i].sub_(0.1 * grads[i]);
  }
}

std::vector<torch::Tensor> grads_of(OddNet& net) {
  std::vector<torch::Tensor> out;
  for (const auto& p : net.parameters()) out.push_back(p.grad().clone());
  return out;
}

// The largest |a - b| over the tensors, relative to the largest |b|.
double largest_difference(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b,
                          double* scale = nullptr) {
  double diff = 0, top = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, (a[i] - b[i]).abs().max().item<double>());
    top = std::max(top, b[i].abs().max().item<double>());
  }
  if (scale) *scale = top;
  return diff;
}

// (spec, min_group_mb, tolerance relative to the largest gradient: 0 = bit for bit,
// ranks). Three ranks: 1/3 is inexact, so a dense group's average must be taken as the
// host path takes it (each rank's share, then the sum), not as sum * 1/3.
class DeviceVsHost : public ::testing::TestWithParam<std::tuple<std::string, double, double, int>> {
};

TEST_P(DeviceVsHost, SameMeansAndState) {
  const auto& [spec, min_group_mb, tolerance, world] = GetParam();
  run_ranks(world, [&](Communicator& comm) {
    OddNet on_device, on_host;
    GradientExchange device_path(on_device.named_parameters(), comm,
                                 odd_options(spec, min_group_mb, true));
    GradientExchange host_path(on_host.named_parameters(), comm,
                               odd_options(spec, min_group_mb, false));
    ASSERT_TRUE(device_path.on_device()) << device_path.describe();
    ASSERT_FALSE(host_path.on_device()) << host_path.describe();
    EXPECT_NE(device_path.describe().find(" on cpu"), std::string::npos) << device_path.describe();
    double worst = 0;
    for (int step = 0; step < 5; ++step) {
      for (OddNet* net : {&on_device, &on_host}) {
        net->zero_grad();
        loss_of(*net, comm.rank(), step).backward();
        (net == &on_device ? device_path : host_path).finish();
      }
      const auto got = grads_of(on_device);
      const auto want = grads_of(on_host);
      for (std::size_t i = 0; i < got.size(); ++i) {
        if (tolerance == 0) {
          ASSERT_TRUE(torch::equal(got[i], want[i]))
              << spec << " step " << step << " parameter " << i;
        }
      }
      double scale = 0;
      const double diff = largest_difference(got, want, &scale);
      worst = std::max(worst, diff / scale);
      EXPECT_LE(diff, tolerance * scale) << spec << " step " << step;
      step_alike({&on_device, &on_host}, want);
    }
    if (comm.rank() == 0) {
      std::printf(
          "[ device vs host ] %s, groups of %g MiB, %d ranks: largest difference %.3g of the "
          "largest gradient\n",
          spec.c_str(), min_group_mb, world, worst);
    }
    EXPECT_EQ(device_path.take_stats().reduce.steps, 5u);
    // The same memories, names and order: the device path's host copies of them.
    const auto mine = device_path.state();
    const auto theirs = host_path.state();
    ASSERT_EQ(mine.size(), theirs.size());
    ASSERT_FALSE(mine.empty() && spec.rfind("noef", 0) != 0);
    for (std::size_t i = 0; i < mine.size(); ++i) {
      EXPECT_EQ(mine[i].name, theirs[i].name);
      ASSERT_EQ(mine[i].data.size(), theirs[i].data.size()) << mine[i].name;
      double d = 0, top = 0;
      for (std::size_t k = 0; k < mine[i].data.size(); ++k) {
        d = std::max(d, static_cast<double>(std::abs(mine[i].data[k] - theirs[i].data[k])));
        top = std::max(top, static_cast<double>(std::abs(theirs[i].data[k])));
      }
      EXPECT_LE(d, tolerance == 0 ? 0.0 : 1e-4 * std::max(top, 1.0)) << mine[i].name;
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Specs, DeviceVsHost,
                         ::testing::Values(std::make_tuple("efm(topk:ratio=0.1)", 0.0, 0.0, 2),
                                           std::make_tuple("efm(topk:ratio=0.1)", 1.0, 0.0, 2),
                                           std::make_tuple("ef(2bit)", 0.0, 0.0, 2),
                                           std::make_tuple("ef(2bit)", 1.0, 0.0, 2),
                                           std::make_tuple("noef(1bit)", 1.0, 0.0, 2),
                                           std::make_tuple("ef(signsgd)", 0.0, 0.0, 2),
                                           std::make_tuple("dgc:density=0.05", 0.0, 0.0, 2),
                                           std::make_tuple("dgc:density=0.1,select=exact", 1.0, 0.0,
                                                           3),
                                           std::make_tuple("powersgd:rank=2", 0.0, 1e-5, 2),
                                           std::make_tuple("powersgd:rank=2", 1.0, 1e-5, 2),
                                           std::make_tuple("efm(topk:ratio=0.1)", 0.0, 0.0, 3),
                                           std::make_tuple("ef(2bit)", 1.0, 0.0, 3),
                                           std::make_tuple("powersgd:rank=2", 0.0, 1e-5, 3)));

// A method with no device reducer stays on the host path, switch or not.
TEST(GradientExchange, MethodsWithoutADeviceReducerStayOnTheHost) {
  run_ranks(1, [](Communicator& comm) {
    OddNet net;
    GradientExchange exchange(net.named_parameters(), comm, odd_options("qsgd", 0.0, true));
    EXPECT_FALSE(exchange.on_device()) << exchange.describe();
    GradientExchange linear(net.named_parameters(), comm, [] {
      ExchangeOptions o = odd_options("fp16", 0.0, true);
      o.reducer = ReducerKind::kAllreduce;
      return o;
    }());
    EXPECT_FALSE(linear.on_device()) << linear.describe();
  });
}

// A checkpoint of either path restores into the other: after 3 steps on path A, its state
// (and weights) go into a fresh exchange on path B, and both go on for 3 steps with the
// same means (bit for bit for an allgather codec, to rounding for PowerSGD).
class CheckpointAcrossPaths
    : public ::testing::TestWithParam<std::tuple<std::string, bool, double>> {};

TEST_P(CheckpointAcrossPaths, RestoresIntoTheOtherPath) {
  const auto& [spec, from_device, tolerance] = GetParam();
  run_ranks(2, [&](Communicator& comm) {
    OddNet first, second;
    GradientExchange a(first.named_parameters(), comm, odd_options(spec, 0.0, from_device));
    for (int step = 0; step < 3; ++step) {
      first.zero_grad();
      loss_of(first, comm.rank(), step).backward();
      a.finish();
      step_alike({&first}, grads_of(first));
    }
    // The checkpoint: weights, memories, step.
    {
      torch::NoGradGuard no_grad;
      for (std::size_t i = 0; i < first.parameters().size(); ++i) {
        second.parameters()[i].copy_(first.parameters()[i]);
      }
    }
    std::vector<std::pair<std::string, std::vector<float>>> saved;
    for (const StateBuffer& s : a.state())
      saved.emplace_back(s.name, std::vector<float>(s.data.begin(), s.data.end()));
    ASSERT_FALSE(saved.empty());
    GradientExchange b(second.named_parameters(), comm, odd_options(spec, 0.0, !from_device));
    ASSERT_NE(a.on_device(), b.on_device());
    const auto target = b.state();
    ASSERT_EQ(target.size(), saved.size());
    for (std::size_t i = 0; i < target.size(); ++i) {
      ASSERT_EQ(target[i].name, saved[i].first);
      ASSERT_EQ(target[i].data.size(), saved[i].second.size());
      std::copy(saved[i].second.begin(), saved[i].second.end(), target[i].data.begin());
    }
    b.set_step(a.step());
    for (int step = 3; step < 6; ++step) {
      for (OddNet* net : {&first, &second}) {
        net->zero_grad();
        loss_of(*net, comm.rank(), step).backward();
        (net == &first ? a : b).finish();
      }
      const auto want = grads_of(first);
      const auto got = grads_of(second);
      double scale = 0;
      const double diff = largest_difference(got, want, &scale);
      if (tolerance == 0) {
        EXPECT_EQ(diff, 0.0) << spec << " step " << step;
      } else {
        EXPECT_LE(diff, tolerance * scale) << spec << " step " << step;
      }
      step_alike({&first, &second}, want);
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Specs, CheckpointAcrossPaths,
                         ::testing::Values(std::make_tuple("efm(topk:ratio=0.1)", true, 0.0),
                                           std::make_tuple("efm(topk:ratio=0.1)", false, 0.0),
                                           std::make_tuple("ef(2bit)", true, 0.0),
                                           std::make_tuple("powersgd:rank=2", true, 1e-5),
                                           std::make_tuple("powersgd:rank=2", false, 1e-5)));

// Without the restore the next steps differ: the test above can tell a restored memory
// from a fresh one.
TEST(GradientExchange, AFreshMemoryDiffersFromARestoredOne) {
  run_ranks(2, [](Communicator& comm) {
    OddNet first, second;
    GradientExchange a(first.named_parameters(), comm,
                       odd_options("efm(topk:ratio=0.1)", 0.0, false));
    for (int step = 0; step < 3; ++step) {
      first.zero_grad();
      loss_of(first, comm.rank(), step).backward();
      a.finish();
      step_alike({&first}, grads_of(first));
    }
    {
      torch::NoGradGuard no_grad;
      for (std::size_t i = 0; i < first.parameters().size(); ++i) {
        second.parameters()[i].copy_(first.parameters()[i]);
      }
    }
    GradientExchange b(second.named_parameters(), comm,
                       odd_options("efm(topk:ratio=0.1)", 0.0, true));
    b.set_step(a.step());
    for (OddNet* net : {&first, &second}) {
      net->zero_grad();
      loss_of(*net, comm.rank(), 3).backward();
      (net == &first ? a : b).finish();
    }
    EXPECT_GT(largest_difference(grads_of(second), grads_of(first)), 0.0);
  });
}

// Parameters on two devices are refused at construction, in one line naming both. (A
// meta tensor stands in for the second device where there is no GPU.)
TEST(GradientExchange, ParametersOnSeveralDevicesAreRefused) {
  run_ranks(1, [](Communicator& comm) {
    const at::Device other =
        torch::cuda::is_available() ? at::Device(at::kCUDA, 0) : at::Device(at::kMeta);
    GradientExchange::NamedParameters params;
    params.insert("a", torch::zeros({4, 4}, torch::requires_grad()));
    params.insert("b",
                  torch::zeros({4, 4}, torch::TensorOptions().device(other).requires_grad(true)));
    try {
      GradientExchange exchange(params, comm, {});
      FAIL() << "accepted parameters on cpu and " << other.str();
    } catch (const InvalidArgument& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("parameters on several devices (a on cpu, b on " + other.str()),
                std::string::npos)
          << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    }
    // A frozen parameter on a GPU is not exchanged, so not refused (a frozen meta tensor
    // is, as every tensor on neither the CPU nor a CUDA device).
    if (!torch::cuda::is_available()) return;
    GradientExchange::NamedParameters frozen;
    frozen.insert("a", torch::zeros({4, 4}, torch::requires_grad()));
    frozen.insert("b", torch::zeros({4, 4}, torch::TensorOptions().device(other)));
    EXPECT_NO_THROW(GradientExchange(frozen, comm, {}));
  });
}

// On the device path a non-finite gradient is found on the exchange thread, before its
// group's reducer (a compressed step) or its allreduce (a dense group, the warm-up), and
// finish() throws it naming the tensor.
TEST(GradientExchange, DevicePathNonFiniteGradientComesOutOfFinish) {
  // (the tensor poisoned, the step: 0 is the dense warm-up, 1 compresses fc2.weight;
  // fc3.bias is in the dense bucket, a group of its own with min_group_mb 0)
  const std::vector<std::tuple<std::string, int>> cases = {
      {"fc2.weight", 0}, {"fc2.weight", 1}, {"fc3.bias", 1}};
  for (const auto& [name, poisoned_step] : cases) {
    SCOPED_TRACE(name + " at step " + std::to_string(poisoned_step));
    run_ranks(1, [&, name = name, poisoned_step = poisoned_step](Communicator& comm) {
      OddNet net;
      GradientExchange exchange(net.named_parameters(), comm,
                                odd_options("efm(topk:ratio=0.1)", 0.0, true));
      auto poison = std::make_shared<bool>(false);
      net.named_parameters()[name].register_hook([poison](torch::Tensor g) {
        if (!*poison) return g;
        g = g.clone();
        g.view({-1})[3] = std::nanf("");
        return g;
      });
      for (int step = 0; step <= poisoned_step; ++step) {
        *poison = step == poisoned_step;
        net.zero_grad();
        loss_of(net, 0, step).backward();
        if (!*poison) {
          exchange.finish();
          continue;
        }
        try {
          exchange.finish();
          FAIL() << "no NonFiniteGradient";
        } catch (const NonFiniteGradient& e) {
          EXPECT_EQ(e.parameter(), name);
          EXPECT_EQ(e.element(), 3u);
          EXPECT_EQ(e.step(), step);
          EXPECT_TRUE(std::isnan(e.value()));
        }
      }
    });
  }
}

// The fixed 2-bit threshold check reads the device buffer as it reads the host's.
TEST(GradientExchange, DevicePathWarnsOfAFixedThresholdAsTheHostPath) {
  run_ranks(1, [](Communicator& comm) {
    Net net;
    ExchangeOptions o = options_for("2bit:threshold=50");
    o.device_path_on_cpu = true;
    GradientExchange exchange(net.named_parameters(), comm, o);
    ASSERT_TRUE(exchange.on_device());
    for (int step = 0; step < 12; ++step) {
      net.zero_grad();
      loss_of(net, 0, step).backward();
      exchange.finish();
      const auto w = exchange.take_warnings();
      EXPECT_EQ(w.size(), step == 10 ? 1u : 0u) << step;
    }
  });
}

// ExchangeOptions::loss_scaling, on the host path and the device path on CPU tensors:
// a run whose loss is scaled by powers of two (changing every other step, as a loss
// scaler's does) gives, once its gradients are divided by the scale, the unscaled run's
// gradients and memories bit for bit; an overflow on one rank comes back as +inf on every
// rank's compressed tensors, no memory changed, and the run goes on.
class LossScaling : public ::testing::TestWithParam<std::tuple<std::string, bool>> {};

std::vector<float> memories_of(GradientExchange& exchange) {
  std::vector<float> out;
  for (const StateBuffer& b : exchange.state()) out.insert(out.end(), b.data.begin(), b.data.end());
  return out;
}

TEST_P(LossScaling, AScaledRunEqualsTheUnscaledOne) {
  const auto& [spec, device_path] = GetParam();
  run_ranks(2, [&, spec = spec, device_path = device_path](Communicator& comm) {
    OddNet scaled, plain;
    ExchangeOptions o = odd_options(spec, 0.0, device_path);
    GradientExchange plain_exchange(plain.named_parameters(), comm, o);
    o.loss_scaling = true;
    GradientExchange scaled_exchange(scaled.named_parameters(), comm, o);
    for (int step = 0; step < 6; ++step) {
      const float scale = std::ldexp(1.0f, 10 + step / 2);
      plain.zero_grad();
      loss_of(plain, comm.rank(), step).backward();
      plain_exchange.finish();
      scaled.zero_grad();
      scaled_exchange.set_loss_scale(scale);
      (loss_of(scaled, comm.rank(), step) * scale).backward();
      scaled_exchange.finish();
      const auto want = grads_of(plain);
      auto got = grads_of(scaled);
      for (std::size_t i = 0; i < got.size(); ++i) {
        got[i].div_(scale);
        ASSERT_TRUE(torch::equal(got[i], want[i])) << spec << " step " << step << " param " << i;
      }
      step_alike({&plain, &scaled}, want);
    }
    EXPECT_EQ(memories_of(scaled_exchange), memories_of(plain_exchange));
    EXPECT_EQ(scaled_exchange.take_stats().reduce.non_finite_skips, 0u);
  });
}

TEST_P(LossScaling, AnOverflowOnOneRankIsInfOnEveryRankAndChangesNoMemory) {
  const auto& [spec, device_path] = GetParam();
  run_ranks(2, [&, spec = spec, device_path = device_path](Communicator& comm) {
    OddNet net;
    ExchangeOptions o = odd_options(spec, 0.0, device_path);
    o.loss_scaling = true;
    GradientExchange exchange(net.named_parameters(), comm, o);
    exchange.set_loss_scale(1024.0f);
    for (int step = 0; step < 4; ++step) {
      const bool overflow = step == 2;
      const std::vector<float> before = memories_of(exchange);
      (void)exchange.take_stats();
      net.zero_grad();
      torch::Tensor loss = loss_of(net, comm.rank(), step) * 1024.0f;
      if (overflow && comm.rank() == 1) loss = loss * std::numeric_limits<float>::infinity();
      loss.backward();
      exchange.finish();
      const auto grads = grads_of(net);
      if (!overflow) {
        for (const auto& g : grads) ASSERT_TRUE(torch::isfinite(g).all().item<bool>()) << step;
        step_alike({&net}, grads);
        continue;
      }
      // The compressed tensors (every one in a group of its own here) are +inf; the
      // memories are as before; both ranks counted the skips.
      std::size_t compressed = 0;
      for (std::size_t i = 0; i < grads.size(); ++i) {
        if (!exchange.compressed_this_step(i)) continue;
        ++compressed;
        EXPECT_TRUE(torch::all(grads[i] == std::numeric_limits<float>::infinity()).item<bool>())
            << i;
      }
      EXPECT_GT(compressed, 0u);
      EXPECT_EQ(memories_of(exchange), before);
      EXPECT_GT(exchange.take_stats().reduce.non_finite_skips, 0u);
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Paths, LossScaling,
                         ::testing::Values(std::make_tuple("efm(topk:ratio=0.1)", false),
                                           std::make_tuple("efm(topk:ratio=0.1)", true),
                                           std::make_tuple("ef(2bit:threshold=0.01)", false),
                                           std::make_tuple("ef(2bit:threshold=0.01)", true),
                                           std::make_tuple("powersgd:rank=2", false),
                                           std::make_tuple("powersgd:rank=2", true)));

// Ranks configured differently would issue different collectives (Gloo aborts, or pairs
// them wrongly): constructing the exchange compares the options and the parameters first,
// and every rank throws the same line. A bad spec on one rank is refused on both.
TEST(GradientExchange, RanksConfiguredDifferentlyAllThrowTheSameLine) {
  struct Case {
    std::string name;
    std::function<void(ExchangeOptions&, int rank)> change;
    std::string want;
  };
  const std::vector<Case> cases = {
      {"compressor",
       [](ExchangeOptions& o, int r) {
         o.compressor = r == 0 ? "efm(topk:ratio=0.1)" : "powersgd";
       },
       "GradientExchange: ranks disagree on compressor: rank 0 has efm(topk:ratio=0.1), rank 1 "
       "has powersgd"},
      {"a bad spec on one rank",
       [](ExchangeOptions& o, int r) { o.compressor = r == 0 ? "topk" : "topkk"; },
       "GradientExchange: ranks disagree on compressor: rank 0 has topk, rank 1 has topkk"},
      {"loss scaling", [](ExchangeOptions& o, int r) { o.loss_scaling = r == 1; },
       "GradientExchange: ranks disagree on loss_scaling: rank 0 has false, rank 1 has true"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::array<std::string, 2> got;
    run_ranks(2, [&](Communicator& comm) {
      Net net;
      ExchangeOptions o = options_for("efm(topk:ratio=0.1)");
      c.change(o, comm.rank());
      try {
        GradientExchange exchange(net.named_parameters(), comm, o);
      } catch (const InvalidArgument& e) {
        got[static_cast<std::size_t>(comm.rank())] = e.what();
      }
    });
    EXPECT_EQ(got[0], c.want);
    EXPECT_EQ(got[1], c.want);
  }
  // Another model: the first parameter that differs, named, with both shapes.
  std::array<std::string, 2> got;
  run_ranks(2, [&](Communicator& comm) {
    NetShape shape = kNetShape;
    if (comm.rank() == 1) shape.hidden = 32;
    Net net(shape);
    try {
      GradientExchange exchange(net.named_parameters(), comm, options_for("efm(topk:ratio=0.1)"));
    } catch (const InvalidArgument& e) {
      got[static_cast<std::size_t>(comm.rank())] = e.what();
    }
  });
  EXPECT_EQ(got[0], got[1]);
  EXPECT_EQ(got[0],
            "GradientExchange: ranks disagree on parameter 1 (fc1.weight): rank 0 has Float "
            "[64, 40] on cpu, rank 1 has Float [32, 40] on cpu");
}

TEST(GradientExchange, ALossScaleNeedsLossScalingAndIsFinitePositive) {
  run_ranks(1, [](Communicator& comm) {
    Net net;
    GradientExchange plain(net.named_parameters(), comm, options_for("efm(topk:ratio=0.1)"));
    EXPECT_THROW(plain.set_loss_scale(2.0f), InvalidArgument);
    ExchangeOptions o = options_for("efm(topk:ratio=0.1)");
    o.loss_scaling = true;
    GradientExchange scaled(net.named_parameters(), comm, o);
    for (float bad : {0.0f, -1.0f, std::numeric_limits<float>::infinity(), std::nanf("")}) {
      EXPECT_THROW(scaled.set_loss_scale(bad), InvalidArgument) << bad;
    }
    scaled.set_loss_scale(65536.0f);
  });
}

}  // namespace
}  // namespace gradcomp
