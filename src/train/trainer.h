// The training loop of one worker: minibatches from its data shard, forward/backward
// with the gradient exchange running alongside (GradientSync: gradcomp's public
// GradientExchange, or a parameter server's after-backward reducer), an SGD step on the
// mean gradient; evaluation on the test set every epoch, checkpoints, metrics and a
// progress line per epoch.
//
// Determinism: the model is initialised from config.seed; epoch e visits the shard in
// data::epoch_order(n, seed, e), batch_size samples per step (the last partial batch
// of an epoch is dropped, so every step has the same shape); everything a step
// depends on is in the model, the optimizer, the Reducer's state and the global step,
// which is what a checkpoint holds. So N steps, a checkpoint, a new process and N more
// steps give the same parameters bit for bit as 2N steps (tests/train/ checks it).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "gradcomp/cpu.h"
#include "gradcomp/data/dataset.h"
#include "gradcomp/reducer.h"
#include "train/checkpoint.h"
#include "train/gradient_sync.h"
#include "train/layout.h"
#include "train/models.h"
#include "train/optimizer.h"
#include "train/report.h"

namespace gradcomp::train {

struct TrainConfig {
  ModelConfig model;  // in_c/in_h/in_w/num_classes are taken from the data set; seed from `seed`
  std::int64_t batch_size = 64;
  std::int64_t epochs = 1;
  std::int64_t max_steps = 0;  // --steps: stop once the global step reaches this (0: no limit)
  // Learning rate: linear warm-up over warmup_steps, then decay. Step milestones are
  // in epochs; cosine runs to 0 at epochs * steps_per_epoch.
  double lr = 0.1;
  std::int64_t warmup_steps = 0;
  LrDecay decay = LrDecay::kConstant;
  std::vector<std::int64_t> milestone_epochs;
  double gamma = 0.1;
  // --optimizer: sgd (SgdOptions) or adamw (AdamWOptions; sgd.momentum and sgd.nesterov
  // are then not used: see train_momentum).
  OptimizerKind optimizer = OptimizerKind::kSgd;
  SgdOptions sgd;
  AdamWOptions adamw = {};
  std::int64_t dense_steps = 0;  // the first N steps exchange every bucket dense
  LayoutOptions layout;
  // Allreduce topology: buckets go to the wire in groups of at least this many MiB, one
  // set of collectives per group (ExchangeOptions::min_group_mb; gradcomp/layout.h).
  // Unset: 1 MiB for a dense exchange, 25 MiB for a compressed one.
  std::optional<double> min_group_mb;
  int threads = 1;       // intra-op threads (LibTorch's OpenMP pool)
  int blas_threads = 0;  // OpenBLAS's own pthreads; 0: the same as `threads`
  std::uint64_t seed = 0;
  int rank = 0;
  int world = 1;
  // The smallest shard's size over the ranks: data::shard gives some ranks one sample
  // more, and every rank must take the same steps (their exchanges pair step by step).
  // Each epoch is steps_per_epoch = smallest_shard / batch_size steps on every rank (a
  // shard's extra sample is drawn in some epochs). 0: this shard's own size.
  std::int64_t smallest_shard = 0;
  std::filesystem::path checkpoint_dir;  // empty: no checkpoints
  bool resume = false;                   // load checkpoint_dir/rank-R.ckpt if it exists
  // With resume: load this file instead (the one every rank agreed on:
  // resume_agreement.h); empty: rank-R.ckpt.
  std::filesystem::path resume_file;
  std::int64_t eval_batch = 1000;
  // Evaluate the test set every N steps as well as at every epoch's end (0: epoch ends
  // only), reported as "eval" lines with the training time so far (evaluations excluded):
  // the figure against wall-clock time.
  std::int64_t eval_every = 0;
  // Where the run is reported (header, notes, one line per epoch, the summary, text and
  // JSON lines); null: nowhere.
  Report* report = nullptr;
};

// The momentum the optimizer runs with, which a compressor keeping it in its memory (efm,
// dgc, ...) must share, and by which a bare biased codec gets efm or plain ef: SGD's, and
// 0 under AdamW (which has no such momentum).
inline double train_momentum(const TrainConfig& c) {
  return c.optimizer == OptimizerKind::kSgd ? c.sgd.momentum : 0.0;
}
inline bool train_nesterov(const TrainConfig& c) {
  return c.optimizer == OptimizerKind::kSgd && c.sgd.nesterov;
}

// Per prediction: a sample's class, or each next token of a language model's windows.
struct EvalResult {
  double loss = 0;      // mean cross-entropy
  double accuracy = 0;  // fraction correct
};

class Trainer {
 public:
  // train: this worker's shard; test: the full test set. Throws InvalidArgument for
  // a bad configuration (batch larger than the shard, unknown model, ...).
  Trainer(TrainConfig config, data::Dataset train, data::Dataset test,
          const SyncFactory& make_sync);

