#include "torch_binary.h"

#include <cerrno>
#include <cstring>

#include <sys/wait.h>
#include <unistd.h>

#include "gradcomp/error.h"

namespace gradcomp::cli {

namespace {

// The directory of this executable, from /proc/self/exe (argv[0] may be anything).
std::string own_directory() {
  std::vector<char> buf(4096);
  const ssize_t len = readlink("/proc/self/exe", buf.data(), buf.size() - 1);
  if (len <= 0) return ".";
  const std::string path(buf.data(), static_cast<std::size_t>(len));
  const std::size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

}  // namespace

std::string torch_binary_path() { return own_directory() + "/gradcomp-torch"; }

std::string run_torch_binary(const std::vector<std::string>& args) {
  const std::string path = torch_binary_path();
  std::string what = "gradcomp-torch";
  for (const std::string& a : args) what += " " + a;
  if (access(path.c_str(), X_OK) != 0) {
    throw Error("cannot run " + path + ": " + std::strerror(errno));
  }
  int fds[2];
  if (pipe(fds) != 0) throw Error(what + ": pipe: " + std::strerror(errno));
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    throw Error(what + ": fork: " + std::strerror(errno));
  }
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    close(fds[0]);
    close(fds[1]);
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(path.c_str()));
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(path.c_str(), argv.data());
    const std::string line = "gradcomp: cannot run " + path + ": " + std::strerror(errno) + "\n";
    (void)!write(STDERR_FILENO, line.data(), line.size());
    _exit(127);
  }
  close(fds[1]);
  std::string out;
  char buf[4096];
  for (;;) {
    const ssize_t got = read(fds[0], buf, sizeof buf);
    if (got > 0) {
      out.append(buf, static_cast<std::size_t>(got));
    } else if (got == 0 || errno != EINTR) {
      break;
    }
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    throw Error(what + ": " +
                (WIFEXITED(status) ? "exited with status " + std::to_string(WEXITSTATUS(status))
                                   : std::string("killed by a signal")));
  }
  return out;
}

}  // namespace gradcomp::cli
