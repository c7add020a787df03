// `gradcomp train` as a library call: decides whether this process is a worker of a
// distributed run (rendezvous from flags or torchrun / mpirun / Slurm environment, or
// started by the local launcher), the local launcher itself (`--workers N` with no
// rendezvous: starts N workers of this same program), or a single process; then loads
// the data, connects the communicator, builds the reducer from the compressor spec,
// trains, and prints the report on rank 0.
#pragma once

#include <filesystem>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "gradcomp/dist/communicator.h"
#include "gradcomp/dist/ps.h"
#include "gradcomp/dist/reducers.h"
#include "train/trainer.h"

namespace gradcomp::train {

struct DataOptions {
  std::string dataset = "fashion-mnist";  // fashion-mnist | mnist | cifar10 | synthetic
  std::filesystem::path data_dir;         // empty: the dataset's default location
  std::int64_t synthetic_train = 8192;    // synthetic: samples (train / test)
  std::int64_t synthetic_test = 2048;
};

struct JobOptions {
  TrainConfig train;  // rank/world/threads/progress are filled in here
  DataOptions data;
  std::string compressor = "none";  // a registry spec, e.g. "ef(topk:ratio=0.01)"
  dist::ReducerKind reducer = dist::ReducerKind::kAuto;
  // --topology: allreduce (every rank a worker) or a parameter server of `servers`
  // ranks beside the workers (--workers / world size - servers); see gradcomp/dist/ps.h.
  dist::Topology topology = dist::Topology::kAllreduce;
  int servers = 1;
  dist::Downlink downlink = dist::Downlink::kDense;
  int max_staleness = -1;
  std::size_t split_elements = dist::kDefaultSplitElements;
  std::optional<int> workers;        // --workers: a local launch of that many (given: >= 1)
  int default_workers = 1;           // local workers when neither --workers nor a rendezvous
  bool threads_given = false;        // --threads was set (else cores / local workers)
  dist::RendezvousFlags rendezvous;  // --rank --world-size --master-addr --master-port ...
  std::vector<std::string> argv;     // this program's own argv, to start local workers
};

// The data set named by `d` (train or test split).
data::Dataset load_dataset(const DataOptions& d, data::Split split, std::uint64_t seed);

// Runs the job; returns the process exit status. Errors in this process throw
// (gradcomp::Error): a bad options value before anything starts (validate_job_options,
// train/job_checks.h); a failed local worker makes the launcher return non-zero after
// printing which rank failed.
int run_job(const JobOptions& options, std::ostream& out, std::ostream& err);

// The workers this process runs itself: --workers, else the default, when it is the
// local launcher or a single process; nullopt when it is a rank of a run started
// elsewhere (rendezvous flags, torchrun / mpirun / Slurm variables, the local launcher's).
std::optional<int> local_workers(const JobOptions& options);

// The final report table (printed on rank 0).
void print_report(std::ostream& out, const TrainSummary& s, const JobOptions& options, int world);

}  // namespace gradcomp::train
