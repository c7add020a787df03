// The ranks' configuration check at start-up (see gradcomp/config_agreement.h for what
// is compared and how it is reported).
#pragma once

#include "gradcomp/config_agreement.h"
#include "gradcomp/dist/communicator.h"

namespace gradcomp::dist {

// Exchanges `mine` with every rank of `comm` (one allgather_bytes, whose size exchange
// tolerates lists of any length) and throws InvalidArgument with the one-line
// disagreement, on every rank alike, if any rank's fields differ from rank 0's.
// Call it before any other collective: mismatched ranks would fail inside that one.
// Every rank takes part (parameter servers too).
void check_ranks_agree(Communicator& comm, const ConfigFields& mine);

}  // namespace gradcomp::dist
