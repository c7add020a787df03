#include "terminate_handler.h"

#include <unistd.h>

#include <cstdlib>
#include <exception>
#include <string>

namespace gradcomp::cli {

namespace {

std::string first_line(const char* what) {
  std::string s(what ? what : "");
  const std::size_t end = s.find_first_of("\r\n");
  if (end != std::string::npos) s.resize(end);
  return s.empty() ? "unknown error" : s;
}

[[noreturn]] void on_terminate() noexcept {
  std::string what = "std::terminate was called without an active exception";
  if (const std::exception_ptr e = std::current_exception()) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      what = first_line(x.what());
    } catch (...) {
      what = "an exception of unknown type";
    }
    what +=
        " (thrown on a background thread, e.g. Gloo's transport; if the ranks were "
        "started with different settings, start them alike)";
  }
  const std::string line = "gradcomp: fatal: " + what + "\n";
  // One write(2): no iostream state, no locks another thread may hold.
  const ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
  // _Exit: the other threads are still running, static destructors must not.
  std::_Exit(1);
}

}  // namespace

void install_terminate_handler() { std::set_terminate(on_terminate); }

}  // namespace gradcomp::cli
