// `gradcomp train` as a library call: train::run(options, report) checks the options
// once, parses the compressor into the run's Method once, picks this process's role
// (role.h) and hands over to that role's object: LocalLaunch (local_launch.h),
// WorkerRank (worker_rank.h) or ServerRank (server_rank.h).
#pragma once

#include "train/job_options.h"
#include "train/report.h"

namespace gradcomp::train {

// Runs the job; returns the process exit status. Errors in this process throw
// (gradcomp::Error): a bad options value before anything starts (validate_job_options,
// job_checks.h); a failed local worker makes the launcher return non-zero after
// reporting which rank failed.
int run(const JobOptions& options, Report& report);

}  // namespace gradcomp::train
