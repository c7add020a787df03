// Ranks as real processes for the dead-peer tests: spawned with posix_spawn and the
// torchrun variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), waited for with a
// deadline, their stderr collected in a temporary directory that is removed afterwards.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace gradcomp::dist::test {

// A port the kernel considers free right now (bind to 0, read it back, close).
inline std::uint16_t free_port() {
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

// This process's environment without any launcher's variables (the test runner may
// itself run under Slurm or mpirun) or the test workers' own knobs (`drop` prefixes),
// then the rendezvous of rank `rank` of `world` on 127.0.0.1:port and `extra`.
inline std::vector<std::string> rank_env(int rank, int world, std::uint16_t port,
                                         const std::vector<std::string>& drop,
                                         const std::vector<std::string>& extra) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string s = *e;
    bool keep =
        !(s.starts_with("RANK=") || s.starts_with("WORLD_SIZE=") || s.starts_with("OMPI_") ||
          s.starts_with("SLURM_") || s.starts_with("MASTER_") || s.starts_with("GLOO_"));
    for (const std::string& d : drop) keep = keep && !s.starts_with(d);
    if (keep) env.push_back(s);
  }
  env.push_back("RANK=" + std::to_string(rank));
  env.push_back("WORLD_SIZE=" + std::to_string(world));
  env.push_back("MASTER_ADDR=127.0.0.1");
  env.push_back("MASTER_PORT=" + std::to_string(port));
  env.insert(env.end(), extra.begin(), extra.end());
  return env;
}

// Starts `path` with `env`; its stderr goes to `stderr_file` unless that is empty.
inline pid_t spawn_rank(const std::string& path, std::vector<std::string> env,
                        const std::string& stderr_file = "") {
  std::vector<char*> envp;
  for (std::string& s : env) envp.push_back(s.data());
  envp.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (!stderr_file.empty()) {
    posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, stderr_file.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
  }
  std::string program = path;
  char* argv[] = {program.data(), nullptr};
  pid_t pid = 0;
  EXPECT_EQ(posix_spawn(&pid, program.c_str(), &fa, nullptr, argv, envp.data()), 0) << path;
  posix_spawn_file_actions_destroy(&fa);
  return pid;
}

// Exit status of pid (128 + signal when killed), or -1 if it is still running at the
// deadline (then it is killed).
inline int wait_until(pid_t pid, std::chrono::steady_clock::time_point deadline) {
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

inline std::string slurp(const std::filesystem::path& file) {
  std::ifstream in(file);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A temporary directory for the ranks' logs, removed with everything in it.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix) {
    std::string tmpl = (std::filesystem::temp_directory_path() / (prefix + ".XXXXXX")).string();
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp " + tmpl);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// The ranks of one test's group: their pids and stderr logs, in a temporary directory
// removed with the group.
struct RankGroup {
  explicit RankGroup(const std::string& prefix) : dir(prefix) {}
  TempDir dir;
  std::vector<pid_t> pids;
  std::vector<std::string> logs;

  // Starts `path` as rank `rank` with `env`, its stderr to <dir>/rank-<rank>.err.
  void spawn(const std::string& path, int rank, std::vector<std::string> env) {
    const std::string log = (dir.path() / ("rank-" + std::to_string(rank) + ".err")).string();
    pids.push_back(spawn_rank(path, std::move(env), log));
    logs.push_back(log);
  }
};

}  // namespace gradcomp::dist::test
