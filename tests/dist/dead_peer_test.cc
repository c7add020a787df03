// A killed or stopped worker: real processes (gradcomp_dist_testworker, launched with
// posix_spawn and the torchrun variables), one of which _exits (or stops itself) mid-run.
// Every other rank must exit with CommError (exit code 3) within the timeout, never hang,
// and its error line must name the rank it lost -- or, when a rank only went silent,
// name none rather than a wrong one.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "process_support.h"

namespace {

using gradcomp::dist::test::free_port;
using gradcomp::dist::test::rank_env;
using gradcomp::dist::test::RankGroup;
using gradcomp::dist::test::slurp;
using gradcomp::dist::test::wait_until;

enum class Fault { kExit, kStop };

struct Group : RankGroup {
  Group() : RankGroup("gradcomp-dead-peer") {}
};

// `world` ranks; rank `die_rank` (-1: none) exits or stops before step `die_step`.
void spawn_group(Group& g, int world, int die_rank, int die_step, Fault fault) {
  const std::uint16_t port = free_port();
  for (int r = 0; r < world; ++r) {
    g.spawn(GRADCOMP_DIST_TESTWORKER, r,
            rank_env(r, world, port, {"DIE_"},
                     {"GRADCOMP_TIMEOUT_MS=5000", "DIE_RANK=" + std::to_string(die_rank),
                      "DIE_STEP=" + std::to_string(die_step),
                      std::string("DIE_HOW=") + (fault == Fault::kStop ? "stop" : "exit")}));
  }
}

// Exit codes of the ranks; a stopped rank is killed once the others are done (-1).
std::vector<int> wait_group(const Group& g, int stopped_rank) {
  // Timeout 5 s (+2 s grace) per operation; 25 s bounds rendezvous and teardown too.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(25);
  std::vector<int> codes(g.pids.size(), -1);
  for (std::size_t r = 0; r < g.pids.size(); ++r) {
    if (static_cast<int>(r) != stopped_rank) codes[r] = wait_until(g.pids[r], deadline);
  }
  if (stopped_rank >= 0) {
    wait_until(g.pids[static_cast<std::size_t>(stopped_rank)], std::chrono::steady_clock::now());
  }
  return codes;
}

void run_group(int world, int die_rank, int die_step) {
  Group g;
  spawn_group(g, world, die_rank, die_step, Fault::kExit);
  const std::vector<int> codes = wait_group(g, -1);
  int named_the_dead = 0;
  for (int r = 0; r < world; ++r) {
    const int code = codes[static_cast<std::size_t>(r)];
    const std::string log = slurp(g.logs[static_cast<std::size_t>(r)]);
    if (r == die_rank) {
      EXPECT_EQ(code, 9) << "the dying rank " << r;
    } else if (die_rank < 0) {
      EXPECT_EQ(code, 0) << "rank " << r << " of a healthy group: " << log;
    } else {
      EXPECT_EQ(code, 3) << "rank " << r << " should exit with CommError (-1: hung): " << log;
      // Each survivor's own line names a lost rank, by rank: the one that died or -- when
      // this survivor was waiting on another survivor that failed first and exited (a
      // ring sends right and receives left) -- that one, which is gone too.
      const auto at = log.find("lost rank ");
      ASSERT_NE(at, std::string::npos) << "rank " << r << ": " << log;
      const int lost = std::atoi(log.c_str() + at + 10);
      ASSERT_TRUE(lost >= 0 && lost < world && lost != r) << log;
      EXPECT_TRUE(lost == die_rank || codes[static_cast<std::size_t>(lost)] == 3) << log;
      named_the_dead += lost == die_rank ? 1 : 0;
      EXPECT_NE(log.find("(on rank " + std::to_string(r) + " of " + std::to_string(world) + ")"),
                std::string::npos)
          << log;
    }
  }
  if (die_rank >= 0) {
    EXPECT_GE(named_the_dead, 1) << "no survivor named rank " << die_rank;
  }
}

TEST(DistDeadPeer, HealthyGroupOfProcessesCompletes) { run_group(3, -1, 0); }

TEST(DistDeadPeer, KilledWorkerEndsTheOthersWithCommError) {
  run_group(3, 1, 5);  // a middle rank dies after 5 steps
}

TEST(DistDeadPeer, KilledRankZeroEndsTheOthersWithCommError) {
  run_group(3, 0, 5);  // rank 0 also serves the TCPStore
}

TEST(DistDeadPeer, KilledLastRankIsNamedToo) {
  run_group(3, 2, 5);  // the others connect to it as their highest peer
}

// A stopped rank keeps its connections open: the others time out, and no message may
// name it as lost (Gloo's timeout names no peer). The first rank to time out says so;
// a rank that times out later may instead see that first one exit, and name it.
TEST(DistDeadPeer, StoppedWorkerTimesOutNamingNoWrongRank) {
  constexpr int kWorld = 3;
  constexpr int kStopped = 1;
  Group g;
  spawn_group(g, kWorld, kStopped, 5, Fault::kStop);
  const std::vector<int> codes = wait_group(g, kStopped);
  int unnamed = 0;
  for (int r = 0; r < kWorld; ++r) {
    if (r == kStopped) continue;
    const std::string log = slurp(g.logs[static_cast<std::size_t>(r)]);
    EXPECT_EQ(codes[static_cast<std::size_t>(r)], 3) << "rank " << r << ": " << log;
    EXPECT_EQ(log.find("lost rank " + std::to_string(kStopped)), std::string::npos) << log;
    if (log.find("no rank named") != std::string::npos) {
      ++unnamed;
    } else {
      EXPECT_NE(log.find("lost rank "), std::string::npos) << "rank " << r << ": " << log;
    }
  }
  EXPECT_GE(unnamed, 1);
}

}  // namespace
