// The local launcher of a `gradcomp train` run (--workers N on one machine, no
// rendezvous): hosts the run's store on a free port, starts N worker ranks of this same
// program (and, with a parameter server topology, --servers server ranks beside them),
// and waits; a failed rank ends the others and is named in one line.
#pragma once

#include "train/job_options.h"
#include "train/report.h"

namespace gradcomp::train {

class LocalLaunch {
 public:
  LocalLaunch(const JobOptions& options, int workers, Report& report);
  // 0 when every rank succeeded, else the failed rank's exit status.
  int run();

 private:
  const JobOptions& options_;
  int workers_;
  Report& report_;
};

}  // namespace gradcomp::train
