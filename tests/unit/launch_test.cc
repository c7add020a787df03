// The local launcher, with /bin/sh workers: environment per rank, success, the first
// failure stops every other rank quickly, and no process is left behind.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gradcomp/error.h"
#include "gradcomp/launch.h"

namespace gradcomp::launch {
namespace {

namespace fs = std::filesystem;

class Launch : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("gradcomp_launch_" + std::to_string(getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  static WorkerCommand sh(const std::string& script, int rank) {
    return {{"/bin/sh", "-c", script}, {"RANK=" + std::to_string(rank), "WORLD_SIZE=3"}};
  }
  std::string read(const fs::path& p) const {
    std::ifstream f(p);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  }

  // Alive and not a zombie (an orphan's zombie lingers until init reaps it).
  bool running(pid_t pid) const {
    for (int i = 0; i < 300; ++i) {
      if (kill(pid, 0) != 0) return false;
      const std::string stat = read("/proc/" + std::to_string(pid) + "/stat");
      const auto close = stat.rfind(')');
      if (close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'Z') {
        return false;
      }
      usleep(10000);
    }
    return true;
  }

  fs::path dir_;
};

TEST_F(Launch, EveryRankGetsItsEnvironmentAndSuccessIsZero) {
  LaunchOptions o;
  o.workers = 3;
  o.command = [&](int r) {
    return sh("echo \"$RANK/$WORLD_SIZE $" + std::string(kLauncherPidEnv) + "\" > " +
                  (dir_ / ("r" + std::to_string(r))).string(),
              r);
  };
  const LaunchResult res = run_local_workers(o);
  EXPECT_EQ(res.exit_code, 0);
  EXPECT_EQ(res.failed_rank, -1);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(read(dir_ / ("r" + std::to_string(r))),
              std::to_string(r) + "/3 " + std::to_string(getpid()) + "\n");
  }
}

TEST_F(Launch, FirstFailureStopsTheOthersAndIsNamed) {
  LaunchOptions o;
  o.workers = 3;
  o.kill_grace = std::chrono::milliseconds(500);
  o.settle = std::chrono::milliseconds(300);
  o.command = [&](int r) {
    // Ranks 0 and 2 would run for a minute and record their pids; rank 1 fails.
    if (r == 1) return sh("sleep 0.2; exit 3", r);
    return sh("echo $$ > " + (dir_ / ("pid" + std::to_string(r))).string() + "; exec sleep 60", r);
  };
  const auto t0 = std::chrono::steady_clock::now();
  const LaunchResult res = run_local_workers(o);
  const auto elapsed = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(res.failed_rank, 1);
  EXPECT_EQ(res.exit_code, 3);
  EXPECT_EQ(res.message, "rank 1 exited with status 3");
  // They did not end by themselves within the settle time: named.
  EXPECT_TRUE(res.unsettled.starts_with("ranks 0, 2 were still running")) << res.unsettled;
  EXPECT_LT(elapsed, std::chrono::seconds(20)) << "the others were not stopped";
  for (int r : {0, 2}) {
    const pid_t pid = std::stoi(read(dir_ / ("pid" + std::to_string(r))));
    EXPECT_FALSE(running(pid)) << "rank " << r << " still alive";
  }
}

// The ranks' stderr, relayed: each line whole and once (an agreed error every rank
// prints), a rank's own repeats kept; the peers' "lost rank" lines held back when the rank
// that failed first said what failed, printed when it said nothing (killed).
class Relay : public Launch {
 protected:
  LaunchResult run(const std::vector<std::string>& scripts) {
    LaunchOptions o;
    o.workers = static_cast<int>(scripts.size());
    o.kill_grace = std::chrono::milliseconds(2000);
    o.settle = std::chrono::milliseconds(3000);
    o.command = [&](int r) { return sh(scripts[static_cast<std::size_t>(r)], r); };
    o.consequence = [](const std::string& line) {
      return line.find("lost rank ") != std::string::npos;
    };
    o.print_line = [this](const std::string& line) { printed.push_back(line); };
    return run_local_workers(o);
  }
  std::vector<std::string> printed;
};

TEST_F(Relay, AnAgreedErrorIsPrintedOnce) {
  const std::string agreed = "echo 'gradcomp: ranks disagree on x: rank 0 has 1, rank 1 has 2' >&2";
  const LaunchResult res = run({agreed + "; exit 1", agreed + "; exit 1", agreed + "; exit 1"});
  EXPECT_NE(res.exit_code, 0);
  EXPECT_TRUE(res.failed_rank_spoke);
  EXPECT_EQ(printed,
            std::vector<std::string>{"gradcomp: ranks disagree on x: rank 0 has 1, rank 1 has 2"});
}

TEST_F(Relay, ARanksOwnRepeatsAndPartialLinesArePrinted) {
  const LaunchResult res =
      run({"echo 'warning: a' >&2; echo 'warning: a' >&2; printf 'no newline' >&2", "true"});
  EXPECT_EQ(res.exit_code, 0);
  EXPECT_EQ(printed, (std::vector<std::string>{"warning: a", "warning: a", "no newline"}));
}

TEST_F(Relay, APeersLostRankLineIsHeldWhenTheFailedRankSaidWhy) {
  const LaunchResult res =
      run({"sleep 0.5; echo 'gradcomp: allgather: lost rank 1: reset' >&2; exit 1",
           "echo 'gradcomp: checkpoint rank-1.ckpt: bad magic' >&2; exit 1"});
  EXPECT_EQ(res.failed_rank, 1);
  EXPECT_TRUE(res.failed_rank_spoke);
  EXPECT_EQ(printed, std::vector<std::string>{"gradcomp: checkpoint rank-1.ckpt: bad magic"});
}

TEST_F(Relay, APeersLostRankLineIsPrintedWhenTheFailedRankWasKilled) {
  const LaunchResult res =
      run({"sleep 0.5; echo 'gradcomp: allgather: lost rank 1: reset' >&2; exit 1", "kill -9 $$"});
  EXPECT_EQ(res.failed_rank, 1);
  EXPECT_FALSE(res.failed_rank_spoke);
  EXPECT_EQ(printed, std::vector<std::string>{"gradcomp: allgather: lost rank 1: reset"});
}

// A process a worker left behind in a session of its own holds the worker's stderr open:
// the launcher still returns, about 2 s after the last worker exits.
TEST_F(Relay, AProcessLeftHoldingStderrDoesNotHoldTheLauncher) {
  const fs::path pid_file = dir_ / "left";
  const auto t0 = std::chrono::steady_clock::now();
  const LaunchResult res =
      run({"setsid sleep 30 & echo $! > " + pid_file.string() + "; echo 'bye' >&2"});
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  EXPECT_EQ(res.exit_code, 0);
  EXPECT_EQ(printed, std::vector<std::string>{"bye"});
  kill(std::stoi(read(pid_file)), SIGKILL);
}

TEST_F(Launch, AStoppedRankIsNamedAndKilled) {
  LaunchOptions o;
  o.workers = 3;
  o.kill_grace = std::chrono::milliseconds(200);
  o.settle = std::chrono::seconds(10);  // ends early: only a stopped rank is left
  o.command = [&](int r) {
    // Rank 1 hangs (stops itself); rank 0 gives up first, rank 2 a moment later, as
    // ranks that time out waiting for a hung peer do.
    if (r == 1) return sh("echo $$ > " + (dir_ / "stopped").string() + "; kill -STOP $$", r);
    return sh(r == 0 ? "sleep 0.3; exit 1" : "sleep 0.6; exit 1", r);
  };
  const auto t0 = std::chrono::steady_clock::now();
  const LaunchResult res = run_local_workers(o);
  EXPECT_EQ(res.failed_rank, 0);
  EXPECT_TRUE(res.unsettled.starts_with("rank 1 (stopped) was still running")) << res.unsettled;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(8));
  EXPECT_FALSE(running(std::stoi(read(dir_ / "stopped")))) << "the stopped rank outlived the run";
}

TEST_F(Launch, WorkersIgnoringSigtermAreKilled) {
  LaunchOptions o;
  o.workers = 2;
  o.kill_grace = std::chrono::milliseconds(200);
  o.settle = std::chrono::milliseconds(200);
  o.command = [&](int r) {
    if (r == 0) return sh("sleep 0.3; exit 1", r);
    // The worker ignores SIGTERM and has a child of its own, which must go too.
    return sh("trap '' TERM; sleep 30 & echo $! > " + (dir_ / "grandchild").string() + "; wait", r);
  };
  const auto t0 = std::chrono::steady_clock::now();
  const LaunchResult res = run_local_workers(o);
  EXPECT_EQ(res.failed_rank, 0);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  const pid_t grandchild = std::stoi(read(dir_ / "grandchild"));
  EXPECT_FALSE(running(grandchild)) << "the worker's child outlived the run";
}

TEST_F(Launch, SignalDeathIsReported) {
  LaunchOptions o;
  o.workers = 1;
  o.command = [&](int r) { return sh("kill -KILL $$", r); };
  const LaunchResult res = run_local_workers(o);
  EXPECT_EQ(res.failed_rank, 0);
  EXPECT_EQ(res.exit_code, 128 + SIGKILL);
  EXPECT_NE(res.message.find("killed by signal 9"), std::string::npos) << res.message;
}

TEST_F(Launch, BadOptionsAndMissingExecutables) {
  LaunchOptions o;
  o.workers = 0;
  o.command = [&](int r) { return sh("true", r); };
  EXPECT_THROW(run_local_workers(o), InvalidArgument);
  o.workers = 2;
  o.command = [&](int r) -> WorkerCommand {
    if (r == 1) return {{"/nonexistent/gradcomp-worker"}, {}};
    return sh("exec sleep 60", r);
  };
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_THROW(run_local_workers(o), Error);  // rank 0 is stopped before the throw
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
}

}  // namespace
}  // namespace gradcomp::launch
