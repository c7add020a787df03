// gradcomp::DiLoCo, the LibTorch outer loop, on two ranks as threads over Gloo: parameters
// staged through host buffers (a GPU's, or CPU ones with stage_cpu_parameters, CI's check)
// train bit for bit as parameters the loop reads in place, fragments cut across a
// parameter included; on a GPU, where there is one, CUDA parameters do too. bfloat16 and
// float16 replicas train as float32 ones rounded to that type after every step. Its
// refusals.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <optional>
#include <string>
#include <vector>

#include "../dist/dist_test_support.h"
#include "gradcomp/error.h"
#include "gradcomp/torch/diloco.h"

namespace gradcomp {
namespace {

// Three parameters: a 48x40 matrix (cut between two fragments), a bias, a 16x48 matrix.
struct OuterModel : torch::nn::Module {
  OuterModel(int rank, const torch::Device& device, torch::Dtype dtype = torch::kFloat) {
    const auto make = [&](const char* name, std::vector<std::int64_t> shape, float k) {
      const std::int64_t n = torch::tensor(shape).prod().item<std::int64_t>();
      register_parameter(name, torch::sin(torch::arange(n, torch::kFloat) * 0.37f + k + rank)
                                   .reshape(shape)
                                   .to(device, dtype));
    };
    make("a_weight", {48, 40}, 0.0f);
    make("a_bias", {48}, 1.0f);
    make("b_weight", {16, 48}, 2.0f);
  }
  // An inner step: p -= a rank- and step-dependent delta made on the CPU (float32),
  // subtracted on the parameter's device (the same rounding there as here). A 16-bit p gets
  // float32(p) - delta rounded to its type.
  void inner_step(int rank, std::int64_t step) {
    torch::NoGradGuard no_grad;
    std::int64_t i = 0;
    for (torch::Tensor& p : parameters()) {
      const torch::Tensor d =
          torch::cos(torch::arange(p.numel(), torch::kFloat) * 0.11f + 7 * rank + 3 * step + i++);
      p.sub_(d.mul_(0.01f).reshape(p.sizes()).to(p.device()));
    }
  }
  // Every parameter rounded to `type` and back: the float32 reference of a 16-bit replica.
  void round_to(torch::Dtype type) {
    torch::NoGradGuard no_grad;
    for (torch::Tensor& p : parameters()) p.copy_(p.to(type).to(torch::kFloat));
  }
  std::vector<torch::Tensor> values() {
    std::vector<torch::Tensor> out;
    for (const torch::Tensor& p : parameters())
      out.push_back(p.detach().to(torch::kCPU, torch::kFloat, false, /*copy=*/true));
    return out;
  }
};

struct OuterConfig {
  std::string compressor, outer;
  int fragments;
  std::int64_t delay;
  double mix;
};

// Each rank's parameters after each of 9 steps and after synchronize(), and how many steps
// merged a round.
struct OuterTrace {
  std::vector<std::vector<torch::Tensor>> values;
  int merges = 0;
};

// dtype: the replica's type. rounded_to: a float32 replica rounded to that type at the
// start and after every step (the reference of a 16-bit replica).
std::vector<OuterTrace> run_outer(const OuterConfig& c, const torch::Device& device, bool staged,
                                  torch::Dtype dtype = torch::kFloat,
                                  std::optional<torch::Dtype> rounded_to = std::nullopt) {
  std::vector<OuterTrace> traces(2);
  dist::test::run_ranks(2, [&](dist::Communicator& comm) {
    const int r = comm.rank();
    OuterModel model(r, device, dtype);
    if (rounded_to) model.round_to(*rounded_to);
    DiLoCoOptions o;
    o.sync_every = 4;
    o.compressor = c.compressor;
    o.outer = c.outer;
    o.fragments = c.fragments;
    o.delay = c.delay;
    o.mix = c.mix;
    o.layout.min_elements = 64;  // a_bias dense, the matrices compressed
    o.stage_cpu_parameters = staged;
    DiLoCo diloco(model.named_parameters(), comm, o);
    OuterTrace& t = traces[static_cast<std::size_t>(r)];
    for (std::int64_t s = 1; s <= 9; ++s) {
      model.inner_step(r, s);
      if (rounded_to) model.round_to(*rounded_to);
      t.merges += diloco.step() ? 1 : 0;
      if (rounded_to) model.round_to(*rounded_to);
      t.values.push_back(model.values());
    }
    diloco.synchronize();
    if (rounded_to) model.round_to(*rounded_to);
    t.values.push_back(model.values());
  });
  return traces;
}

void expect_same(const std::vector<OuterTrace>& a, const std::vector<OuterTrace>& b) {
  for (std::size_t r = 0; r < a.size(); ++r) {
    EXPECT_EQ(a[r].merges, b[r].merges);
    EXPECT_GE(a[r].merges, 2);
    ASSERT_EQ(a[r].values.size(), b[r].values.size());
    for (std::size_t t = 0; t < a[r].values.size(); ++t) {
      for (std::size_t p = 0; p < a[r].values[t].size(); ++p) {
        EXPECT_TRUE(torch::equal(a[r].values[t][p], b[r].values[t][p]))
            << "rank " << r << " step " << t + 1 << " parameter " << p;
      }
    }
  }
}

const std::vector<OuterConfig> kOuterConfigs = {
    {"fp16", "nesterov:lr=0.7,momentum=0.9", 1, 0, 0.0},
    {"ef(topk:ratio=0.1)", "average", 2, 1, 0.25},
    {"none", "sgd:lr=0.9,momentum=0.5", 2, 0, 0.5},
};

TEST(DiLoCo, StagedParametersTrainAsParametersReadInPlace) {
  for (const OuterConfig& c : kOuterConfigs) {
    SCOPED_TRACE(c.compressor + " " + c.outer);
    expect_same(run_outer(c, torch::kCPU, false), run_outer(c, torch::kCPU, true));
  }
}

TEST(DiLoCo, CudaParametersTrainAsCpuParameters) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  for (const OuterConfig& c : kOuterConfigs) {
    SCOPED_TRACE(c.compressor + " " + c.outer);
    expect_same(run_outer(c, torch::kCPU, false), run_outer(c, torch::kCUDA, false));
  }
}

// A bfloat16 or float16 replica is widened into the loop's float32 spans and rounded on
// its way back: the global weights and the outer state stay float32, and the replica is
// what a float32 one rounded to its type after every step would be.
TEST(DiLoCo, SixteenBitReplicasTrainAsFloat32OnesRoundedAfterEveryStep) {
  for (const torch::Dtype type : {torch::kBFloat16, torch::kHalf}) {
    for (const OuterConfig& c : kOuterConfigs) {
      SCOPED_TRACE(std::string(c10::toString(type)) + " " + c.compressor + " " + c.outer);
      expect_same(run_outer(c, torch::kCPU, false, torch::kFloat, type),
                  run_outer(c, torch::kCPU, false, type));
    }
  }
}

TEST(DiLoCo, CudaBfloat16ParametersTrainAsCpuOnes) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  for (const OuterConfig& c : kOuterConfigs) {
    SCOPED_TRACE(c.compressor + " " + c.outer);
    expect_same(run_outer(c, torch::kCPU, false, torch::kBFloat16),
                run_outer(c, torch::kCUDA, false, torch::kBFloat16));
  }
}

