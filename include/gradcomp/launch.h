// Starting a run's local worker processes: what `gradcomp train --workers N` does when
// no rendezvous is given. The launcher starts every rank as a child process, lets rank
// 0 print (the others' stdout is discarded; every rank's stderr is relayed, line by
// line, see LaunchOptions::consequence), waits, and, as soon as one rank fails, stops
// the others (SIGTERM, then SIGKILL after a grace period) so that no process is left
// behind. Its exit status is non-zero when any rank failed, with a message naming the
// first one.
//
// Torch-free: the caller decides each rank's argv and environment (RANK, WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT ...).
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace gradcomp::launch {

struct WorkerCommand {
  std::vector<std::string> argv;  // argv[0]: the executable (a path, or found on PATH)
  std::vector<std::string> env;   // "KEY=VALUE" entries added to the launcher's environment
};

struct LaunchOptions {
  int workers = 1;
  std::function<WorkerCommand(int rank)> command;
  // After the first failure, how long the other ranks get to end by themselves (a dead
  // peer or a timeout ends them all alike) before they are stopped. Ranks still running
  // then are named in the message: they are what the others were waiting for (a hung or
  // stopped rank). The wait ends early once every rank left is stopped (SIGSTOP).
  std::chrono::milliseconds settle{2000};
  // Then how long they get to exit on SIGTERM.
  std::chrono::milliseconds kill_grace{3000};
  bool quiet_other_ranks = true;  // discard stdout of ranks > 0
  // Every rank's stderr is relayed whole lines at a time, each line once: a line that
  // another rank printed already is not printed again (an error the ranks agreed on,
  // which every rank prints). Lines `consequence` matches (a rank saying it lost a peer)
  // are held back, and printed at the end only when the rank that failed first printed
  // no other line (it was killed, say): otherwise they repeat its failure from the
  // peers' side. None: every line is printed as it comes.
  std::function<bool(const std::string& line)> consequence;
  // Where relayed lines go (each without its newline); default: the launcher's stderr.
  std::function<void(const std::string& line)> print_line;
};

struct LaunchResult {
  int exit_code = 0;     // 0 when every rank exited 0
  int failed_rank = -1;  // the first rank that failed, or -1
  std::string message;   // e.g. "rank 2 exited with status 1"; empty on success
  // The ranks still running when the others had settled (LaunchOptions::settle), e.g.
  // "rank 2 (stopped) was still running" or "ranks 0, 2 were still running 2.0 s later"; empty when
  // there were none.
  std::string unsettled;
  // Whether the first failed rank printed a line of its own (not a consequence): its
  // error, which then says more than `message`.
  bool failed_rank_spoke = false;
};

// Starts the workers and waits for all of them. SIGINT/SIGTERM sent to the launcher
// are forwarded to every worker. Throws InvalidArgument for bad options and Error
// when a process cannot be started (after stopping the ones already started).
LaunchResult run_local_workers(const LaunchOptions& options);

// Environment variable the launcher sets in each worker to its own pid.
inline constexpr const char* kLauncherPidEnv = "GRADCOMP_LAUNCHER_PID";

// Call early in a worker: when started by run_local_workers, arrange to receive
// SIGTERM if the launcher dies (Linux PR_SET_PDEATHSIG), and exit at once if it is
// already gone. Does nothing in processes started otherwise.
void die_with_launcher();

}  // namespace gradcomp::launch
