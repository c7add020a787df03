#include "train/run.h"

#include <optional>

#include "gradcomp/launch.h"
#include "gradcomp/method.h"
#include "train/job_checks.h"
#include "train/local_launch.h"
#include "train/rank_setup.h"
#include "train/role.h"
#include "train/server_rank.h"
#include "train/worker_rank.h"

namespace gradcomp::train {

namespace {

// A rank of a run: a parameter server's server or a worker.
int run_rank(const JobOptions& o, const Method& method, Report& report) {
  launch::die_with_launcher();
  const dist::RendezvousConfig rc = dist::rendezvous_from_env(o.rendezvous);
  if (is_parameter_server(o) && ps_config(o, rc.world_size).is_server(rc.rank)) {
    return ServerRank(o, method, rc).run();
  }
  return WorkerRank(o, method, rc, report).run();
}

}  // namespace

int run(const JobOptions& options, Report& report) {
  // Here, before anything starts: the local launcher refuses a bad value with one line
  // instead of every worker printing it. Its workers pass it again, harmlessly.
  const Method method = validate_job_options(options);
  // The compressor every rank runs, with the default memory a bare biased codec gets
  // (Method::parse), so the header, the cross-rank check and the checkpoints all name
  // what runs.
  JobOptions job = options;
  job.compressor = method.spec();
  const std::optional<int> workers = local_workers(job);
  if (!workers) return run_rank(job, method, report);
  if (*workers > 1) return LocalLaunch(job, *workers, report).run();
  // One process: a world of one, whatever the environment says.
  job.rendezvous.rank = "0";
  job.rendezvous.world_size = "1";
  return run_rank(job, method, report);
}

}  // namespace gradcomp::train
