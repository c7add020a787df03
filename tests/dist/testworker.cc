// gradcomp_dist_testworker: one rank of the dead-peer test. Joins the group from the
// launcher environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, GRADCOMP_TIMEOUT_MS),
// then allreduces `steps` times; the rank named by DIE_RANK exits abruptly (_exit, no
// goodbye) before step DIE_STEP, or stops itself (SIGSTOP: alive, silent) when DIE_HOW
// is "stop". Exit codes: 0 done, 3 CommError, 4 other error.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "gradcomp/dist/communicator.h"
#include "gradcomp/error.h"

int main() {
  using namespace gradcomp::dist;
  try {
    const RendezvousConfig config = rendezvous_from_env();
    const char* die_rank = std::getenv("DIE_RANK");
    const char* die_step = std::getenv("DIE_STEP");
    const int dying = die_rank ? std::atoi(die_rank) : -1;
    const int at_step = die_step ? std::atoi(die_step) : 0;
    const char* die_how = std::getenv("DIE_HOW");
    const bool stop = die_how != nullptr && std::string(die_how) == "stop";
    Communicator comm = Communicator::connect(config);
    std::vector<float> data(1 << 16, 1.0f);
    for (int step = 0; step < 50; ++step) {
      if (comm.rank() == dying && step == at_step) {
        if (stop) ::raise(SIGSTOP);
        _exit(9);
      }
      comm.allreduce_sum(data);
      for (float& x : data) x = 1.0f;
    }
    return 0;
  } catch (const gradcomp::CommError& e) {
    std::fprintf(stderr, "worker: %s\n", e.what());
    return 3;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "worker: other error: %s\n", e.what());
    return 4;
  }
}
