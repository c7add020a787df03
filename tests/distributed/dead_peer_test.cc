// A killed worker: real processes (gradcomp_dist_testworker, launched with posix_spawn
// and the torchrun variables), one of which _exits mid-run. Every other rank must exit
// with CommError (exit code 3) within the timeout, never hang.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "process_support.h"

namespace {

using gradcomp::dist::test::free_port;
using gradcomp::dist::test::rank_env;
using gradcomp::dist::test::spawn_rank;
using gradcomp::dist::test::wait_until;

pid_t spawn_worker(int rank, int world, std::uint16_t port, int die_rank, int die_step) {
  return spawn_rank(GRADCOMP_DIST_TESTWORKER,
                    rank_env(rank, world, port, {"DIE_"},
                             {"GRADCOMP_TIMEOUT_MS=5000", "DIE_RANK=" + std::to_string(die_rank),
                              "DIE_STEP=" + std::to_string(die_step)}));
}

void run_group(int world, int die_rank, int die_step) {
  const std::uint16_t port = free_port();
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) pids.push_back(spawn_worker(r, world, port, die_rank, die_step));
  // Timeout 5 s (+2 s grace) per operation; 25 s bounds rendezvous and teardown too.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(25);
  for (int r = 0; r < world; ++r) {
    const int code = wait_until(pids[static_cast<std::size_t>(r)], deadline);
    if (r == die_rank) {
      EXPECT_EQ(code, 9) << "the dying rank " << r;
    } else if (die_rank < 0) {
      EXPECT_EQ(code, 0) << "rank " << r << " of a healthy group";
    } else {
      EXPECT_EQ(code, 3) << "rank " << r << " should exit with CommError (-1: hung)";
    }
  }
}

TEST(DistDeadPeer, HealthyGroupOfProcessesCompletes) { run_group(3, -1, 0); }

TEST(DistDeadPeer, KilledWorkerEndsTheOthersWithCommError) {
  run_group(3, 1, 5);  // a middle rank dies after 5 steps
}

TEST(DistDeadPeer, KilledRankZeroEndsTheOthersWithCommError) {
  run_group(3, 0, 5);  // rank 0 also serves the TCPStore
}

}  // namespace
