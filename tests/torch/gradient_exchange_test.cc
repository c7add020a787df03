// GradientExchange (hooks during backward, buckets handed over as they complete) against
// the after-backward exchange the trainer runs: the same layout's buckets through one
// reducer after backward, bit for bit. Two ranks as threads over Gloo on 127.0.0.1.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <array>
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
struct Net : torch::nn::Module {
  Net() {
    fc1 = register_module("fc1", torch::nn::Linear(40, 64));
    fc2 = register_module("fc2", torch::nn::Linear(64, 64));  // applied twice
    fc3 = register_module("fc3", torch::nn::Linear(64, 10));
    unused = register_parameter("unused", torch::zeros({32, 40}));
    torch::NoGradGuard no_grad;
    float k = 0.0f;
    for (auto& p : parameters()) {
      p.copy_(torch::sin(torch::arange(p.numel(), torch::kFloat).reshape(p.sizes()) * 0.37f + k) *
              0.2f);
      k += 1.0f;
    }
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(fc1->forward(x));
    x = torch::relu(fc2->forward(x));
    x = torch::relu(fc2->forward(x));
    return fc3->forward(x);
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr};
  torch::Tensor unused;
};

torch::Tensor loss_of(Net& net, int rank, int step) {
  const auto x = torch::cos(torch::arange(8 * 40, torch::kFloat).reshape({8, 40}) *
                                (0.1f + 0.01f * static_cast<float>(rank)) +
                            static_cast<float>(step));
  const auto y = torch::arange(8, torch::kLong).remainder(10);
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

}  // namespace
}  // namespace gradcomp
