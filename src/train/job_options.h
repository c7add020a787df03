// The options of a `gradcomp train` run: one value, filled from the flags by the CLI
// (tools/gradcomp/train_cmd.cc), checked once by validate_job_options (job_checks.h) and
// handed to train::run (run.h).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "gradcomp/dist/communicator.h"
#include "gradcomp/dist/outer_loop.h"
#include "gradcomp/dist/ps.h"
#include "gradcomp/dist/reducers.h"
#include "train/datasets.h"
#include "train/trainer.h"

namespace gradcomp::train {

struct JobOptions {
  TrainConfig train;  // rank/world/threads/report are filled in by the worker rank
  DataOptions data;
  std::string compressor = "none";  // a registry spec, e.g. "ef(topk:ratio=0.01)"
  dist::ReducerKind reducer = dist::ReducerKind::kAuto;
  // --topology: allreduce (every rank a worker) or a parameter server of `servers`
  // ranks beside the workers (--workers / world size - servers); see gradcomp/dist/ps.h.
  dist::Topology topology = dist::Topology::kAllreduce;
  int servers = 1;
  dist::Downlink downlink = dist::Downlink::kDense;
  int max_staleness = -1;
  // ps-async: the servers' momentum rule (gradcomp/dist/ps.h); given: refused elsewhere.
  dist::AsyncMomentum async_momentum = dist::AsyncMomentum::kCompensate;
  bool async_momentum_given = false;
  std::size_t split_elements = dist::kDefaultSplitElements;
  // --sync-every H > 0: local steps with an outer loop every H steps (--outer, --fragments,
  // --delay, --mix; gradcomp/dist/outer_loop.h) instead of a per-step exchange, and the
  // compressor applies to the pseudo-gradients. 0: a per-step exchange. Its layout and
  // seed are the run's.
  dist::OuterLoopOptions outer_loop;
  std::filesystem::path metrics_path;  // --metrics: JSON lines, written by rank 0; empty: none
  std::optional<int> workers;          // --workers: a local launch of that many (given: >= 1)
  int default_workers = 1;             // local workers when neither --workers nor a rendezvous
  bool threads_given = false;          // --threads was set (else cores / local workers)
  bool momentum_given = false;         // --momentum was set (refused under --optimizer adamw)
  dist::RendezvousFlags rendezvous;    // --rank --world-size --master-addr --master-port ...
  std::vector<std::string> argv;       // this program's own argv, to start local workers
};

inline bool is_parameter_server(const JobOptions& o) {
  return o.topology != dist::Topology::kAllreduce;
}

inline bool has_outer_loop(const JobOptions& o) { return o.outer_loop.sync_every > 0; }

}  // namespace gradcomp::train
