// Which role this process plays in a `gradcomp train` run, decided from the options and
// the environment: the local launcher (--workers N, or the default, with no rendezvous:
// it starts N ranks of this same program), a single process (a world of one), or a rank
// of a run started elsewhere (rendezvous flags; torchrun / mpirun / Slurm variables; the
// local launcher's own). A rank is then a worker or, with a parameter server topology,
// a server (dist::PsConfig::is_server).
#pragma once

#include <optional>

#include "train/job_options.h"

namespace gradcomp::train {

// Set by the local launcher: every rank, rank 0 included, joins the TCPStore the
// launcher hosts (on an ephemeral port it picked race-free) as a client.
inline constexpr const char* kExternalStoreEnv = "GRADCOMP_EXTERNAL_STORE";

// The workers this process runs itself: --workers, else the default, when it is the
// local launcher or a single process; nullopt when it is a rank of a run started
// elsewhere.
std::optional<int> local_workers(const JobOptions& options);

// True in a rank the local launcher started.
bool started_by_local_launcher();

// True when the launcher hosts the run's store (kExternalStoreEnv).
bool store_hosted_by_launcher();

// Threads per worker when --threads is not given: the cores of this machine shared by
// its workers (the launcher's count, or torchrun's / mpirun's / Slurm's local size).
int default_threads(int workers_on_this_machine);
int local_workers_from_env();

}  // namespace gradcomp::train
