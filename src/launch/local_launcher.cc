// Local worker processes (see include/gradcomp/launch.h). posix_spawn, not fork: the
// launcher may hold threads (LibTorch's pools, a TCPStore server), and fork() in a
// threaded process may only call async-signal-safe functions before exec.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "gradcomp/error.h"
#include "gradcomp/launch.h"

extern char** environ;

namespace gradcomp::launch {

namespace {

volatile sig_atomic_t g_forward_signal = 0;

void remember_signal(int sig) { g_forward_signal = sig; }

// Installs the forwarding handlers for the launcher's lifetime, restores them after.
class SignalForwarding {
 public:
  SignalForwarding() {
    g_forward_signal = 0;
    struct sigaction sa {};
    sa.sa_handler = remember_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;  // no SA_RESTART: waitpid returns EINTR so the signal is forwarded
    sigaction(SIGINT, &sa, &old_int_);
    sigaction(SIGTERM, &sa, &old_term_);
  }
  ~SignalForwarding() {
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
  }
  SignalForwarding(const SignalForwarding&) = delete;
  SignalForwarding& operator=(const SignalForwarding&) = delete;

 private:
  struct sigaction old_int_ {};
  struct sigaction old_term_ {};
};

// The launcher's environment with `extra` entries added or replacing same-named ones.
std::vector<std::string> merged_environment(const std::vector<std::string>& extra) {
  std::vector<std::string> env;
  auto key_of = [](const std::string& kv) { return kv.substr(0, kv.find('=')); };
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv(*e);
    bool replaced = false;
    for (const auto& x : extra) replaced = replaced || key_of(x) == key_of(kv);
    if (!replaced) env.push_back(kv);
  }
  env.insert(env.end(), extra.begin(), extra.end());
  return env;
}

std::vector<char*> c_strings(std::vector<std::string>& v) {
  std::vector<char*> out;
  for (auto& s : v) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return std::string("was killed by signal ") + std::to_string(WTERMSIG(status)) + " (" +
           strsignal(WTERMSIG(status)) + ")";
  }
  return "ended with wait status " + std::to_string(status);
}

struct Child {
  pid_t pid = -1;
  bool running = false;
  int stderr_fd = -1;  // the read end of the pipe its stderr goes into (the relay's)
};

// The ranks' stderr, relayed (LaunchOptions::consequence): one thread polls every
// rank's pipe, prints each whole line once, and holds back the consequences.
class StderrRelay {
 public:
  StderrRelay(const LaunchOptions& options, std::size_t ranks)
      : consequence_(options.consequence),
        print_(options.print_line ? options.print_line : print_to_stderr),
        partial_(ranks),
        spoke_(ranks, false) {}

  // Reads every fd until all are at end of file (their processes and any children of
  // theirs have exited), or until 2 s after workers_gone(): a process a worker left
  // behind (outside its process group, which stop_the_rest kills) may hold a pipe open.
  void run(const std::vector<int>& fds) {
    std::vector<pollfd> polled;
    std::vector<std::size_t> rank_of_poll;
    for (std::size_t r = 0; r < fds.size(); ++r) {
      if (fds[r] < 0) continue;
      polled.push_back({fds[r], POLLIN, 0});
      rank_of_poll.push_back(r);
    }
    std::size_t open = polled.size();
    char buf[4096];
    std::optional<std::chrono::steady_clock::time_point> deadline;
    while (open > 0) {
      if (!deadline && gone_.load()) deadline = std::chrono::steady_clock::now() + kLinger;
      if (deadline && std::chrono::steady_clock::now() >= *deadline) break;
      const int ready = ::poll(polled.data(), polled.size(), 100);
      if (ready < 0 && errno != EINTR) break;
      if (ready <= 0) continue;
      for (std::size_t i = 0; i < polled.size(); ++i) {
        if (polled[i].fd < 0 || polled[i].revents == 0) continue;
        const ssize_t n = ::read(polled[i].fd, buf, sizeof buf);
        if (n > 0) {
          take(rank_of_poll[i], std::string_view(buf, static_cast<std::size_t>(n)));
          continue;
        }
        if (n < 0 && errno == EINTR) continue;
        const std::size_t r = rank_of_poll[i];
        if (!partial_[r].empty()) line(r, std::exchange(partial_[r], {}));  // no final newline
        polled[i].fd = -1;  // poll ignores negative fds
        --open;
      }
    }
    for (std::size_t r = 0; r < partial_.size(); ++r) {
      if (!partial_[r].empty()) line(r, std::exchange(partial_[r], {}));
    }
  }

  // Every worker has been reaped: run() ends once the pipes are drained.
  void workers_gone() { gone_.store(true); }

