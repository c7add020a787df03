// Parameter-server faults with real processes (gradcomp_ps_testworker, torchrun
// variables): a server or a worker killed mid-run ends every other rank with CommError
// (exit code 3) within the timeout, and each message names a rank with its role.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "process_support.h"

namespace {

using gradcomp::dist::test::free_port;
using gradcomp::dist::test::rank_env;
using gradcomp::dist::test::RankGroup;
using gradcomp::dist::test::slurp;
using gradcomp::dist::test::wait_until;

struct Group : RankGroup {
  Group() : RankGroup("gradcomp-ps-dead") {}
};

// `workers` + `servers` ranks of gradcomp_ps_testworker running `steps` steps.
void spawn_group(Group& g, int workers, int servers, const std::string& topology, long steps) {
  const std::uint16_t port = free_port();
  const int world = workers + servers;
  for (int r = 0; r < world; ++r) {
    g.spawn(GRADCOMP_PS_TESTWORKER, r,
            rank_env(r, world, port, {"PS_"},
                     {"GRADCOMP_TIMEOUT_MS=8000", "PS_SERVERS=" + std::to_string(servers),
                      "PS_TOPOLOGY=" + topology, "PS_STEPS=" + std::to_string(steps)}));
  }
}

// Kills `victim` once the group has run for a while; every other rank must end with
// CommError and name `named` (e.g. "server 0 (rank 3)") in its message.
void kill_and_check(int workers, int servers, const std::string& topology, int victim,
                    const std::vector<std::string>& must_name) {
  Group g;
  spawn_group(g, workers, servers, topology, 1'000'000'000L);
  // Kill only once every worker has run a few steps (start-up is slow on a busy machine).
  const auto started = std::chrono::steady_clock::now() + std::chrono::seconds(90);
  for (int w = 0; w < workers; ++w) {
    while (slurp(g.logs[static_cast<std::size_t>(w)]).find("running") == std::string::npos &&
           std::chrono::steady_clock::now() < started) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  ::kill(g.pids[static_cast<std::size_t>(victim)], SIGKILL);
  // Timeout 8 s per operation; a second hop (a server that waited for the dead worker,
  // then the workers that waited for that server) doubles it.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(40);
  for (std::size_t r = 0; r < g.pids.size(); ++r) {
    const int code = wait_until(g.pids[r], deadline);
    if (static_cast<int>(r) == victim) {
      EXPECT_EQ(code, 128 + SIGKILL);
      continue;
    }
    const std::string log = slurp(g.logs[r]);
    EXPECT_EQ(code, 3) << "rank " << r << " (-1: hung): " << log;
    EXPECT_EQ(log.find("rendezvous"), std::string::npos) << "killed too early: " << log;
    EXPECT_NE(log.find("ps "), std::string::npos) << "rank " << r << ": " << log;
    bool named = false;
    for (const auto& n : must_name) named = named || log.find(n) != std::string::npos;
    EXPECT_TRUE(named) << "rank " << r << ": " << log;
  }
}

TEST(PsDeadPeer, HealthyGroupCompletes) {
  for (const std::string topo : {"sync", "async"}) {
    Group g;
    spawn_group(g, 3, 2, topo, 30);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(90);
    for (std::size_t r = 0; r < g.pids.size(); ++r) {
      EXPECT_EQ(wait_until(g.pids[r], deadline), 0)
          << topo << " rank " << r << ": " << slurp(g.logs[r]);
    }
  }
}

TEST(PsDeadPeer, KilledServerEndsEveryRankNamingIt) {
  // 3 workers (ranks 0-2), servers 0 and 1 (ranks 3, 4); server 0 dies. The workers
  // name it; server 1 names the worker that stopped talking to it.
  kill_and_check(3, 2, "sync", 3, {"server 0 (rank 3)", "worker"});
}

TEST(PsDeadPeer, KilledServerEndsAsyncRanks) {
  kill_and_check(3, 1, "async", 3, {"server 0 (rank 3)"});
}

TEST(PsDeadPeer, KilledWorkerEndsEveryRankNamingARole) {
  kill_and_check(3, 1, "sync", 1, {"worker 1 (rank 1)", "server 0 (rank 3)"});
}

}  // namespace
