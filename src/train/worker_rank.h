// A worker rank of a `gradcomp train` run (or the single process of a world of one):
// loads its shard, joins the group, runs the start-up check and the resume agreement,
// trains through gradcomp's GradientExchange (allreduce topology) or a parameter-server
// worker, and on rank 0 reports the run.
#pragma once

#include <optional>

#include "gradcomp/dist/communicator.h"
#include "gradcomp/dist/ps.h"
#include "gradcomp/method.h"
#include "train/job_options.h"
#include "train/report.h"

namespace gradcomp::train {

class WorkerRank {
 public:
  // `report` is the run's report; ranks other than 0 train with a silent one.
  WorkerRank(const JobOptions& options, const Method& method, dist::RendezvousConfig rendezvous,
             Report& report);
  // The process's exit status (0); errors throw.
  int run();

 private:
  // The trainer's configuration on this rank: rank, world, threads, where it reports.
  TrainConfig trainer_config();

  const JobOptions& options_;
  const Method& method_;
  dist::RendezvousConfig rendezvous_;
  Report& report_;
  Report silent_;
  std::optional<dist::PsConfig> ps_;  // set with a parameter server topology
  int workers_ = 1;
};

}  // namespace gradcomp::train