  // After run(): the held lines, printed when `failed` (the first failed rank, or -1)
  // printed no line of its own; whether it did.
  bool finish(int failed) {
    const bool spoke = failed >= 0 && spoke_[static_cast<std::size_t>(failed)];
    if (!spoke) {
      for (auto& [rank, text] : held_) print_once(rank, text);
    }
    return spoke;
  }

 private:
  static void print_to_stderr(const std::string& text) {
    const std::string out = text + "\n";
    std::fwrite(out.data(), 1, out.size(), stderr);
    std::fflush(stderr);
  }

  void take(std::size_t rank, std::string_view bytes) {
    std::string& pending = partial_[rank];
    pending.append(bytes);
    std::size_t start = 0;
    for (std::size_t nl = pending.find('\n'); nl != std::string::npos;
         nl = pending.find('\n', start)) {
      line(rank, pending.substr(start, nl - start));
      start = nl + 1;
    }
    pending.erase(0, start);
  }

  void line(std::size_t rank, std::string text) {
    if (consequence_ && consequence_(text)) {
      held_.emplace_back(rank, std::move(text));
      return;
    }
    spoke_[rank] = true;
    print_once(rank, text);
  }

  // Printed unless another rank printed the same line first (a rank repeating itself is
  // printed again: a warning each epoch).
  void print_once(std::size_t rank, const std::string& text) {
    if (!consequence_) {
      print_(text);
      return;
    }
    const auto [it, first] = first_printer_.emplace(text, rank);
    if (first || it->second == rank) print_(text);
  }

  static constexpr std::chrono::seconds kLinger{2};

  std::atomic<bool> gone_{false};
  std::function<bool(const std::string&)> consequence_;
  std::function<void(const std::string&)> print_;
  std::vector<std::string> partial_;
  std::vector<bool> spoke_;
  std::vector<std::pair<std::size_t, std::string>> held_;
  std::map<std::string, std::size_t> first_printer_;
};

// Each worker leads its own process group, so a signal reaches whatever the worker
// started too (a shell's children, helper processes): nothing is left behind.
void signal_running(std::vector<Child>& children, int sig) {
  for (const auto& c : children) {
    if (c.running) kill(-c.pid, sig);
  }
}

int rank_of(const std::vector<Child>& children, pid_t pid) {
  for (std::size_t r = 0; r < children.size(); ++r) {
    if (children[r].pid == pid) return static_cast<int>(r);
  }
  return -1;
}

bool any_running(const std::vector<Child>& children) {
  for (const auto& c : children) {
    if (c.running) return true;
  }
  return false;
}

// Reaps what has exited (blocking when `block`); returns false when nothing was reaped.
bool reap_one(std::vector<Child>& children, bool block, int* rank, int* status) {
  for (;;) {
    const pid_t pid = waitpid(-1, status, block ? 0 : WNOHANG);
    if (pid > 0) {
      *rank = rank_of(children, pid);
      if (*rank < 0) continue;  // not one of ours
      children[static_cast<std::size_t>(*rank)].running = false;
      return true;
    }
    if (pid == 0) return false;
    if (errno == EINTR) {
      if (g_forward_signal != 0) {
        signal_running(children, g_forward_signal);
        g_forward_signal = 0;
      }
      if (!block) return false;
      continue;
    }
    return false;  // ECHILD: nothing left
  }
}

// True when the process is stopped (SIGSTOP, a debugger): state T or t in /proc.
bool is_stopped(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  std::getline(in, stat);
  const auto paren = stat.rfind(')');  // the command name may hold spaces and parentheses
  if (paren == std::string::npos || paren + 2 >= stat.size()) return false;
  const char state = stat[paren + 2];
  return state == 'T' || state == 't';
}

