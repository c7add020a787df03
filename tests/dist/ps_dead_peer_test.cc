// Parameter-server faults with real processes (gradcomp_ps_testworker, torchrun
// variables): a server or a worker killed mid-run ends every other rank with CommError
// (exit code 3) within the timeout, and each message names a rank with its role.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace {

std::uint16_t free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

struct Group {
  std::vector<pid_t> pids;
  std::vector<std::string> logs;
};

Group spawn_group(int workers, int servers, const std::string& topology, long steps) {
  const std::uint16_t port = free_port();
  const int world = workers + servers;
  Group g;
  char tmpl[] = "/tmp/gradcomp-ps-dead.XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);
  for (int r = 0; r < world; ++r) {
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string s = *e;
      if (s.starts_with("RANK=") || s.starts_with("WORLD_SIZE=") || s.starts_with("OMPI_") ||
          s.starts_with("SLURM_") || s.starts_with("MASTER_") || s.starts_with("GLOO_") ||
          s.starts_with("PS_")) {
        continue;
      }
      env.push_back(s);
    }
    env.push_back("RANK=" + std::to_string(r));
    env.push_back("WORLD_SIZE=" + std::to_string(world));
    env.push_back("MASTER_ADDR=127.0.0.1");
    env.push_back("MASTER_PORT=" + std::to_string(port));
    env.push_back("GRADCOMP_TIMEOUT_MS=8000");
    env.push_back("PS_SERVERS=" + std::to_string(servers));
    env.push_back("PS_TOPOLOGY=" + topology);
    env.push_back("PS_STEPS=" + std::to_string(steps));
    std::vector<char*> envp;
    for (auto& s : env) envp.push_back(s.data());
    envp.push_back(nullptr);
    const std::string log = dir + "/rank-" + std::to_string(r) + ".err";
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
    std::string path = GRADCOMP_PS_TESTWORKER;
    char* argv[] = {path.data(), nullptr};
    pid_t pid = 0;
    EXPECT_EQ(posix_spawn(&pid, path.c_str(), &fa, nullptr, argv, envp.data()), 0);
    posix_spawn_file_actions_destroy(&fa);
    g.pids.push_back(pid);
    g.logs.push_back(log);
  }
  return g;
}

int wait_until(pid_t pid, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    int status = 0;
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::string slurp(const std::string& file) {
  std::ifstream in(file);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Kills `victim` once the group has run for a while; every other rank must end with
// CommError and name `named` (e.g. "server 0 (rank 3)") in its message.
void kill_and_check(int workers, int servers, const std::string& topology, int victim,
                    const std::vector<std::string>& must_name) {
  Group g = spawn_group(workers, servers, topology, 1'000'000'000L);
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
    Group g = spawn_group(3, 2, topo, 30);
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
