// gradcomp for your own LibTorch model: compressed gradient averaging, started as the
// backward pass produces each bucket's gradients and finished before the optimizer.
//
//   auto comm = gradcomp::dist::Communicator::connect(gradcomp::dist::rendezvous_from_env());
//   gradcomp::GradientExchange exchange(model->named_parameters(), comm,
//                                       {.compressor = "efm(topk:ratio=0.01)"});
//   for (...) {
//     optimizer.zero_grad();
//     loss = ...; loss.backward();          // buckets are exchanged while backward runs
//     exchange.finish();                    // waits; .grad now holds the mean over ranks
//     optimizer.step();                     // see momentum_in_memory() for efm/dgc/...
//   }
//
// How it works (DDP's reducer is the model): the parameters are laid out in buckets by
// gradcomp's layout rules (gradcomp/layout.h: matrices one per bucket, or fused up to
// bucket_mb; 1-D and small tensors, and the smallest within dense_share, in one dense
// bucket), numbered in reverse parameter order, the order backward produces them. A
// post hook on every parameter's gradient accumulator (DDP's way: it runs once per
// backward, after autograd has written .grad, after any tensor hook of the user's)
// copies the gradient into its bucket; buckets are grouped (consecutive buckets of at
// least min_group_mb, fixed at construction, so alike on every rank) and laid out back to
// back in one buffer in that order. When a group is complete it is handed to gradcomp's
// Exchanger, which encodes and exchanges it on a thread of its own while backward goes
// on. Groups are handed over strictly in order (a group that is complete early waits for
// the ones before it), so every rank issues the same collectives in the same order. finish() hands
// over what is left (parameters that got no gradient this step count as zeros, on every rank
// alike), waits, and writes the means into .grad.
//
// Where the buffer lives (describe() and on_device() say which):
//   device   CUDA parameters under a method with a device reducer
//            (device::Reducer::supports: an allgather of a device codec under ef, efm or
//            noef, such as efm(topk:...), ef(2bit), 1bit, signsgd, fp16; and powersgd):
//            the buffer is one fp32 tensor on the parameters' device, the hook copies the
//            gradient into it there, and the exchange thread runs the group's device
//            reducer (gradcomp/device/reducer.h, the same one the Python hook uses) on a
//            side stream; only compressed bytes (PowerSGD: its factors, and the dense
//            buckets) cross to the host. Memories stay on the device. A group that is
//            dense this step (the dense bucket alone, the warm-up) is averaged as on the
//            host: shares taken in the hook, copied to the host, one allreduce, back.
//   staged   everything else: the buffer is host memory and the host reducers run. A
//            CUDA gradient is copied to the host in its hook (synchronously) and the
//            mean back into .grad by finish().
// Both compute the same means: bit for bit for the allgather codecs, to rounding for
// PowerSGD (its device products are ATen matmuls). tests/torch holds them to that on
// CPU tensors (ExchangeOptions::device_path_on_cpu).
#pragma once

#include <torch/ordered_dict.h>
#include <torch/types.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gradcomp/layout.h"
#include "gradcomp/method.h"
#include "gradcomp/reducer.h"

