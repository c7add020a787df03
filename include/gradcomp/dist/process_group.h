// gradcomp over a c10d process group that someone else created: the default group of a
// PyTorch script (torch.distributed.init_process_group), or a LibTorch program's own
// ProcessGroupGloo. This is the one public gradcomp header that includes c10d; the rest
// of gradcomp_dist stays torch-free behind Communicator.
#pragma once

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <chrono>

#include "gradcomp/dist/communicator.h"

namespace gradcomp::dist {

// A Communicator issuing its collectives on `group` (which it shares ownership of).
// Every operation waits at most `timeout` (plus a short grace for the group's own
// timeout to fire first); the group's own timeout is the one it was created with.
// The group must not run other collectives while gradcomp's are in flight: gradcomp
// issues its own in a fixed order, and interleaving foreign ones from another thread
// would break that order across ranks. Building it is collective: it runs one small
// allgather on the group (the addresses that name a lost peer by rank; communicator.h),
// so every rank calls it at the same point. Throws InvalidArgument on a null group or a
// non-positive timeout.
Communicator communicator_over(c10::intrusive_ptr<c10d::ProcessGroup> group,
                               std::chrono::milliseconds timeout);

}  // namespace gradcomp::dist
