#include "train/local_launch.h"

#include <cstdlib>
#include <string>

#include "gradcomp/launch.h"
#include "train/role.h"

namespace gradcomp::train {

LocalLaunch::LocalLaunch(const JobOptions& options, int workers, Report& report)
    : options_(options), workers_(workers), report_(report) {}

int LocalLaunch::run() {
  const JobOptions& o = options_;
  const bool ps = is_parameter_server(o);
  // A parameter server run starts its servers too: ranks workers .. workers+servers-1.
  const int world = workers_ + (ps ? o.servers : 0);
  // Only the timeout matters here (the port is the store's own, picked below).
  const dist::RendezvousConfig base =
      dist::rendezvous_from_env(dist::RendezvousFlags{.rank = "0",
                                                      .world_size = std::to_string(world),
                                                      .master_addr = "127.0.0.1",
                                                      .master_port = "1",
                                                      .timeout_ms = o.rendezvous.timeout_ms,
                                                      .interface = std::nullopt});
  const dist::Store store = dist::Store::tcp_server("127.0.0.1", 0, world, base.timeout);
  const std::string port = std::to_string(store.port());

  launch::LaunchOptions lo;
  lo.workers = world;
  lo.command = [&](int rank) {
    launch::WorkerCommand cmd;
    cmd.argv = o.argv;
    cmd.argv[0] = "/proc/self/exe";  // this very binary, whatever argv[0] said
    cmd.env = {"RANK=" + std::to_string(rank),
               "WORLD_SIZE=" + std::to_string(world),
               "LOCAL_RANK=" + std::to_string(rank),
               "LOCAL_WORLD_SIZE=" + std::to_string(world),
               "MASTER_ADDR=127.0.0.1",
               "MASTER_PORT=" + port,
               std::string(kExternalStoreEnv) + "=1"};
    // libgomp's spinning threads starve OpenBLAS's when both run several threads; it
    // reads this only at start-up, so it is set here, before the worker exists.
    if (std::getenv("OMP_WAIT_POLICY") == nullptr) cmd.env.push_back("OMP_WAIT_POLICY=passive");
    return cmd;
  };
  // A rank's "lost rank N" (dist/communicator.cc) repeats a failure from the peers'
  // side: shown only when the rank that failed first said nothing itself.
  lo.consequence = [](const std::string& line) {
    return line.find("lost rank ") != std::string::npos;
  };
  const launch::LaunchResult res = launch::run_local_workers(lo);
  if (res.exit_code == 0) return 0;
  // The failed rank's own line says what failed (the others' agreed line, printed once,
  // or its own error); the launcher's adds only which rank, unless ranks hung.
  if (res.failed_rank_spoke && res.unsettled.empty()) return res.exit_code;
  std::string role;
  if (ps && res.failed_rank >= 0) {
    role = res.failed_rank >= workers_
               ? " (server " + std::to_string(res.failed_rank - workers_) + ")"
               : " (worker " + std::to_string(res.failed_rank) + ")";
  }
  report_.failure("gradcomp: training failed: " + res.message + role +
                  (res.unsettled.empty() ? "" : "; " + res.unsettled));
  return res.exit_code;
}

}  // namespace gradcomp::train
