#include "train/role.h"

#include <algorithm>
#include <cstdlib>
#include <thread>

#include "gradcomp/launch.h"

namespace gradcomp::train {

namespace {

bool env_set(const char* name) { return std::getenv(name) != nullptr; }

bool is_rank_of_a_run(const JobOptions& o) {
  const auto& f = o.rendezvous;
  if (f.rank || f.world_size || f.master_addr || f.master_port) return true;
  if (started_by_local_launcher()) return true;
  if (o.workers) return false;  // an explicit local launch wins over ambient variables
  return env_set("RANK") || env_set("OMPI_COMM_WORLD_RANK") || env_set("SLURM_PROCID");
}

}  // namespace

std::optional<int> local_workers(const JobOptions& o) {
  if (is_rank_of_a_run(o)) return std::nullopt;
  return o.workers.value_or(std::max(1, o.default_workers));
}

bool started_by_local_launcher() { return env_set(launch::kLauncherPidEnv); }

bool store_hosted_by_launcher() { return env_set(kExternalStoreEnv); }

int default_threads(int workers_on_this_machine) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, cores / std::max(1, workers_on_this_machine));
}

int local_workers_from_env() {
  for (const char* name :
       {"LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE"}) {
    if (const char* v = std::getenv(name)) {
      const int n = std::atoi(v);
      if (n > 0) return n;
    }
  }
  return 1;
}

}  // namespace gradcomp::train
