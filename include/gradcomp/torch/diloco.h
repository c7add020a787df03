// Local-step training for your own LibTorch model (local SGD, DiLoCo, Streaming DiLoCo,
// SparseLoCo): every worker trains its replica with its own optimizer, and every
// `sync_every` steps the workers exchange their pseudo-gradients (global minus local
// weights) through any gradcomp compressor and take one outer step together. No DDP, no
// per-step exchange: between rounds nothing crosses the network.
//
//   auto comm = gradcomp::dist::Communicator::connect(gradcomp::dist::rendezvous_from_env());
//   gradcomp::DiLoCo diloco(model->named_parameters(), comm,
//                           {.sync_every = 30, .compressor =
//                           "ef(chunktopk:chunk=4096,k=64,values=2bit)"});
//   torch::optim::AdamW inner(model->parameters(), 1e-3);
//   for (...) {
//     inner.zero_grad();
//     loss = ...; loss.backward();
//     inner.step();
//     diloco.step();   // every 30th call: exchange, outer step, the replica reset to it
//   }
//
// The outer loop itself (the pseudo-gradients, the exchange with error feedback per
// worker, the outer optimizer, fragments and delays) is gradcomp::dist::OuterLoop
// (gradcomp/dist/outer_loop.h): the same object runs under `gradcomp train --sync-every`
// and under gradcomp.torch.DiLoCo in Python. This class hands it the parameters' memory.
#pragma once

#include <torch/ordered_dict.h>
#include <torch/types.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gradcomp/device/parameter_staging.h"
#include "gradcomp/dist/outer_loop.h"
#include "gradcomp/layout.h"
#include "gradcomp/memory.h"
#include "gradcomp/torch/gradient_exchange.h"

namespace gradcomp {

struct DiLoCoOptions {
  std::int64_t sync_every = 0;  // H: inner steps per round (required, >= 1)
  // Any spec `gradcomp list` accepts, applied to the pseudo-gradients: "fp16" (OpenDiLoCo,
  // the default: dist::kDefaultOuterCompressor), "none" (fp32, as DiLoCo),
  // "ef(chunktopk:values=2bit)" (SparseLoCo's message), ... A bare biased codec gets error
  // feedback, kept per worker across rounds.
  std::string compressor = dist::kDefaultOuterCompressor;
  // How the workers combine the compressed pseudo-gradients: kAuto (fp16 is allreduced,
  // other codecs gathered) or kScatter (any codec at a ring allreduce's bytes: each rank
  // averages 1/W of the model and sends it back compressed; "int" sends 4 bits).
  ReducerKind reducer = ReducerKind::kAuto;
  // The outer optimizer (gradcomp/outer_optimizer.h): "nesterov:lr=0.7,momentum=0.9"
  // (DiLoCo), "average" (local SGD), "sparseloco:lr=1,decay=0.95", "sgd:lr=..,momentum=..".
  std::string outer{OuterOptimizer::kDefaultSpec};
  int fragments = 1;       // Streaming DiLoCo: fragments on a staggered schedule (divides H)
  std::int64_t delay = 0;  // inner steps between a fragment's round and its merge (< H/F)
  double mix = 0.0;        // share of the local weights kept at a merge
  LayoutOptions layout{0.0, 1024, 0.0};  // which tensors are compressed (gradcomp/layout.h)
  std::uint64_t seed = 0;                // stochastic codecs' seed, the same on every rank
  std::chrono::milliseconds timeout{std::chrono::minutes(30)};  // a round's deadline
  // CPU parameters staged through host copies as a GPU's are (device/parameter_staging.h):
  // the check CI, which has no GPU, runs of that path.
  bool stage_cpu_parameters = false;
};

class DiLoCo {
 public:
  using NamedParameters = torch::OrderedDict<std::string, torch::Tensor>;

  // The parameters must be contiguous float32, bfloat16 or float16 tensors that the inner
  // optimizer updates in place (as torch::optim does), on the CPU or a GPU; the same names
  // and shapes on every rank. A GPU's are copied to pinned host buffers for each round and
  // back after its merge (device/parameter_staging.h): only at rounds, never at the other
  // inner steps; 16-bit ones are widened to float32 there and the merge rounded back. Rank 0's
  // values are broadcast to every rank here. InvalidArgument for bad options or tensors.
  DiLoCo(const NamedParameters& params, c10::intrusive_ptr<c10d::ProcessGroup> group,
         DiLoCoOptions options);
  DiLoCo(const NamedParameters& params, dist::Communicator& comm, DiLoCoOptions options);
  ~DiLoCo();
  DiLoCo(const DiLoCo&) = delete;
  DiLoCo& operator=(const DiLoCo&) = delete;

  // After every inner optimizer step. Returns true when the parameters were changed (a
  // round merged). Throws gradcomp::CommError when a round failed (a peer died or missed
  // the deadline): no parameter is changed then, and the outer state is that of the
  // last round; resume from a checkpoint.
  bool step();

  // At the end of training: every rank's parameters become the one consensus model (a
  // last round of every fragment, dist::OuterLoop::synchronize). Collective. Call it
  // before evaluating or saving the final model.
  void synchronize();
  // Inner steps taken so far (set_inner_steps on resume, after restoring state()).
  std::int64_t inner_steps() const { return steps_; }
  void set_inner_steps(std::int64_t steps);

  // The outer state: the global weights, the outer momentum, every memory of the
  // compressor, named (gradcomp/dist/outer_loop.h). Writable; save it with the model and
  // the inner optimizer.
  std::vector<StateBuffer> state();
  std::string describe() const;
  ExchangeStats take_stats();
  const dist::OuterLoop& loop() const { return *loop_; }

 private:
  void build(const NamedParameters& params, dist::Communicator& comm);

  DiLoCoOptions options_;
  std::unique_ptr<dist::Communicator> owned_comm_;
  std::unique_ptr<device::ParameterStaging> staging_;  // the spans the loop reads and writes
  std::unique_ptr<dist::OuterLoop> loop_;
  std::int64_t steps_ = 0;
};

}  // namespace gradcomp
