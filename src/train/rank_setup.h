// What a worker rank and a server rank both do to join a run: connect to the group, and
// read the parameter server's shape from the options.
#pragma once

#include "gradcomp/dist/communicator.h"
#include "gradcomp/dist/ps.h"
#include "train/job_options.h"

namespace gradcomp::train {

// The group of this run: through the store the local launcher hosts when it started
// this rank, else through rank 0's (dist::Communicator::connect).
dist::Communicator connect_rank(const dist::RendezvousConfig& rc);

// The parameter server of a world of `world` ranks, the last o.servers of them servers;
// InvalidArgument when that leaves no worker.
dist::PsConfig ps_config(const JobOptions& o, int world);

}  // namespace gradcomp::train
