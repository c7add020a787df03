// A killed worker: real processes (gradcomp_dist_testworker, launched with posix_spawn
// and the torchrun variables), one of which _exits mid-run. Every other rank must exit
// with CommError (exit code 3) within the timeout, never hang.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace {

// A port the kernel considers free right now (bind to 0, read it back, close).
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

pid_t spawn_worker(int rank, int world, std::uint16_t port, int die_rank, int die_step) {
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string s = *e;
    // Drop any launcher variables the test runner itself may have (Slurm CI, mpirun).
    if (s.starts_with("RANK=") || s.starts_with("WORLD_SIZE=") || s.starts_with("OMPI_") ||
        s.starts_with("SLURM_") || s.starts_with("MASTER_") || s.starts_with("GLOO_")) {
      continue;
    }
    env_strings.push_back(s);
  }
  env_strings.push_back("RANK=" + std::to_string(rank));
  env_strings.push_back("WORLD_SIZE=" + std::to_string(world));
  env_strings.push_back("MASTER_ADDR=127.0.0.1");
  env_strings.push_back("MASTER_PORT=" + std::to_string(port));
  env_strings.push_back("GRADCOMP_TIMEOUT_MS=5000");
  env_strings.push_back("DIE_RANK=" + std::to_string(die_rank));
  env_strings.push_back("DIE_STEP=" + std::to_string(die_step));
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string path = GRADCOMP_DIST_TESTWORKER;
  char* argv[] = {path.data(), nullptr};
  pid_t pid = 0;
  EXPECT_EQ(posix_spawn(&pid, path.c_str(), nullptr, nullptr, argv, envp.data()), 0);
  return pid;
}

// Exit status of pid, or -1 if it is still running at the deadline (then killed).
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
