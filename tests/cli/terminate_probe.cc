// A program that lets an exception escape a thread of its own, with the CLI's terminate
// handler installed: what Gloo's transport thread does when ranks disagree on a size.
// terminate_test.sh checks the outcome (one "gradcomp: fatal:" line, exit status 1).
#include <stdexcept>
#include <thread>

#include "terminate_handler.h"

int main() {
  gradcomp::cli::install_terminate_handler();
  std::thread t([] {
    throw std::runtime_error(
        "[enforce fail at pair.cc:446] op.preamble.length <= op.nbytes. 780 vs 524\n"
        "a second line that must not be printed");
  });
  t.join();
  return 0;  // not reached
}
