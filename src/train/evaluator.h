// `gradcomp eval`: the distributed evaluator of ATOMO's parameter server, decoupled
// from training. It reads the checkpoints a run writes (checkpoint_dir/rank-R.ckpt,
// replaced atomically at every epoch end), evaluates each new one on the test set and
// writes one JSON line per evaluated checkpoint -- so evaluation can run on another
// machine (sharing the directory) while training goes on.
//
// A checkpoint is "new" when its (file, step) pair has not been evaluated yet. Without
// follow, one pass over the directory; with follow, the directory is polled every
// poll_ms until idle_seconds pass without a new checkpoint (0: until killed).
#pragma once

#include <cstdint>
#include <filesystem>
#include <ostream>

#include "train/datasets.h"
#include "train/models.h"

namespace gradcomp::train {

struct EvalOptions {
  std::filesystem::path checkpoint_dir;
  bool follow = false;
  std::int64_t poll_ms = 1000;
  double idle_seconds = 0;
  ModelConfig model;  // the architecture the run trained (--model, --mlp-hidden)
  DataOptions data;
  std::uint64_t seed = 42;  // the run's --seed (the synthetic data set depends on it)
  std::int64_t eval_batch = 1000;
  int threads = 1;
  std::filesystem::path output;  // JSONL; empty: standard output
};

// Returns the number of checkpoints evaluated. Throws InvalidArgument for a missing
// directory, one without a rank-*.ckpt or with one that cannot be read (without follow)
// or a checkpoint of another architecture.
std::int64_t run_eval(const EvalOptions& options, std::ostream& out);

}  // namespace gradcomp::train