namespace gradcomp {

namespace dist {
class Communicator;
}

struct ExchangeOptions {
  // Any spec `gradcomp list` accepts: codecs, ef/efm/noef, dgc, powersgd, sketched-sgd,
  // fetchsgd, atomo. A bare biased codec ("topk", "2bit") gets error feedback: with
  // momentum > 0 below, momentum-corrected (efm(...)), so momentum_in_memory() is true.
  // Parsed once into a gradcomp::Method (gradcomp/method.h) for this reducer, momentum
  // and Nesterov flag: a spec that cannot run with them (a scheme under a named reducer,
  // dgc with another momentum than the optimizer's, ...) throws InvalidArgument here.
  // Empty (the default): the trainer's, gradcomp::default_compressor(reducer): PowerSGD rank 4
  // with error feedback under "auto", the best recipe measured on the main job
  // (docs/measurements/accuracy.md), which leaves momentum to the optimizer; a reducer
  // named gets a codec it can run (allreduce: fp16, allgather: efm(topk:ratio=0.01),
  // dense: none).
  std::string compressor;
  ReducerKind reducer = ReducerKind::kAuto;  // parse_reducer_kind("allgather"), ...
  // bucket_mb 0: one bucket per compressible tensor; min_elements; dense_share.
  LayoutOptions layout{0.0, 1024, 0.01};
  // Buckets go to the wire in groups: consecutive buckets in backward order, each group
  // closed once it holds at least this many MiB of gradient (a last group below it joins
  // the one before). A group is one exchange job: one collective per kind for all of its
  // buckets, as DDP's buckets are, where every small bucket alone would pay Gloo's fixed
  // cost per collective (~3 ms here). Each bucket keeps its own memory and message.
  // 0: every bucket is a group of its own. Unset: default_group_mb() of gradcomp/layout.h,
  // 1 MiB for a dense exchange ("none"), 25 MiB for a compressed one.
  std::optional<double> min_group_mb;
  std::int64_t dense_steps = 0;       // the first steps are averaged densely (warm-up)
  std::uint64_t seed = 0;             // stochastic codecs' seed; the same on every rank
  std::uint64_t steps_per_epoch = 0;  // for schedules counted in epochs (DGC's warm-up)
  // Steps in the whole run (epochs * steps_per_epoch); 0 = unknown. DGC's warm-up is cut
  // to 1/8 of the run when warmup_epochs would take more.
  std::uint64_t total_steps = 0;
  // The optimizer's momentum and Nesterov flag, for compressors that carry momentum in
  // their memory (efm, dgc, sketched-sgd, fetchsgd, and bare biased codecs when
  // momentum > 0): see momentum_in_memory().
  float momentum = 0.0f;
  bool nesterov = false;
  std::chrono::milliseconds timeout{std::chrono::minutes(30)};
  // Look for NaN and infinity in every gradient as its hook copies it (one extra read of
  // memory that is in cache): a non-finite gradient throws NonFiniteGradient out of
  // backward() before its bucket reaches a codec or another rank. On the device path,
  // once per group on the exchange thread, out of finish() (see NonFiniteGradient).
  bool check_finite = true;
  // Loss scaling (fp16 autocast: the loss multiplied by a scale before backward, the
  // gradients divided by it before the optimizer, the step skipped when they overflowed;
  // set_loss_scale() before each backward). Groups that go through their reducer are
  // exchanged unscaled and their means scaled back into .grad, so that thresholds and
  // memories stay in gradient units whatever the scale does; dense groups (sums) carry
  // the scale through. A group holding NaN or an infinity on any rank comes back +inf in
  // .grad on every rank, no memory changed (dist::Exchanger::NonFinite::kSkipStep): every
  // rank's check of the gradients sees the overflow and skips the step alike. No
  // NonFiniteGradient is thrown then (check_finite is not applied). Every rank sets it
  // alike.
  bool loss_scaling = false;
  // Construction compares these options (as given) and the exchanged parameters' types
  // and shapes across the ranks, one allgather: ranks that differ all throw the same
  // InvalidArgument naming the first difference, where they would have issued different
  // collectives. It is collective then: every rank constructs the exchange at the same
  // point. false: the caller compared them already (gradcomp train compares its whole
  // job before it builds its trainer).
  bool compare_ranks = true;
  // A test switch: CPU parameters take the device path that CUDA parameters take (see
  // GradientExchange), its buffers and device reducers on CPU tensors, so that CI checks
  // it against the host path without a GPU. No use in training: on the CPU the host
  // path is the one to run.
  bool device_path_on_cpu = false;
};

// A gradient held a NaN or an infinity (ExchangeOptions::check_finite). Thrown by the
// gradient hook, so out of backward(); buckets handed over before it are still in
// flight. On the device path the check runs on the exchange thread, once per group
// before its reducer (no wait for the device in the hook), and finish() throws it. Like a
// communication failure it ends the exchange: stop the run (every rank does, as the others lose
// this one), lower the learning rate, resume from a checkpoint.
class NonFiniteGradient : public InvalidArgument {
 public:
  NonFiniteGradient(std::string parameter, std::size_t index, std::size_t element, float value,
                    std::int64_t step);
  const std::string& parameter() const { return parameter_; }  // its name, e.g. "fc1.weight"
  std::size_t index() const { return index_; }                 // among the exchanged parameters
  std::size_t element() const { return element_; }             // flat index in the parameter
  float value() const { return value_; }                       // NaN, +inf or -inf
  std::int64_t step() const { return step_; }

 private:
  std::string parameter_;
  std::size_t index_;
  std::size_t element_;
  float value_;
  std::int64_t step_;
};

// What the exchanges cost since the previous take_stats().
struct ExchangeStats {
  ReduceStats reduce;           // bytes, encode / communicate / decode seconds, steps
  double exposed_seconds = 0;   // time finish() waited: communication not hidden
  double backward_seconds = 0;  // first gradient to the end of backward (last hook)
};

class GradientExchange {
 public:
  using NamedParameters = torch::OrderedDict<std::string, torch::Tensor>;

