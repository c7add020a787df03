// A parameter server rank of a `gradcomp train` run: builds the same model and bucket
// layout as the workers (from the same seed, so for ps-async the same starting
// weights), joins the group, takes part in the start-up check and the resume
// agreement, then serves until the workers finish.
#pragma once

#include "gradcomp/dist/communicator.h"
#include "gradcomp/method.h"
#include "train/job_options.h"

namespace gradcomp::train {

class ServerRank {
 public:
  ServerRank(const JobOptions& options, const Method& method, dist::RendezvousConfig rendezvous);
  // The process's exit status (0); errors throw.
  int run();

 private:
  const JobOptions& options_;
  const Method& method_;
  dist::RendezvousConfig rendezvous_;
};

}  // namespace gradcomp::train
