// How a worker's gradients meet the other workers' in each training step. Three ways,
// chosen by the topology and --sync-every:
//
//  - exchange_sync (allreduce topology: every compressor, reducer and multi-round
//    scheme): gradcomp's public GradientExchange, the class a LibTorch user drives. Its
//    gradient hooks start each bucket's encode and collective while backward is still
//    producing the next ones; finish_step() waits for what is left. The CLI trainer has
//    no exchange of its own.
//  - reducer_sync (parameter-server topologies, and single-process tests with a
//    LocalReducer): after backward the gradients are gathered into flat bucket buffers
//    and handed to a Reducer in one call. A parameter-server worker pushes and pulls
//    whole steps, and in the asynchronous mode the servers own the weights (there is no
//    optimizer step on the worker), which hooks that overlap buckets cannot express.
//  - outer_sync (--sync-every H): no per-step exchange; the gradients stay local and
//    after every optimizer step gradcomp's public DiLoCo (gradcomp/torch/diloco.h) runs
//    the outer loop's rounds on the weights.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "gradcomp/dist/outer_loop.h"
#include "gradcomp/layout.h"
#include "gradcomp/reducer.h"
#include "gradcomp/torch/diloco.h"
#include "gradcomp/torch/gradient_exchange.h"

namespace gradcomp::dist {
class Communicator;
}

namespace gradcomp::train {

struct TrainConfig;

// What a step's exchange needs to know.
struct StepInfo {
  std::int64_t step = 0;
  float lr = 0;
  // false during the dense warm-up (--dense-steps): every bucket goes dense.
  bool compress = true;
};

class GradientSync {
 public:
  virtual ~GradientSync() = default;
  // Before forward and backward of a step.
  virtual void begin_step(const StepInfo& step) = 0;
  // After backward: every parameter's .grad holds the mean over the workers, or, when
  // owns_weights(), the parameters hold the servers' latest weights. Throws
  // NonFiniteGradient for a NaN or infinite gradient (before it reaches a codec or a
  // peer), InvalidArgument naming the tensor when a codec fails, CommError.
  virtual void finish_step() = 0;
  // Asynchronous parameter server: the servers apply the updates, the worker does not.
  virtual bool owns_weights() const { return false; }
  // The compressor applies the optimizer's momentum in its memories (efm, dgc, ...).
  virtual bool momentum_in_memory() const = 0;
  virtual const std::vector<BucketPlan>& buckets() const = 0;
  // Since the previous call: bytes, encode/communicate/decode seconds, and how long the
  // trainer waited for the exchange after backward (exposed_seconds).
  virtual ExchangeStats take_stats() = 0;
  // Every memory's state, named "bucket<id>.<name>", writable (checkpoints).
  virtual std::vector<StateBuffer> state() = 0;
  virtual std::string describe() const = 0;
  // One line each, once: what the compressor's settings cannot do in this run (at
  // construction: the Method's start warnings (gradcomp/method.h); a fixed 2-bit threshold
  // far above the gradients, after the first steps). The trainer prints them on rank 0.
  virtual std::vector<std::string> take_warnings() = 0;
  // After the optimizer's step that completed `steps` steps: the outer loop's rounds.
  // True when the weights were changed.
  virtual bool after_optimizer_step(std::int64_t /*steps*/) { return false; }
  // After the last step of training (`steps` of them), before the final evaluation and
  // checkpoint: the outer loop's consensus model on every rank.
  virtual void finish_training(std::int64_t /*steps*/) {}
  // After a checkpoint restored state(): training continues after `steps` steps.
  virtual void resume_at(std::int64_t /*steps*/) {}
};

// What a GradientSync is built from: the model's parameters (in model order) and the
// run's configuration, once the trainer knows its steps per epoch.
struct SyncSetup {
  torch::OrderedDict<std::string, torch::Tensor> named_parameters;
  const TrainConfig& config;
  std::int64_t steps_per_epoch = 0;
};
using SyncFactory = std::function<std::unique_ptr<GradientSync>(const SyncSetup&)>;

// The allreduce topology: GradientExchange over comm (which must outlive the trainer),
// with the compressor and reducer ("auto", "dense", "allreduce", "allgather").
SyncFactory exchange_sync(dist::Communicator& comm, std::string compressor, ReducerKind reducer);

// Builds the Reducer once the bucket layout is known (a parameter-server worker, a
// LocalReducer). A reducer that is also a WeightExchange (the ps-async worker) gets the
// gradient each step and returns the weights, and the trainer skips its optimizer step.
using ReducerFactory = std::function<std::unique_ptr<Reducer>(std::span<const BucketShape>)>;
// `method` is what the reducer runs: its start-of-run warnings and threshold check.
SyncFactory reducer_sync(ReducerFactory make_reducer, Method method);

// Local steps with an outer loop over comm (which must outlive the trainer): `compressor`
// on the pseudo-gradients combined by `reducer`, options as DiLoCoOptions (its layout and
// seed are the run's).
SyncFactory outer_sync(dist::Communicator& comm, std::string compressor, ReducerKind reducer,
                       dist::OuterLoopOptions options);

}  // namespace gradcomp::train