TEST(DiLoCo, ParametersItCannotKeepAreRefusedByName) {
  dist::test::run_ranks(1, [&](dist::Communicator& comm) {
    DiLoCoOptions o;
    o.sync_every = 4;
    torch::OrderedDict<std::string, torch::Tensor> params;
    params.insert("wide", torch::zeros({4, 4}, torch::kDouble).requires_grad_());
    try {
      DiLoCo d(params, comm, o);
      ADD_FAILURE() << "accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(
                    "DiLoCo: parameter wide is Double, not float32, bfloat16 or float16"),
                std::string::npos)
          << e.what();
    }
    torch::OrderedDict<std::string, torch::Tensor> strided;
    strided.insert("t", torch::zeros({4, 6}).t().requires_grad_());
    EXPECT_THROW(DiLoCo(strided, comm, o), InvalidArgument);
  });
}

// Module::to after the DiLoCo swaps every parameter's memory (set_data): the loop would
// read and write the old memory (for a CPU float32 parameter, freed memory). step() and
// synchronize() refuse it, naming the parameter; nothing is exchanged.
TEST(DiLoCo, AModelMovedOrConvertedAfterwardsIsRefusedByName) {
  dist::test::run_ranks(1, [&](dist::Communicator& comm) {
    DiLoCoOptions o;
    o.sync_every = 1;
    for (const bool sync : {false, true}) {
      auto model = std::make_shared<OuterModel>(0, torch::kCPU);
      DiLoCo d(model->named_parameters(), comm, o);
      model->to(torch::kHalf);
      try {
        if (sync) {
          d.synchronize();
        } else {
          d.step();
        }
        ADD_FAILURE() << "accepted";
      } catch (const InvalidArgument& e) {
        EXPECT_NE(std::string(e.what()).find("DiLoCo: parameter a_weight is no longer the tensor "
                                             "DiLoCo was built on (now Half on cpu)"),
                  std::string::npos)
            << e.what();
      }
    }
  });
}

}  // namespace
}  // namespace gradcomp
