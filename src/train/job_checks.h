// The checks of a `gradcomp train` options value: every flag's range and the flag
// combinations a job cannot run, decided from the options alone (no data loaded, no
// model built, no peer contacted). train::run calls validate_job_options once, at the top:
// the local launcher then refuses a bad value with one line before it starts any
// worker, instead of every worker printing the same error. Its workers repeat the check
// (they were started with the launcher's own flags, so it passes); the trainer's own
// checks stay behind it for library callers.
#pragma once

#include "gradcomp/method.h"
#include "train/job_options.h"

namespace gradcomp::train {

// Throws InvalidArgument with one line naming the flag, the bad value and what is
// allowed, e.g. "--epochs: -1 is not an integer >= 1". Returns the job's --compressor
// parsed for its reducer, topology, downlink and optimizer (gradcomp/method.h): what
// every rank runs.
Method validate_job_options(const JobOptions& o);

}  // namespace gradcomp::train
