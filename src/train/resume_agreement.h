// --resume with several ranks: which checkpoint this rank loads so that every
// synchronous worker starts from the same step.
#pragma once

#include <filesystem>

#include "gradcomp/dist/communicator.h"
#include "train/job_options.h"

namespace gradcomp::train {

// Each worker keeps its last two checkpoints (rank-R.ckpt and rank-R.ckpt.prev), so a
// run killed while some ranks had written an epoch's checkpoint and others had not
// resumes from the newest step every worker holds. A collective of the whole group:
// parameter servers take part with nothing (they find their own state by the step the
// workers push). ps-async workers each resume from their own newest checkpoint.
// Returns the file this rank loads; empty when no worker has a checkpoint (or for a
// server). InvalidArgument, on every rank, when the workers share no step.
std::filesystem::path agree_resume_file(dist::Communicator& comm, const JobOptions& o, int workers);

}  // namespace gradcomp::train
