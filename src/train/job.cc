#include "train/job.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>

#include "gradcomp/dist/schemes.h"
#include "gradcomp/error.h"
#include "gradcomp/launch.h"
#include "gradcomp/registry.h"

namespace gradcomp::train {

namespace {

// Set by the local launcher: every rank, rank 0 included, joins the TCPStore the
// launcher hosts (on an ephemeral port it picked race-free) as a client.
constexpr const char* kExternalStoreEnv = "GRADCOMP_EXTERNAL_STORE";

bool env_set(const char* name) { return std::getenv(name) != nullptr; }

bool is_distributed_worker(const JobOptions& o) {
  const auto& f = o.rendezvous;
  if (f.rank || f.world_size || f.master_addr || f.master_port) return true;
  if (env_set(launch::kLauncherPidEnv)) return true;
  if (o.workers > 0) return false;  // an explicit local launch wins over ambient variables
  return env_set("RANK") || env_set("OMPI_COMM_WORLD_RANK") || env_set("SLURM_PROCID");
}

// Threads per worker when --threads is not given: the cores shared by the workers of
// this machine (the launcher's count, or torchrun's LOCAL_WORLD_SIZE).
int default_threads(int local_workers) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, cores / std::max(1, local_workers));
}

int local_workers_from_env() {
  for (const char* name :
       {"LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE"}) {
    if (const char* v = std::getenv(name)) {
      const int n = std::atoi(v);
      if (n > 0) return n;
    }
  }
  return 1;
}

data::Dataset load(const DataOptions& d, data::Split split, std::uint64_t seed) {
  if (d.dataset == "fashion-mnist") return data::load_fashion_mnist(d.data_dir, split);
  if (d.dataset == "mnist") {
    if (d.data_dir.empty()) throw InvalidArgument("--dataset mnist needs --data-dir");
    return data::load_mnist(d.data_dir, split);
  }
  if (d.dataset == "cifar10") {
    if (d.data_dir.empty()) throw InvalidArgument("--dataset cifar10 needs --data-dir");
    return data::load_cifar10(d.data_dir, split);
  }
  if (d.dataset == "synthetic") {
    // One generated set, cut into train and test (make_synthetic's samples do not
    // depend on n).
    const auto all =
        data::make_synthetic(d.synthetic_train + d.synthetic_test, 10, 1, 28, 28, seed);
    return split == data::Split::kTrain
               ? data::slice(all, 0, d.synthetic_train)
               : data::slice(all, d.synthetic_train, d.synthetic_train + d.synthetic_test);
  }
  throw InvalidArgument("--dataset " + d.dataset +
                        ": unknown; known: fashion-mnist, mnist, cifar10, synthetic");
}

dist::Communicator connect(const dist::RendezvousConfig& rc) {
  if (env_set(kExternalStoreEnv) && rc.world_size > 1) {
    return dist::Communicator(dist::Store::tcp_client(rc.master_addr, rc.master_port, rc.timeout),
                              rc);
  }
  return dist::Communicator::connect(rc);
}

int run_worker(const JobOptions& o, std::ostream& out) {
  launch::die_with_launcher();
  const dist::RendezvousConfig rc = dist::rendezvous_from_env(o.rendezvous);
  // Validate the compressor before anyone connects: a typo should not cost a timeout.
  dist::validate_compressor_spec(o.compressor);

  TrainConfig cfg = o.train;
  cfg.rank = rc.rank;
  cfg.world = rc.world_size;
  if (!o.threads_given) {
    const bool local_launch = env_set(launch::kLauncherPidEnv);
    cfg.threads = default_threads(local_launch ? rc.world_size : local_workers_from_env());
  }
  cfg.progress = rc.rank == 0 ? &out : nullptr;
  if (rc.rank != 0) cfg.metrics_path.clear();  // one metrics file, written by rank 0

  data::Dataset train_set =
      data::shard(load(o.data, data::Split::kTrain, cfg.seed), rc.rank, rc.world_size);
  data::Dataset test_set = load(o.data, data::Split::kTest, cfg.seed);

  dist::Communicator comm = connect(rc);
  const ReducerFactory factory = [&](std::span<const BucketShape> shapes) {
    return dist::make_reducer(o.compressor, o.reducer, comm, shapes, builtin_registry());
  };
  Trainer trainer(cfg, std::move(train_set), std::move(test_set), factory);
  const TrainSummary summary = trainer.run();
  if (rc.rank == 0) print_report(out, summary, o, rc.world_size);
  return 0;
}

