#include "train/job.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <thread>

#include "gradcomp/dist/config_check.h"
#include "gradcomp/error.h"
#include "gradcomp/json.h"
#include "gradcomp/launch.h"
#include "gradcomp/registry.h"
#include "train/job_checks.h"
#include "train/job_config.h"
#include "train/server_checkpoints.h"

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
  if (o.workers) return false;  // an explicit local launch wins over ambient variables
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

}  // namespace

data::Dataset load_dataset(const DataOptions& d, data::Split split, std::uint64_t seed) {
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

namespace {

dist::Communicator connect(const dist::RendezvousConfig& rc) {
  if (env_set(kExternalStoreEnv) && rc.world_size > 1) {
    return dist::Communicator(dist::Store::tcp_client(rc.master_addr, rc.master_port, rc.timeout),
                              rc);
  }
  return dist::Communicator::connect(rc);
}

bool is_ps(const JobOptions& o) { return o.topology != dist::Topology::kAllreduce; }

// --resume with several ranks: every synchronous worker must start from the same step.
// Each keeps its last two checkpoints (rank-R.ckpt and rank-R.ckpt.prev), so a run killed while
// some ranks had written an epoch's checkpoint and others had not resumes from the
// newest step every worker holds. A collective of the whole group: parameter servers
// take part with nothing (they find their own state by the step the workers push).
// Returns the file this rank loads; empty when no worker has a checkpoint (or a server).
std::filesystem::path agree_resume_file(dist::Communicator& comm, const JobOptions& o,
                                        int workers) {
  const int rank = comm.rank();
  const bool worker = rank < workers;
  const std::filesystem::path cur = rank_checkpoint_file(o.train.checkpoint_dir, rank);
  const std::filesystem::path prev = previous_checkpoint_file(cur);
  auto step_of = [](const std::filesystem::path& f) -> std::int64_t {
    const std::optional<std::uint64_t> s = checkpoint_step(f);
    return s ? static_cast<std::int64_t>(*s) : -1;
  };
  const std::int64_t mine[2] = {worker ? step_of(cur) : -1, worker ? step_of(prev) : -1};
  std::vector<std::byte> all;
  std::vector<std::size_t> offsets;
  comm.allgather_bytes(std::as_bytes(std::span(mine)), all, offsets);
  std::vector<std::array<std::int64_t, 2>> steps(static_cast<std::size_t>(workers));
  bool any = false;
  for (int r = 0; r < workers; ++r) {
    auto& st = steps[static_cast<std::size_t>(r)];
    std::memcpy(st.data(), all.data() + offsets[static_cast<std::size_t>(r)], sizeof mine);
    any = any || st[0] >= 0 || st[1] >= 0;
  }
  if (!any) return {};
  if (o.topology == dist::Topology::kPsAsync) {
    // Asynchronous workers never share a step while they run (one may finish while
    // another is epochs behind), so each resumes from its own newest checkpoint; the
    // servers resume from theirs and take each worker's clock from its first push.
    if (!worker) return {};
    const auto& me = steps[static_cast<std::size_t>(rank)];
    if (me[0] < 0 && me[1] < 0) return {};
    return me[0] >= me[1] ? cur : prev;
  }
  std::int64_t agreed = -1;
  for (const std::int64_t candidate : steps[0]) {
    if (candidate <= agreed) continue;
    bool everywhere = true;
    for (const auto& st : steps)
      everywhere = everywhere && (st[0] == candidate || st[1] == candidate);
    if (everywhere) agreed = candidate;
  }
  if (agreed < 0) {
    std::string held;
    for (int r = 0; r < workers; ++r) {
      const auto& st = steps[static_cast<std::size_t>(r)];
      held += (r > 0 ? "; rank " : "rank ") + std::to_string(r) + ": ";
      std::string list;
      for (const std::int64_t step : st) {
        if (step >= 0) list += (list.empty() ? "" : ", ") + std::to_string(step);
      }
      held += list.empty() ? "none" : list;
    }
    throw InvalidArgument("--resume: the workers' checkpoints in " +
                          o.train.checkpoint_dir.string() + " share no step (" + held + ")");
  }
  if (!worker) return {};
  const auto& me = steps[static_cast<std::size_t>(rank)];
  return me[0] == agreed ? cur : prev;
}

dist::PsConfig ps_config(const JobOptions& o, int world) {
  dist::PsConfig c;
  c.topology = o.topology;
  c.servers = o.servers;
  c.workers = world - o.servers;
  c.compressor = o.compressor;
  c.downlink = o.downlink;
  c.max_staleness = o.max_staleness;
  c.split_elements = o.split_elements;
  c.seed = o.train.seed;
  c.momentum = o.train.sgd.momentum;
  c.nesterov = o.train.sgd.nesterov;
  c.weight_decay = o.train.sgd.weight_decay;
  if (c.workers < 1) {
    throw InvalidArgument("--servers " + std::to_string(o.servers) +
                          " leaves no worker in a world of " + std::to_string(world) + " ranks");
  }
  return c;
}

// A parameter server rank: the same model and bucket layout as the workers (built from
// the same seed, so for ps-async the same starting weights), then serve.
int run_server(const JobOptions& o, const Method& method, const dist::RendezvousConfig& rc) {
  const dist::PsConfig pc = ps_config(o, rc.world_size);
  set_threads(1);
  const data::Dataset shape_of = load_dataset(o.data, data::Split::kTest, o.train.seed);
  const std::shared_ptr<Model> model = make_model(job_model_config(o, shape_of));
  std::vector<BucketPlan> plan = plan_buckets(describe_parameters(*model), o.train.layout);
  const std::vector<BucketShape> shapes = bucket_shapes(plan);
  GradientBuffers buffers(model->parameters(), std::move(plan));
  std::vector<std::span<const float>> initial;
  if (pc.topology == dist::Topology::kPsAsync) {
    buffers.gather_weights();
    for (std::span<float> w : buffers.weights()) initial.emplace_back(w);
  }
  dist::PsServerCheckpoints checkpoints;
  if (!o.train.checkpoint_dir.empty()) {
    CheckpointMeta identity;
    identity.seed = o.train.seed;
    identity.rank = static_cast<std::uint32_t>(rc.rank);
    identity.world = static_cast<std::uint32_t>(rc.world_size);
    checkpoints =
        server_checkpoints(o.train.checkpoint_dir, rc.rank - pc.workers, identity, o.train.resume);
  }
  dist::Communicator comm = connect(rc);
  dist::check_ranks_agree(comm,
                          job_config_fields(o, method, rc.world_size, *model, buffers.plan()));
  if (o.train.resume && !o.train.checkpoint_dir.empty())
    (void)agree_resume_file(comm, o, pc.workers);
  (void)dist::run_ps_server(pc, comm, shapes, initial, builtin_registry(), checkpoints);
  return 0;
}

void write_ps_metrics(const JobOptions& o, const dist::PsConfig& pc,
                      const dist::StalenessHistogram& hist, std::ostream& out) {
  JsonObject h;
  std::uint64_t pushes = 0, sum = 0, max = 0;
  for (const auto& [s, n] : hist) {
    h.add(std::to_string(s), n);
    pushes += n;
    sum += s * n;
    max = std::max(max, s);
  }
  if (pc.topology == dist::Topology::kPsAsync && pushes > 0) {
    char line[160];
    std::snprintf(line, sizeof line, "  %-26s mean %.2f, max %llu updates (%llu pushes)\n",
                  "staleness", static_cast<double>(sum) / static_cast<double>(pushes),
                  static_cast<unsigned long long>(max), static_cast<unsigned long long>(pushes));
    out << line;
  }
  if (o.train.metrics_path.empty()) return;
  MetricsWriter m(o.train.metrics_path, true);
  JsonObject j;
  j.add("type", "ps")
      .add("topology", dist::to_string(pc.topology))
      .add("servers", pc.servers)
      .add("workers", pc.workers)
      .add("downlink", dist::to_string(pc.downlink))
      .add("max_staleness", pc.max_staleness)
      // {"staleness": pushes, ...} over every push to every server (async; empty for sync).
      .add("staleness_histogram", h)
      .add("staleness_mean",
           pushes > 0 ? static_cast<double>(sum) / static_cast<double>(pushes) : 0.0)
      .add("staleness_max", max);
  m.write(j);
}

int run_worker(const JobOptions& o, const Method& method, std::ostream& out) {
  launch::die_with_launcher();
  const dist::RendezvousConfig rc = dist::rendezvous_from_env(o.rendezvous);
  std::optional<dist::PsConfig> pc;
  if (is_ps(o)) {
    pc = ps_config(o, rc.world_size);
    if (pc->is_server(rc.rank)) return run_server(o, method, rc);
  }
  const int workers = pc ? pc->workers : rc.world_size;

  TrainConfig cfg = o.train;
  cfg.rank = rc.rank;
  cfg.world = workers;
  if (!o.threads_given) {
    const bool local_launch = env_set(launch::kLauncherPidEnv);
    // Servers mostly wait: the cores go to the workers.
    cfg.threads = default_threads(local_launch ? workers : local_workers_from_env());
  }
  cfg.progress = rc.rank == 0 ? &out : nullptr;
  if (rc.rank != 0) cfg.metrics_path.clear();  // one metrics file, written by rank 0

  data::Dataset train_set =
      data::shard(load_dataset(o.data, data::Split::kTrain, cfg.seed), rc.rank, workers);
  data::Dataset test_set = load_dataset(o.data, data::Split::kTest, cfg.seed);

  // The fields of the start-up check need the model's shapes and buckets before the
  // trainer builds its own (from the same options, so the same ones).
  ConfigFields fields;
  // The run as the trainer will count it: steps_per_epoch = shard / batch, epochs of it.
  RunShape run;
  run.steps_per_epoch =
      cfg.batch_size > 0 ? static_cast<std::uint64_t>(train_set.n / cfg.batch_size) : 0;
  run.total_steps =
      static_cast<std::uint64_t>(std::max<std::int64_t>(cfg.epochs, 0)) * run.steps_per_epoch;
  {
    const std::shared_ptr<Model> model = make_model(job_model_config(o, train_set));
    std::vector<BucketPlan> plan = plan_buckets(describe_parameters(*model), cfg.layout);
    fields = job_config_fields(o, method, rc.world_size, *model, plan);
  }
  // The compressor's schedule in this run, once (what its settings cannot do in this run
  // comes from the gradient sync, printed by the trainer on rank 0).
  if (rc.rank == 0) {
    const std::string schedule = method.schedule(run);
    if (!schedule.empty()) out << schedule << "\n";
  }
  dist::Communicator comm = connect(rc);
  // Before any other collective (the resume agreement included): ranks started with
  // different configurations would exchange tensors of different sizes in it.
  dist::check_ranks_agree(comm, fields);
  if (cfg.resume && !cfg.checkpoint_dir.empty())
    cfg.resume_file = agree_resume_file(comm, o, workers);
  // Allreduce: gradcomp's public GradientExchange, overlapped with backward. A
  // parameter-server worker pushes and pulls whole steps after backward.
  dist::PsWorker* ps_worker = nullptr;
  const SyncFactory factory =
      pc ? reducer_sync(
               [&](std::span<const BucketShape> shapes) -> std::unique_ptr<Reducer> {
                 auto w = dist::make_ps_worker(*pc, comm, shapes, builtin_registry());
                 ps_worker = w.get();
                 return w;
               },
               method)
         : exchange_sync(comm, o.compressor, o.reducer);
  Trainer trainer(cfg, std::move(train_set), std::move(test_set), factory);
  const TrainSummary summary = trainer.run();
  if (ps_worker != nullptr) ps_worker->finish();
  if (rc.rank == 0) {
    print_report(out, summary, o, workers);
    if (ps_worker != nullptr) write_ps_metrics(o, *pc, ps_worker->staleness(), out);
  }
  return 0;
}

// `workers` local workers (and, for a parameter server, o.servers servers beside them).
int run_local_launch(const JobOptions& o, int workers, std::ostream& err) {
  // A parameter server run starts its servers too: ranks workers .. workers+servers-1.
  const int world = workers + (is_ps(o) ? o.servers : 0);
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
    if (!env_set("OMP_WAIT_POLICY")) cmd.env.push_back("OMP_WAIT_POLICY=passive");
    return cmd;
  };
  const launch::LaunchResult res = launch::run_local_workers(lo);
  if (res.exit_code != 0) {
    std::string role;
    if (is_ps(o) && res.failed_rank >= 0) {
      role = res.failed_rank >= workers
                 ? " (server " + std::to_string(res.failed_rank - workers) + ")"
                 : " (worker " + std::to_string(res.failed_rank) + ")";
    }
    err << "gradcomp: training failed: " << res.message << role
        << (res.unsettled.empty() ? "" : "; " + res.unsettled) << std::endl;
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
  if (o.topology != dist::Topology::kAllreduce) {
    row("topology", std::string(dist::to_string(o.topology)) + ", " + std::to_string(o.servers) +
                        " server" + (o.servers > 1 ? "s" : ""));
  }
  row("model / data", o.train.model.name + " / " + o.data.dataset);
  row("compressor", o.compressor);
  row("reducer", s.reducer);
  row("steps (epochs)", std::to_string(s.steps) + " (" + std::to_string(s.epochs) + ")");
  row("test accuracy", num("%.4f", s.test_accuracy));
  row("test loss", num("%.4f", s.test_loss));
  if (world == 1 && o.topology == dist::Topology::kAllreduce) {
    // A world of one has no peers: nothing goes on a wire, and a ratio against zero bytes
    // ("0 B", "0.0x") would read as a failure of the compressor.
    row("sent per worker per step", "nothing (a single worker has no peers)");
    row("compression ratio", "- (nothing is sent)");
  } else {
    row("sent per worker per step", human_bytes(s.bytes_sent_per_worker_per_step));
    row("received per worker/step", human_bytes(s.bytes_received_per_worker_per_step));
    row("dense allreduce per step", human_bytes(s.dense_bytes_per_step));
    row("compression ratio", s.compression_ratio > 0.0 ? num("%.1fx", s.compression_ratio)
                                                       : std::string("- (nothing was sent)"));
  }
  row("step time (median)", num("%.1f ms", s.step_ms_median));
  row("time: compute", num("%.2f s", s.compute_seconds));
  row("time: encode", num("%.2f s", s.encode_seconds));
  row("time: communicate", num("%.2f s", s.comm_seconds));
  row("time: decode", num("%.2f s", s.decode_seconds));
  // The exchange runs on a thread of its own: with the allreduce topology it overlaps
  // backward, and only what the step waited for after backward costs time.
  const double exchange = s.encode_seconds + s.comm_seconds + s.decode_seconds;
  std::string exposed = num("%.2f s", s.exposed_seconds);
  if (exchange > 0.0) {
    const double hidden = std::clamp(1.0 - s.exposed_seconds / exchange, 0.0, 1.0);
    exposed += num(" (%.0f%% of the exchange hidden behind backward)", 100.0 * hidden);
  }
  row("time: waited for exchange", exposed);
  if (s.dense_fallbacks > 0) {
    row("sent dense instead", std::to_string(s.dense_fallbacks) +
                                  " bucket-steps (their messages would have cost more bytes)");
  }
  row("elapsed", num("%.1f s", s.elapsed_seconds));
  row("BLAS", s.blas);
}

std::optional<int> local_workers(const JobOptions& o) {
  if (is_distributed_worker(o)) return std::nullopt;
  return o.workers.value_or(std::max(1, o.default_workers));
}

int run_job(const JobOptions& options, std::ostream& out, std::ostream& err) {
  // Here, before anything starts: the local launcher refuses a bad value with one line
  // instead of every worker printing it. Its workers pass it again, harmlessly.
  const Method method = validate_job_options(options);
  // The compressor every rank runs, with the default memory a bare biased codec gets
  // (Method::parse), so the header, the cross-rank check and the checkpoints all name
  // what runs.
  JobOptions local = options;
  local.compressor = method.spec();
  const std::optional<int> workers = local_workers(local);
  if (!workers) return run_worker(local, method, out);
  if (*workers > 1) return run_local_launch(local, *workers, err);
  // One process: a world of one, whatever the environment says.
  local.rendezvous.rank = "0";
  local.rendezvous.world_size = "1";
  return run_worker(local, method, out);
}

}  // namespace gradcomp::train
