// Your own LibTorch model and loop, with gradcomp compressing the gradient exchange.
// The ranks meet like `gradcomp train`'s: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT (or
// mpirun's / Slurm's variables). Arguments: [compressor spec] [steps] [device: cpu, cuda]
// [sync_every].
//   sync_every 0 (the default): gradcomp::GradientExchange averages every step's compressed
//     gradients while backward runs. On CUDA, a compressor with a device reducer
//     (efm(topk:...), the default here) keeps the buckets and memories on the GPU; the
//     report's first line says which path ran.
//   sync_every H > 0: gradcomp::DiLoCo. Each rank takes H inner AdamW steps on its own data,
//     then the ranks exchange their compressed pseudo-gradients and take one outer step.
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "gradcomp/dist/communicator.h"
#include "gradcomp/error.h"
#include "gradcomp/torch/diloco.h"
#include "gradcomp/torch/gradient_exchange.h"

namespace {

// A small classifier of the user's own: 2 hidden layers on 32 features.
struct OwnModel : torch::nn::Module {
  OwnModel() {
    fc1 = register_module("fc1", torch::nn::Linear(32, 256));
    fc2 = register_module("fc2", torch::nn::Linear(256, 256));
    out = register_module("out", torch::nn::Linear(256, 4));
  }
  torch::Tensor forward(torch::Tensor x) {
    return out->forward(torch::relu(fc2->forward(torch::relu(fc1->forward(x)))));
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, out{nullptr};
};

// Each rank's own data: 4 Gaussian classes in 32 dimensions.
std::pair<torch::Tensor, torch::Tensor> batch(int rank, int step, const torch::Device& device) {
  torch::manual_seed(1000 * step + rank);
  auto y = torch::randint(0, 4, {64}, torch::kLong);
  auto centers = torch::eye(4, 32) * 3.0;
  auto x = centers.index_select(0, y) + torch::randn({64, 32});
  return {x.to(device), y.to(device)};
}

// The held-out accuracy of a batch no rank trained on.
double held_out_accuracy(OwnModel& model, int rank, const torch::Device& device) {
  auto [x, y] = batch(1000 + rank, 0, device);
  return model.forward(x).argmax(1).eq(y).to(torch::kFloat).mean().item<double>();
}

// Every step's gradients averaged, compressed, while backward runs.
int train_every_step(gradcomp::dist::Communicator& comm, OwnModel& model, const std::string& spec,
                     int steps, const torch::Device& device) {
  gradcomp::ExchangeOptions options;
  options.compressor = spec;
  options.momentum = 0.9f;  // the optimizer's, for compressors that carry momentum
  gradcomp::GradientExchange exchange(model.named_parameters(), comm, options);

  // Compressors such as efm/dgc apply momentum before compression: the optimizer then
  // steps compressed tensors without momentum of its own (a second param group).
  std::vector<torch::Tensor> with_momentum, without;
  for (std::size_t i = 0; i < model.parameters().size(); ++i) {
    const bool memory_momentum = exchange.momentum_in_memory() && exchange.compressible(i);
    (memory_momentum ? without : with_momentum).push_back(model.parameters()[i]);
  }
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(with_momentum, std::make_unique<torch::optim::SGDOptions>(
                                         torch::optim::SGDOptions(0.05).momentum(0.9)));
  if (!without.empty()) {
    groups.emplace_back(without, std::make_unique<torch::optim::SGDOptions>(
                                     torch::optim::SGDOptions(0.05).momentum(0.0)));
  }
  torch::optim::SGD optimizer(groups, torch::optim::SGDOptions(0.05));

  float loss_value = 0;
  for (int step = 0; step < steps; ++step) {
    auto [x, y] = batch(comm.rank(), step, device);
    optimizer.zero_grad();
    auto loss = torch::nn::functional::cross_entropy(model.forward(x), y);
    loss.backward();    // gradcomp starts exchanging buckets as their gradients arrive
    exchange.finish();  // waits; .grad holds the mean over all ranks
    optimizer.step();
    loss_value = loss.item<float>();
  }
  const double accuracy = held_out_accuracy(model, comm.rank(), device);
  const gradcomp::ExchangeStats s = exchange.take_stats();
  if (comm.rank() == 0) {
    std::printf(
        "%s (%s path): %d ranks, %d steps, loss %.4f, held-out accuracy %.3f, %.1f kB sent "
        "per step, %.1f ms per step exposed after backward\n",
        exchange.describe().c_str(), exchange.on_device() ? "device" : "host", comm.world_size(),
        steps, loss_value, accuracy, static_cast<double>(s.reduce.bytes_sent) / 1e3 / steps,
        1e3 * s.exposed_seconds / steps);
  }
  return 0;
}

// Local steps: H inner AdamW steps on each rank's own data, then one round.
int train_local_steps(gradcomp::dist::Communicator& comm, OwnModel& model, const std::string& spec,
                      int steps, std::int64_t sync_every, const torch::Device& device) {
  gradcomp::DiLoCoOptions options;
  options.sync_every = sync_every;
  options.compressor = spec;  // applied to the pseudo-gradients
  gradcomp::DiLoCo diloco(model.named_parameters(), comm, options);  // rank 0's weights
  torch::optim::AdamW inner(model.parameters(), torch::optim::AdamWOptions(1e-3));

  float loss_value = 0;
  for (int step = 0; step < steps; ++step) {
    auto [x, y] = batch(comm.rank(), step, device);
    inner.zero_grad();
    auto loss = torch::nn::functional::cross_entropy(model.forward(x), y);
    loss.backward();
    inner.step();
    diloco.step();  // every sync_every-th call: the round, the replica reset to its result
    loss_value = loss.item<float>();
  }
  diloco.synchronize();  // one model on every rank
  const double accuracy = held_out_accuracy(model, comm.rank(), device);
  const gradcomp::ExchangeStats s = diloco.take_stats();
  if (comm.rank() == 0) {
    std::printf(
        "%s: %d ranks, %d steps, loss %.4f, held-out accuracy %.3f, %llu rounds, "
        "%.1f kB sent per round\n",
        diloco.describe().c_str(), comm.world_size(), steps, loss_value, accuracy,
        static_cast<unsigned long long>(s.reduce.steps),
        static_cast<double>(s.reduce.bytes_sent) / 1e3 /
            static_cast<double>(std::max<std::uint64_t>(s.reduce.steps, 1)));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) try {
  const std::string spec = argc > 1 ? argv[1] : "efm(topk:ratio=0.05)";
  const int steps = argc > 2 ? std::stoi(argv[2]) : 100;
  const torch::Device device(argc > 3 ? argv[3] : "cpu");
  const std::int64_t sync_every = argc > 4 ? std::stoll(argv[4]) : 0;

  gradcomp::dist::Communicator comm =
      gradcomp::dist::Communicator::connect(gradcomp::dist::rendezvous_from_env());
  torch::manual_seed(0);  // the same initial weights on every rank
  auto model = std::make_shared<OwnModel>();
  model->to(device);  // before gradcomp holds the parameters
  return sync_every > 0 ? train_local_steps(comm, *model, spec, steps, sync_every, device)
                        : train_every_step(comm, *model, spec, steps, device);
} catch (const std::exception& e) {
  std::fprintf(stderr, "own_model: %s\n", e.what());
  return 1;
}