int run_local_launch(const JobOptions& o, std::ostream& err) {
  // Only the timeout matters here (the port is the store's own, picked below).
  const dist::RendezvousConfig base =
      dist::rendezvous_from_env(dist::RendezvousFlags{.rank = "0",
                                                      .world_size = std::to_string(o.workers),
                                                      .master_addr = "127.0.0.1",
                                                      .master_port = "1",
                                                      .timeout_ms = o.rendezvous.timeout_ms,
                                                      .interface = std::nullopt});
  // Fail on a bad compressor or data set here, once, not in N workers.
  dist::validate_compressor_spec(o.compressor);
  const dist::Store store = dist::Store::tcp_server("127.0.0.1", 0, o.workers, base.timeout);
  const std::string port = std::to_string(store.port());

  launch::LaunchOptions lo;
  lo.workers = o.workers;
  lo.command = [&](int rank) {
    launch::WorkerCommand cmd;
    cmd.argv = o.argv;
    cmd.argv[0] = "/proc/self/exe";  // this very binary, whatever argv[0] said
    cmd.env = {"RANK=" + std::to_string(rank),
               "WORLD_SIZE=" + std::to_string(o.workers),
               "LOCAL_RANK=" + std::to_string(rank),
               "LOCAL_WORLD_SIZE=" + std::to_string(o.workers),
               "MASTER_ADDR=127.0.0.1",
               "MASTER_PORT=" + port,
               std::string(kExternalStoreEnv) + "=1"};
    // libgomp's spinning threads starve OpenBLAS's when both run several threads; it
    // reads this only at start-up, so it is set here, before the worker exists.
    if (!env_set("OMP_WAIT_POLICY")) cmd.env.push_back("OMP_WAIT_POLICY=passive");
    return cmd;
  };
  const launch::LaunchResult res = launch::run_local_workers(lo);
  if (res.exit_code != 0) {
    err << "gradcomp: training failed: " << res.message << std::endl;
    return res.exit_code;
  }
  return 0;
}

std::string human_bytes(double b) {
  char buf[64];
  if (b >= 1e6) {
    std::snprintf(buf, sizeof buf, "%.2f MB", b / 1e6);
  } else if (b >= 1e3) {
    std::snprintf(buf, sizeof buf, "%.1f kB", b / 1e3);
  } else {
    std::snprintf(buf, sizeof buf, "%.0f B", b);
  }
  return buf;
}

}  // namespace

void print_report(std::ostream& out, const TrainSummary& s, const JobOptions& o, int world) {
  char line[256];
  auto row = [&](const char* key, const std::string& value) {
    std::snprintf(line, sizeof line, "  %-26s %s\n", key, value.c_str());
    out << line;
  };
  auto num = [](const char* fmt, double v) {
    char b[64];
    std::snprintf(b, sizeof b, fmt, v);
    return std::string(b);
  };
  out << "\n== gradcomp train report ==\n";
  row("workers", std::to_string(world));
  row("model / data", o.train.model.name + " / " + o.data.dataset);
  row("compressor", o.compressor);
  row("reducer", s.reducer);
  row("steps (epochs)", std::to_string(s.steps) + " (" + std::to_string(s.epochs) + ")");
  row("test accuracy", num("%.4f", s.test_accuracy));
  row("test loss", num("%.4f", s.test_loss));
  row("sent per worker per step", human_bytes(s.bytes_sent_per_worker_per_step));
  row("dense allreduce per step", human_bytes(s.dense_bytes_per_step));
  row("compression ratio", num("%.1fx", s.compression_ratio));
  row("step time (median)", num("%.1f ms", s.step_ms_median));
  row("time: compute", num("%.2f s", s.compute_seconds));
  row("time: encode", num("%.2f s", s.encode_seconds));
  row("time: communicate", num("%.2f s", s.comm_seconds));
  row("time: decode", num("%.2f s", s.decode_seconds));
  row("elapsed", num("%.1f s", s.elapsed_seconds));
  row("BLAS", s.blas);
}

int run_job(const JobOptions& options, std::ostream& out, std::ostream& err) {
  if (options.workers < 0) throw InvalidArgument("--workers must be >= 1");
  if (is_distributed_worker(options)) return run_worker(options, out);
  JobOptions local = options;
  if (local.workers == 0) local.workers = std::max(1, options.default_workers);
  if (local.workers > 1) return run_local_launch(local, err);
  return run_worker(local, out);  // one process: world of one
}

}  // namespace gradcomp::train