// After the first failure: reaps the ranks that end by themselves within `settle`, then
// names the ones still running ("rank 2 (stopped)"); empty when none is.
std::string unsettled_ranks(std::vector<Child>& children, std::chrono::milliseconds settle) {
  const auto deadline = std::chrono::steady_clock::now() + settle;
  int rank = 0, status = 0;
  for (;;) {
    bool all_stopped = true;
    for (const auto& c : children) all_stopped = all_stopped && (!c.running || is_stopped(c.pid));
    if (!any_running(children) || all_stopped || std::chrono::steady_clock::now() >= deadline)
      break;
    if (!reap_one(children, false, &rank, &status)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  std::string names;
  int count = 0;
  for (std::size_t r = 0; r < children.size(); ++r) {
    if (!children[r].running) continue;
    names += (count++ > 0 ? ", " : "") + std::to_string(r);
    if (is_stopped(children[r].pid)) names += " (stopped)";
  }
  if (count == 0) return {};
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - (deadline - settle)).count();
  char later[32];
  if (waited >= 0.05) {
    std::snprintf(later, sizeof later, " still running %.1f s later", waited);
  } else {
    std::snprintf(later, sizeof later, " still running");
  }
  return std::string(count > 1 ? "ranks " : "rank ") + names + (count > 1 ? " were" : " was") +
         later;
}

// After a failure: SIGTERM to the rest, SIGKILL to whatever outlives the grace period.
// A worker's group is killed even after the worker itself exited (its children may
// linger), hence the final SIGKILL to every group.
void stop_the_rest(std::vector<Child>& children, std::chrono::milliseconds grace) {
  signal_running(children, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + grace;
  int rank = 0, status = 0;
  while (any_running(children) && std::chrono::steady_clock::now() < deadline) {
    if (!reap_one(children, false, &rank, &status)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  signal_running(children, SIGKILL);
  while (any_running(children) && reap_one(children, true, &rank, &status)) {
  }
  for (const auto& c : children) {
    if (c.pid > 0) kill(-c.pid, SIGKILL);  // stragglers of workers that already exited
  }
}

// Starts one worker; its stderr goes into a new pipe whose read end is *stderr_fd.
pid_t spawn_worker(int rank, const WorkerCommand& cmd, bool quiet, int* stderr_fd) {
  if (cmd.argv.empty()) {
    throw InvalidArgument("launch: rank " + std::to_string(rank) + " has an empty command");
  }
  std::vector<std::string> argv = cmd.argv;
  std::vector<std::string> extra = cmd.env;
  extra.push_back(std::string(kLauncherPidEnv) + "=" + std::to_string(getpid()));
  std::vector<std::string> env = merged_environment(extra);
  auto c_argv = c_strings(argv);
  auto c_env = c_strings(env);

  int pipe_fds[2] = {-1, -1};
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) {
    throw Error("launch: cannot start rank " + std::to_string(rank) +
                ": pipe: " + std::strerror(errno));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (quiet) {
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  }
  // The copy dup2 makes is not close-on-exec; both pipe ends are.
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDERR_FILENO);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);  // a new group led by the worker
  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, c_argv[0], &actions, &attr, c_argv.data(), c_env.data());
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&actions);
  ::close(pipe_fds[1]);
  if (rc != 0) {
    ::close(pipe_fds[0]);
    throw Error("launch: cannot start rank " + std::to_string(rank) + " ('" + argv[0] +
                "'): " + std::strerror(rc));
  }
  *stderr_fd = pipe_fds[0];
  return pid;
}

}  // namespace

LaunchResult run_local_workers(const LaunchOptions& options) {
  if (options.workers < 1) {
    throw InvalidArgument("launch: --workers " + std::to_string(options.workers) + " < 1");
  }
  if (!options.command) throw InvalidArgument("launch: no worker command");

  SignalForwarding forwarding;
  std::vector<Child> children(static_cast<std::size_t>(options.workers));
  StderrRelay relay(options, children.size());
  std::thread relaying;
  // The relay ends when every pipe is at end of file: after the workers (and anything
  // in their process groups, which stop_the_rest kills) have exited.
  const auto end_relay = [&] {
    relay.workers_gone();
    if (relaying.joinable()) relaying.join();
    for (Child& c : children) {
      if (c.stderr_fd >= 0) ::close(std::exchange(c.stderr_fd, -1));
    }
  };
  for (int r = 0; r < options.workers; ++r) {
    Child& c = children[static_cast<std::size_t>(r)];
    try {
      const WorkerCommand cmd = options.command(r);
      c.pid = spawn_worker(r, cmd, options.quiet_other_ranks && r > 0, &c.stderr_fd);
      c.running = true;
    } catch (...) {
      stop_the_rest(children, options.kill_grace);
      for (Child& d : children) {
        if (d.stderr_fd >= 0) ::close(std::exchange(d.stderr_fd, -1));
      }
      throw;
    }
  }
  std::vector<int> fds;
  for (const Child& c : children) fds.push_back(c.stderr_fd);
  relaying = std::thread([&relay, fds] { relay.run(fds); });

  LaunchResult result;
  int rank = 0, status = 0;
  while (any_running(children) && reap_one(children, true, &rank, &status)) {
    const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (!ok && result.failed_rank < 0) {
      result.failed_rank = rank;
      result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      result.message = "rank " + std::to_string(rank) + " " + describe_status(status);
      result.unsettled = unsettled_ranks(children, options.settle);
      stop_the_rest(children, options.kill_grace);
    }
  }
  end_relay();
  result.failed_rank_spoke = relay.finish(result.failed_rank);
  return result;
}

void die_with_launcher() {
  const char* launcher = std::getenv(kLauncherPidEnv);
  if (launcher == nullptr) return;
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  // The launcher may have died between our start and the prctl call.
  if (std::to_string(getppid()) != launcher) std::_Exit(1);
}

}  // namespace gradcomp::launch
