// gradcomp train: flags to a train::JobOptions, then train::run.
#include <iostream>
#include <optional>
#include <string>

#include "commands.h"
#include "train/run.h"

namespace gradcomp::cli {

namespace {

// The main job's defaults: 4 local workers, Fashion-MNIST, the FC-heavy MLP, PowerSGD
// rank 4, 3 epochs.
constexpr int kDefaultLocalWorkers = 4;

struct TrainFlags {
  train::JobOptions job;
  std::string model = "mlp";
  std::string mlp_hidden = "1536,1536";
  std::string reducer = "auto";
  std::string topology = "allreduce";
  std::string downlink = "dense";
  std::string async_momentum = "compensate";
  std::string lr_decay = "cosine";
  std::string optimizer = "sgd";
  std::string milestones;
  std::string rank, world_size, master_addr, master_port, timeout_ms, interface;
  std::optional<int> workers;  // unset: the default, or the rendezvous decides
  int threads = 0;
};

// Without --compressor: dist::default_compressor of the reducer (PowerSGD under auto); a
// parameter server runs codecs and takes the gathered one, but ps-async the bare top-k:
// its servers apply the momentum, so the workers' memory is plain error feedback
// (efm would apply it twice).
constexpr const char* kPsAsyncDefaultCompressor = "topk:ratio=0.01";
std::string default_compressor(dist::Topology topology, dist::ReducerKind reducer) {
  if (topology == dist::Topology::kPsAsync) return kPsAsyncDefaultCompressor;
  return dist::default_compressor(
      topology == dist::Topology::kAllreduce ? reducer : dist::ReducerKind::kAllgather);
}

}  // namespace

void add_train_command(CLI::App& app, int argc, char** argv) {
  auto flags = std::make_shared<TrainFlags>();
  train::JobOptions& j = flags->job;
  // The compressor is chosen after parsing when --compressor is not given
  // (default_compressor); the small classifier layer stays dense (--dense-share 0.01: top-k
  // without it lost 1.6 points, docs/measurements/accuracy.md).
  j.train.layout.dense_share = 0.01;
  j.train.epochs = 3;
  j.train.lr = 0.05;
  j.train.warmup_steps = 50;
  j.train.seed = 42;
  for (int i = 0; i < argc; ++i) j.argv.emplace_back(argv[i]);

  CLI::App* cmd = app.add_subcommand("train", kTrainSummary);
  // A flag given twice: the later one wins (scripts append overrides to defaults).
  cmd->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  cmd->add_option("--workers", flags->workers,
                  "local worker processes to start (default 4 when no rendezvous is given)");
  CLI::Option* compressor_flag = cmd->add_option(
      "--compressor", j.compressor,
      "compressor spec, e.g. none, 2bit, qsgd, ef(topk:ratio=0.01) (see gradcomp "
      "list); default: " +
          dist::default_compressor(dist::ReducerKind::kAuto) + "; " +
          dist::default_compressor(dist::ReducerKind::kAllgather) +
          " with --topology ps-sync or --reducer allgather, " + kPsAsyncDefaultCompressor +
          " (ef) with --topology ps-async, " +
          dist::default_compressor(dist::ReducerKind::kAllreduce) + " with --reducer allreduce, " +
          dist::default_compressor(dist::ReducerKind::kDense) + " with --reducer dense, " +
          dist::default_compressor(dist::ReducerKind::kScatter) +
          " with --reducer scatter; with --sync-every: " + dist::kDefaultOuterCompressor);
  cmd->add_option("--reducer", flags->reducer,
                  "auto | dense | allreduce | allgather | scatter (each rank averages 1/W of "
                  "every bucket from the others' compressed slices and sends it back "
                  "compressed: any codec at a ring allreduce's bytes)")
      ->capture_default_str();
  cmd->add_option("--topology", flags->topology,
                  "allreduce | ps-sync | ps-async (parameter server: --servers ranks beside "
                  "the workers)")
      ->capture_default_str();
  cmd->add_option("--servers", j.servers, "parameter servers (ps-sync / ps-async), 1 to 64")
      ->capture_default_str();
  cmd->add_option("--ps-downlink", flags->downlink,
                  "ps-sync replies: dense (MXNet) | compressed (server-side error feedback)")
      ->capture_default_str();
  cmd->add_option("--max-staleness", j.max_staleness,
                  "ps-async: a worker waits while more than N steps ahead of the slowest "
                  "(-1: never)")
      ->capture_default_str();
  CLI::Option* async_momentum_flag =
      cmd->add_option("--async-momentum", flags->async_momentum,
                      "ps-async: compensate (the servers take the momentum asynchrony adds, "
                      "1 - 1/W, out of --momentum, keeping lr / (1 - momentum)) | as-given")
          ->capture_default_str();
  cmd->add_option("--ps-split-elements", j.split_elements,
                  "parameter server: buckets larger than this are split across the servers")
      ->capture_default_str()
      ->check(unsigned_integer());
  cmd->add_option("--model", flags->model,
                  "mlp | lenet5 | resnet20 | transformer (a byte-level language model: 4 "
                  "layers, d_model 128, 4 heads; --dataset fortunes)")
      ->capture_default_str();
  cmd->add_option("--mlp-hidden", flags->mlp_hidden, "MLP hidden widths")->capture_default_str();
  cmd->add_option("--dataset", j.data.dataset,
                  "fashion-mnist | mnist | cifar10 | synthetic | fortunes (text: Debian's "
                  "fortunes, bytes as tokens, the last 10% for test)")
      ->capture_default_str();
  cmd->add_option("--context", j.data.context,
                  "text: bytes the model reads per window (windows of context + 1 bytes)")
      ->capture_default_str();
  cmd->add_option("--data-dir", j.data.data_dir, "data directory (default: the dataset's own)")
      ->check(non_empty_path());
  cmd->add_option("--epochs", j.train.epochs, "epochs")->capture_default_str();
  cmd->add_option("--steps", j.train.max_steps, "stop after this many steps (then evaluate)");
  cmd->add_option("--batch-size", j.train.batch_size, "batch per worker")->capture_default_str();
  cmd->add_option("--lr", j.train.lr, "learning rate")->capture_default_str();
  cmd->add_option("--optimizer", flags->optimizer,
                  "sgd | adamw (torch.optim.AdamW; --momentum and --nesterov are SGD's)")
      ->capture_default_str();
  CLI::Option* momentum_flag =
      cmd->add_option("--momentum", j.train.sgd.momentum, "SGD momentum")->capture_default_str();
  cmd->add_flag("--nesterov", j.train.sgd.nesterov, "Nesterov momentum");
  cmd->add_option("--adam-beta1", j.train.adamw.beta1, "AdamW's first-moment decay")
      ->capture_default_str();
  cmd->add_option("--adam-beta2", j.train.adamw.beta2, "AdamW's second-moment decay")
      ->capture_default_str();
  cmd->add_option("--adam-eps", j.train.adamw.eps, "AdamW's epsilon (outside the square root)")
      ->capture_default_str();
  cmd->add_option("--weight-decay", j.train.sgd.weight_decay,
                  "weight decay: SGD's L2 term, AdamW's decoupled decay (p -= lr * wd * p)")
      ->capture_default_str();
  cmd->add_option("--warmup-steps", j.train.warmup_steps, "linear learning-rate warm-up")
      ->capture_default_str();
  cmd->add_option("--lr-decay", flags->lr_decay, "constant | step | cosine")->capture_default_str();
  cmd->add_option("--milestones", flags->milestones, "step decay: epochs, e.g. 30,60");
  cmd->add_option("--gamma", j.train.gamma, "step decay factor")->capture_default_str();
  cmd->add_option("--dense-steps", j.train.dense_steps, "dense exchange for the first N steps")
      ->capture_default_str();
  cmd->add_option("--sync-every", j.outer_loop.sync_every,
                  "local steps: exchange every H steps (DiLoCo's outer loop; the compressor "
                  "applies to the pseudo-gradients; default compressor " +
                      std::string(dist::kDefaultOuterCompressor) + "); 0: every step")
      ->capture_default_str();
  cmd->add_option("--outer", j.outer_loop.outer,
                  "with --sync-every: the outer optimizer, nesterov:lr=0.7,momentum=0.9 | "
                  "average | sgd:lr=L,momentum=M | sparseloco:lr=1,decay=0.95")
      ->capture_default_str();
  cmd->add_option("--fragments", j.outer_loop.fragments,
                  "with --sync-every: streaming, fragments exchanged on a staggered schedule")
      ->capture_default_str();
  cmd->add_option("--delay", j.outer_loop.delay,
                  "with --sync-every: steps a fragment's exchange overlaps before its merge")
      ->capture_default_str();
  cmd->add_option("--mix", j.outer_loop.mix,
                  "with --sync-every: share of the local weights kept at a merge")
      ->capture_default_str();
  cmd->add_option("--bucket-mb", j.train.layout.bucket_mb,
                  "fuse layers into buckets of MB (0: per layer)")
      ->capture_default_str();
  cmd->add_option("--min-group-mb", j.train.min_group_mb,
                  "allreduce topology: exchange buckets in groups of at least this many MiB, "
                  "one set of collectives per group (0: a group per bucket; default: 1 for "
                  "--compressor none, 25 for a compressed exchange)")
      ->check(non_negative_number());
  cmd->add_option("--min-elements", j.train.layout.min_elements,
                  "smaller tensors (and 1-D ones) stay dense")
      ->capture_default_str();
  cmd->add_option("--dense-share", j.train.layout.dense_share,
                  "the smallest tensors, together at most this share of the model's "
                  "elements, stay dense (0.01 keeps the MLP's classifier dense)")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  CLI::Option* threads_flag =
      cmd->add_option("--threads", flags->threads,
                      "threads per worker, 1 to 1024 (default: cores / local workers)");
  cmd->add_option("--blas-threads", j.train.blas_threads,
                  "OpenBLAS threads, up to 1024 (0: = --threads)");
  cmd->add_option("--seed", j.train.seed, "run seed")
      ->capture_default_str()
      ->check(unsigned_integer());
  cmd->add_option("--checkpoint-dir", j.train.checkpoint_dir,
                  "write a checkpoint per rank (and parameter server) each epoch and at the "
                  "stop; the previous one is kept as .prev")
      ->check(non_empty_path());
  cmd->add_flag("--resume", j.train.resume,
                "continue from --checkpoint-dir, at the newest step every worker holds "
                "(ps-async: each worker at its own newest)");
  cmd->add_option("--metrics", j.metrics_path,
                  "JSON lines: one per epoch and a summary, written to FILE.partial and "
                  "renamed over FILE when the run ends (a failed run leaves FILE as it was)")
      ->check(non_empty_path());
  cmd->add_option("--eval-every", j.train.eval_every,
                  "also evaluate the test set every N steps (reported with the training time "
                  "so far; 0: at epoch ends only)")
      ->capture_default_str();
  cmd->add_option("--synthetic-train", j.data.synthetic_train, "synthetic: train samples");
  cmd->add_option("--rank", flags->rank, "this process's rank (multi-machine)");
  cmd->add_option("--world-size", flags->world_size, "number of workers (multi-machine)");
  cmd->add_option("--master-addr", flags->master_addr, "rank 0's address");
  cmd->add_option("--master-port", flags->master_port, "rank 0's TCPStore port");
  cmd->add_option("--timeout-ms", flags->timeout_ms, "rendezvous and collective timeout");
  cmd->add_option("--interface", flags->interface, "network interface for Gloo");

  // The values themselves are judged by train::run (validate_job_options), once, before
  // any worker starts; here they are only turned into options.
  cmd->callback([flags, compressor_flag, threads_flag, momentum_flag, async_momentum_flag] {
    train::JobOptions job = flags->job;
    job.train.model.name = flags->model;
    job.train.model.mlp_hidden = train::parse_widths(flags->mlp_hidden, "--mlp-hidden");
    job.reducer = dist::parse_reducer_kind(flags->reducer);
    job.topology = dist::parse_topology(flags->topology);
    if (compressor_flag->count() == 0) {
      // The outer loop's default is DiLoCo's fp32 pseudo-gradient.
      job.compressor = train::has_outer_loop(job) ? dist::kDefaultOuterCompressor
                                                  : default_compressor(job.topology, job.reducer);
    }
    job.downlink = dist::parse_downlink(flags->downlink);
    job.async_momentum = dist::parse_async_momentum(flags->async_momentum);
    job.async_momentum_given = async_momentum_flag->count() > 0;
    job.train.decay = train::parse_lr_decay(flags->lr_decay);
    job.train.optimizer = train::parse_optimizer_kind(flags->optimizer);
    job.momentum_given = momentum_flag->count() > 0;
    // --weight-decay is both optimizers' (the options structs are each self-contained).
    job.train.adamw.weight_decay = job.train.sgd.weight_decay;
    if (!flags->milestones.empty())
      job.train.milestone_epochs = train::parse_widths(flags->milestones, "--milestones");
    // Given, --threads is taken as it is (0 is refused, not read as "the default").
    job.threads_given = threads_flag->count() > 0;
    if (job.threads_given) job.train.threads = flags->threads;
    auto set = [](std::optional<std::string>& dst, const std::string& v) {
      if (!v.empty()) dst = v;
    };
    set(job.rendezvous.rank, flags->rank);
    set(job.rendezvous.world_size, flags->world_size);
    set(job.rendezvous.master_addr, flags->master_addr);
    set(job.rendezvous.master_port, flags->master_port);
    set(job.rendezvous.timeout_ms, flags->timeout_ms);
    set(job.rendezvous.interface, flags->interface);
    job.workers = flags->workers;
    job.default_workers = kDefaultLocalWorkers;
    train::Report report(std::cout, std::cerr);
    const int status = train::run(job, report);
    if (status != 0) throw ExitStatus(status);
  });
}

}  // namespace gradcomp::cli
