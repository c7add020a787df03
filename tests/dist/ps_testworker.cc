// gradcomp_ps_testworker: one rank of the parameter-server fault tests. Joins the group
// from the launcher environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
// GRADCOMP_TIMEOUT_MS); PS_SERVERS ranks at the end are servers, the rest workers that
// run PS_STEPS steps (default: practically forever) of ps-sync (PS_TOPOLOGY=async:
// ps-async) on small buckets. The test kills one rank from outside.
// Exit codes: 0 done, 3 CommError, 4 other error (the message goes to stderr).
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "gradcomp/dist/communicator.h"
#include "gradcomp/dist/ps.h"
#include "gradcomp/error.h"

int main() {
  using namespace gradcomp;
  using namespace gradcomp::dist;
  try {
    const RendezvousConfig config = rendezvous_from_env();
    const char* servers = std::getenv("PS_SERVERS");
    const char* steps_env = std::getenv("PS_STEPS");
    const char* topo = std::getenv("PS_TOPOLOGY");
    PsConfig pc;
    pc.servers = servers ? std::atoi(servers) : 1;
    pc.workers = config.world_size - pc.servers;
    pc.topology = topo && std::string(topo) == "async" ? Topology::kPsAsync : Topology::kPsSync;
    pc.compressor = "2bit";
    const long steps = steps_env ? std::atol(steps_env) : 1'000'000'000L;
    const std::vector<BucketShape> shapes = {{0, 5000, true, 0}, {1, 300, false, 0}};
    std::vector<std::vector<float>> init = {std::vector<float>(5000, 0.0f),
                                            std::vector<float>(300, 0.0f)};
    Communicator comm = Communicator::connect(config);
    if (pc.is_server(comm.rank())) {
      const std::vector<std::span<const float>> w0(init.begin(), init.end());
      run_ps_server(pc, comm, shapes, w0);
      return 0;
    }
    auto worker = make_ps_worker(pc, comm, shapes);
    WeightExchange* const weight_exchange = dynamic_cast<WeightExchange*>(worker.get());
    std::vector<std::vector<float>> grads = init, weights = init;
    std::vector<std::span<float>> wspans(weights.begin(), weights.end());
    for (long s = 0; s < steps; ++s) {
      for (auto& g : grads) {
        for (std::size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>((i + s) % 7) - 3.0f;
      }
      const std::vector<BucketRef> refs = {{0, grads[0], true}, {1, grads[1], false}};
      StepContext ctx;
      ctx.step = static_cast<std::uint64_t>(s);
      ctx.lr = 0.01f;
      if (weight_exchange != nullptr) {
        weight_exchange->exchange_weights(refs, wspans, ctx);
      } else {
        worker->reduce(refs, ctx);
      }
      // The test waits for this line from every worker before it kills anyone.
      if (s == 3) std::fprintf(stderr, "running\n");
    }
    worker->finish();
    return 0;
  } catch (const CommError& e) {
    std::fprintf(stderr, "ps testworker: %s\n", e.what());
    return 3;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ps testworker: other error: %s\n", e.what());
    return 4;
  }
}