  // Parameters: float32, contiguous, all on the CPU or all on one CUDA device (parameters
  // on several devices: InvalidArgument). CUDA parameters take the device path when the
  // method has a device reducer, else they are staged through the host (see above).
  // Over a c10d process group made elsewhere: torch 1.13's ProcessGroupGloo, or a
  // torch 2.x ProcessGroup whose backend for CPU tensors is Gloo ("gloo", "cpu:gloo,cuda:nccl").
  // Any other group: InvalidArgument saying what to create.
  GradientExchange(const NamedParameters& params, c10::intrusive_ptr<c10d::ProcessGroup> group,
                   ExchangeOptions options = {});
  // Over gradcomp's own communicator (dist::Communicator::connect with the rendezvous of
  // `gradcomp train`: flags or RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT); it must outlive
  // the exchange.
  GradientExchange(const NamedParameters& params, dist::Communicator& comm,
                   ExchangeOptions options = {});
  ~GradientExchange();
  GradientExchange(const GradientExchange&) = delete;
  GradientExchange& operator=(const GradientExchange&) = delete;

  // The learning rate of the coming step, for methods that work in parameter units
  // (FetchSGD's error, EF-signSGD): call before backward when it changes.
  void set_learning_rate(float lr);
  // The scale the coming backward's loss was multiplied by (ExchangeOptions::
  // loss_scaling; InvalidArgument without it, or for a scale that is not finite and > 0).
  // Taken at the first gradient of a backward: call it before backward when it changes.
  void set_loss_scale(float scale);

  // Waits for this step's exchanges and writes the mean gradients into .grad. Throws
  // gradcomp::CommError (a peer failed or timed out) or InvalidArgument (a codec could
  // not encode a bucket: the message names the bucket's tensors; on the device path also
  // NonFiniteGradient, which the staged path throws out of backward); afterwards the
  // exchange is unusable, as after any communication failure.
  void finish();

  // True when the compressor applies the optimizer's momentum itself (efm, dgc,
  // sketched-sgd, fetchsgd): the optimizer must then step the tensors in
  // compressed_this_step() without momentum of its own (e.g. a second param group with
  // momentum 0), and options.momentum must be the optimizer's.
  bool momentum_in_memory() const;
  // Whether parameter i (counting the parameters that require grad, in the order given)
  // is in a compressible bucket, and whether it was exchanged compressed in the last step
  // (not during the dense warm-up).
  bool compressible(std::size_t i) const;
  bool compressed_this_step(std::size_t i) const;

  // The layout: one plan per bucket (ids, the parameters in it, compressible or not).
  const std::vector<BucketPlan>& buckets() const;
  // "allgather(efm(topk:ratio=0.01,...))" on the host; on the device path the device
  // reducer's "allgather(efm(topk:...)) on cuda:0"; CUDA parameters staged through the
  // host: "... staged through the host from cuda:0".
  std::string describe() const;
  // Whether the buffers and memories live on the parameters' device (the device path).
  bool on_device() const;
  // The compressor's effective schedule for this run in one line, for the run's header
  // (DGC: "dgc warm-up: 58 steps (...): density 0.25, ... then 0.001"); empty when it has
  // none. Depends on options.steps_per_epoch and options.total_steps.
  std::string schedule() const;
  // Warnings not taken yet, one line each: at construction, the spec's settings that
  // cannot do what was asked in this run (Method::start_warnings); after step 10, once,
  // a fixed 2-bit threshold far above the gradients' scale. Every rank computes them
  // alike; print rank 0's (e.g. after every step).
  std::vector<std::string> take_warnings();
  ExchangeStats take_stats();

  // Every memory's state (error feedback, momenta, PowerSGD's Q), named
  // "bucket<id>.<name>", writable: save it with the model, restore it before the first
  // step of a resumed run (copy into the spans). The step counter is step()/set_step().
  // Both paths name and order it alike, so a checkpoint from one restores into the other.
  // On the device path the spans are host copies of the device memories, taken by the
  // first call after a step and copied back to the device before the next step (what
  // was written into them then counts); the spans stay valid until that step.
  std::vector<StateBuffer> state();
  std::int64_t step() const;
  void set_step(std::int64_t step);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace gradcomp
