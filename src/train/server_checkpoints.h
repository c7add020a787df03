// A parameter server's own checkpoints (dist::PsServerCheckpoints) in the trainer's file
// format: DIR/server-<index>.step-<n>.ckpt, the two newest kept. Two, because a sync
// server writes an epoch's state just before the workers write theirs: a run killed
// between the two resumes the workers at the previous epoch, which the server still has.
#pragma once

#include <filesystem>

#include "gradcomp/dist/ps.h"
#include "train/checkpoint.h"

namespace gradcomp::train {

// `identity` (seed, rank, world) is written into every file and checked on load; with
// resume false, load is left empty (a fresh start).
dist::PsServerCheckpoints server_checkpoints(const std::filesystem::path& dir, int server_index,
                                             const CheckpointMeta& identity, bool resume);

}  // namespace gradcomp::train
