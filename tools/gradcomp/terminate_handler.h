// What happens when an exception escapes a thread: the C++ runtime calls
// std::terminate, whose default prints "terminate called after throwing an instance
// of ..." and aborts (SIGABRT, possibly a core dump). Every thread gradcomp owns catches
// its errors and the main thread reports them (main.cc), but threads it does not own
// can still throw: Gloo's TCP transport loop (issue #15: "[enforce fail at
// .../pair.cc] op.preamble.length <= op.nbytes" when ranks exchanged tensors of
// different sizes), c10d's work threads, OpenMP workers. The handler installed here
// turns those into the CLI's usual failure: one "gradcomp: ..." line on stderr and exit
// status 1, without running destructors that the other threads may still be using.
#pragma once

namespace gradcomp::cli {

// Installs the handler (std::set_terminate); call once at the start of main().
void install_terminate_handler();

}  // namespace gradcomp::cli