  // Resumes if asked, trains to the end (epochs or max_steps), evaluates every epoch,
  // writes checkpoints at every epoch end and at the stop, and the metrics summary.
  TrainSummary run();

  // One training step at the current global step (for tests and benchmarks); returns
  // the minibatch loss.
  double train_step();
  EvalResult evaluate();

  void save_checkpoint(const std::filesystem::path& file);
  // Restores everything and the global step; InvalidArgument if the file does not
  // match this model/optimizer/reducer, seed, rank or world size.
  void load_checkpoint(const std::filesystem::path& file);
  std::filesystem::path checkpoint_file() const;  // checkpoint_dir/rank-R.ckpt

  std::int64_t global_step() const { return step_; }
  std::int64_t steps_per_epoch() const { return steps_per_epoch_; }
  Model& model() { return *model_; }
  Optimizer& optimizer() { return *optimizer_; }
  GradientSync& sync() { return *sync_; }
  const TrainConfig& config() const { return config_; }

 private:
  void fill_batch(std::int64_t index_in_epoch);
  Report& report() { return config_.report != nullptr ? *config_.report : silent_report_; }
  // One line on the report, the first time an epoch's mean training loss ends
  // above twice what guessing uniformly scores (2 ln C): a run diverging while its loss
  // stays finite (a finite loss is not stopped) would otherwise end in silence.
  void warn_if_diverging(std::int64_t epoch, double train_loss);
  std::uint64_t epoch_of(std::int64_t step) const {
    return static_cast<std::uint64_t>(step / steps_per_epoch_);
  }

  TrainConfig config_;
  Report silent_report_;  // where a trainer without config_.report reports
  data::Dataset train_;
  data::Dataset test_;
  std::shared_ptr<Model> model_;
  std::vector<torch::Tensor> params_;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<LrSchedule> schedule_;
  std::unique_ptr<GradientSync> sync_;
  // Parameters whose momentum the reducer's memories carry when their bucket is
  // compressed (DGC); the optimizer applies it during dense steps.
  std::vector<std::size_t> memory_momentum_params_;
  std::int64_t steps_per_epoch_ = 0;
  std::int64_t step_ = 0;
  // Reused every step: the minibatch and the epoch's visiting order.
  torch::Tensor batch_x_;
  torch::Tensor batch_y_;
  std::vector<std::int64_t> order_;
  std::uint64_t order_epoch_ = ~std::uint64_t{0};
  // Accounting.
  double compute_seconds_ = 0;
  double exposed_seconds_ = 0;
  double eval_seconds_ = 0;  // spent in evaluations (--eval-every), not training
  ReduceStats totals_;
  std::uint64_t compressed_steps_ = 0;
  std::uint64_t compressed_bytes_ = 0;
  std::uint64_t compressed_bytes_received_ = 0;
  std::vector<double> step_ms_;
  std::int64_t steps_this_process_ = 0;
  double epoch_loss_sum_ = 0;
  std::int64_t epoch_correct_ = 0;
  std::int64_t epoch_seen_ = 0;
  std::int64_t epoch_steps_ = 0;
  bool warned_diverging_ = false;
};

// Mean cross-entropy and accuracy of `model` on `test`, eval_batch samples at a time
// (the model is put in eval mode and back into train mode).
EvalResult evaluate_model(Model& model, const data::Dataset& test, std::int64_t eval_batch);

// Sets LibTorch's intra-op threads and, when LibTorch runs on OpenBLAS, OpenBLAS's own
// thread count (the pthread build ignores OpenMP's); blas_threads 0 means `threads`.
// Measured here: with both pools at 2 threads, libgomp's spin-waiting workers starve
// OpenBLAS's threads and a step of the default MLP takes ~5x longer, unless
// OMP_WAIT_POLICY=passive is set before the process starts (libgomp reads it once) or
// one of the pools has a single thread. run() prints a note when that applies.
// InvalidArgument unless threads is in [1, kMaxThreads] and blas_threads in [0, kMaxThreads]
// (gradcomp/cpu.h).
void set_threads(int threads, int blas_threads = 0);

// Which BLAS this process runs matrix products on, found after a matmul from the
// shared objects mapped into the process (/proc/self/maps) and, for OpenBLAS, its
// openblas_get_config() string, e.g.
// "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Haswell MAX_THREADS=64 (/usr/lib/.../libblas.so.3)".
// When OPENBLAS_CORETYPE is set it ends with "[OPENBLAS_CORETYPE=SkylakeX]", and with ", set
// by gradcomp: ..." when gradcomp-torch set it because OpenBLAS fell back to its generic
// kernels (tools/gradcomp/blas_core.h; the environment variable kBlasCoreSetByGradcomp says so).
// A torch built with MKL inside (the pip wheels: BLAS_INFO=mkl) does the matrix products
// there, which the maps do not show: the line then starts "MKL, inside torch (BLAS_INFO=mkl)"
// and names the mapped OpenBLAS as gradcomp's LAPACK (ATOMO's SVD).
std::string describe_blas();

}  // namespace gradcomp::train
