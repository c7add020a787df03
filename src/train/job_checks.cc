#include "train/job_checks.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>

#include "gradcomp/cpu.h"
#include "gradcomp/data/dataset.h"
#include "gradcomp/error.h"
#include "gradcomp/json.h"
#include "gradcomp/outer_optimizer.h"
#include "gradcomp/registry.h"
#include "train/checkpoint_file.h"
#include "train/models.h"
#include "train/role.h"

namespace gradcomp::train {

namespace {

// Ranks a run can have (rendezvous_from_env's bound on the world size).
constexpr std::int64_t kMaxRanks = 65536;

// Parameter servers a run can have. Each server is a process (a local launch starts all of
// them on this machine) and holds 1/S of every bucket larger than --ps-split-elements
// (10^6 elements by default): past 64 servers such a bucket's ranges fall below 16k
// elements, where each push's per-message cost outweighs what one more server's link
// adds, and a local run of --servers 1000 only starts a thousand processes that time
// out. MXNet and BytePS deployments run about one server per worker machine.
constexpr std::int64_t kMaxServers = 64;

// A double as the user would have typed it (json_number writes "null" for NaN and inf).
std::string number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return json_number(v);
}

// Every range error reads "--flag: VALUE is not ALLOWED", as the CLI's own validators do.
[[noreturn]] void refuse(std::string_view flag, const std::string& value,
                         const std::string& allowed) {
  throw InvalidArgument(std::string(flag) + ": " + value + " is not " + allowed);
}

void integer_at_least(std::string_view flag, std::int64_t v, std::int64_t min) {
  if (v < min) refuse(flag, std::to_string(v), "an integer >= " + std::to_string(min));
}

void integer_in(std::string_view flag, std::int64_t v, std::int64_t min, std::int64_t max) {
  if (v < min || v > max) {
    refuse(flag, std::to_string(v),
           "an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]");
  }
}

// The comparisons are written so that NaN fails them.
void number_at_least_zero(std::string_view flag, double v) {
  if (!(std::isfinite(v) && v >= 0.0)) refuse(flag, number(v), "a number >= 0");
}

void positive_number(std::string_view flag, double v) {
  if (!(std::isfinite(v) && v > 0.0)) refuse(flag, number(v), "a number > 0");
}

// Processes and threads. --workers is the local launch's (absent: the default, or the
// rendezvous decides); the world it makes with the servers is bounded like any rendezvous.
void check_counts(const JobOptions& o) {
  if (o.workers) integer_in("--workers", *o.workers, 1, kMaxRanks);
  // Checked whatever the topology: a count of servers below one is never meaningful.
  integer_in("--servers", o.servers, 1, kMaxServers);
  if (o.workers && is_parameter_server(o) && *o.workers + o.servers > kMaxRanks) {
    throw InvalidArgument("--workers " + std::to_string(*o.workers) + " and --servers " +
                          std::to_string(o.servers) + " make " +
                          std::to_string(*o.workers + o.servers) + " ranks, more than " +
                          std::to_string(kMaxRanks));
  }
  if (o.max_staleness < -1) {
    refuse("--max-staleness", std::to_string(o.max_staleness), "-1 (never) or an integer >= 0");
  }
  integer_in("--threads", o.train.threads, 1, kMaxThreads);
  integer_in("--blas-threads", o.train.blas_threads, 0, kMaxThreads);
}

// The language model reads text and only text: an image model on byte windows would
// learn to classify a window's last byte, and the transformer cannot read images.
void check_model(const ModelConfig& m, const DataOptions& d) {
  if (!is_known_model(m.name)) refuse("--model", m.name, "one of " + known_models());
  const bool text = is_text_dataset(d.dataset);
  if ((m.name == "transformer") != text) {
    throw InvalidArgument(text ? "--dataset " + d.dataset + " is text: it needs --model transformer"
                               : "--model transformer needs a text --dataset (fortunes), not " +
                                     d.dataset);
  }
}

// The data set's name and directory, here rather than in every worker's loader. Only
// the directory is looked at: reading the files is the workers' job.
void check_data_source(const DataOptions& d) {
  if (d.dataset == "synthetic") {
    integer_at_least("--synthetic-train", d.synthetic_train, 1);
    return;
  }
  if (is_text_dataset(d.dataset)) {
    integer_in("--context", d.context, 1, data::kMaxContext);
    std::error_code ec;
    if (!d.data_dir.empty()) {
      if (!std::filesystem::is_directory(d.data_dir, ec)) {
        refuse("--data-dir", d.data_dir.string(), "a directory");
      }
    } else if (!std::filesystem::is_directory(data::kFortunesDefaultDir, ec)) {
      throw InvalidArgument("--dataset fortunes: " + std::string(data::kFortunesDefaultDir) +
                            " is not a directory (install the Debian package fortunes "
                            "(scripts/install-deps.sh), or pass --data-dir)");
    }
    // 2.6 MB, read in milliseconds: a missing or empty file is then one line here rather
    // than one per worker.
    try {
      (void)data::read_fortunes(d.data_dir);
    } catch (const InvalidArgument& e) {
      throw InvalidArgument("--dataset fortunes: " + std::string(e.what()));
    }
    return;
  }
  if (d.dataset != "fashion-mnist" && d.dataset != "mnist" && d.dataset != "cifar10") {
    refuse("--dataset", d.dataset, "one of fashion-mnist, mnist, cifar10, synthetic, fortunes");
  }
  std::error_code ec;
  if (!d.data_dir.empty()) {
    if (!std::filesystem::is_directory(d.data_dir, ec)) {
      refuse("--data-dir", d.data_dir.string(), "a directory");
    }
    return;
  }
  if (d.dataset != "fashion-mnist") {
    throw InvalidArgument("--dataset " + d.dataset + " needs --data-dir");
  }
  if (!std::filesystem::is_directory(data::kFashionMnistDefaultDir, ec)) {
    throw InvalidArgument("--dataset fashion-mnist: " + std::string(data::kFashionMnistDefaultDir) +
                          " is not a directory (install the Debian package "
                          "dataset-fashion-mnist (scripts/install-deps.sh), or pass --data-dir)");
  }
}

// Every worker's shard must hold a batch (the trainer drops the last partial batch of an
// epoch, so a smaller shard has no step at all). Decidable here only for synthetic data,
// whose size is a flag, and only where this process starts the workers: a rank of a run
// started elsewhere does not know the world before it joins it.
void check_batch_fits_shards(const JobOptions& o) {
  const std::optional<int> workers = local_workers(o);
  if (o.data.dataset != "synthetic" || !workers) return;
  const std::int64_t smallest = o.data.synthetic_train / *workers;
  if (o.train.batch_size > smallest) {
    refuse("--batch-size", std::to_string(o.train.batch_size),
           "in [1, " + std::to_string(smallest) + "] (the smallest worker's shard: " +
               "--synthetic-train " + std::to_string(o.data.synthetic_train) + " over " +
               std::to_string(*workers) + " worker" + (*workers > 1 ? "s" : "") + ")");
  }
}

void check_run_length(const TrainConfig& t) {
  integer_at_least("--epochs", t.epochs, 1);
  integer_at_least("--steps", t.max_steps, 0);
  integer_at_least("--batch-size", t.batch_size, 1);
  integer_at_least("--dense-steps", t.dense_steps, 0);
  integer_at_least("--eval-every", t.eval_every, 0);
}

// Each optimizer's own flags, and what the other one's would silently not do.
void check_optimizer(const JobOptions& o) {
  const TrainConfig& t = o.train;
  number_at_least_zero("--weight-decay", t.sgd.weight_decay);
  if (t.optimizer == OptimizerKind::kSgd) {
    if (!(t.sgd.momentum >= 0.0 && t.sgd.momentum < 1.0)) {
      refuse("--momentum", number(t.sgd.momentum), "a number in [0, 1)");
    }
    if (t.sgd.nesterov && t.sgd.momentum == 0.0) {
      throw InvalidArgument("--nesterov needs --momentum > 0");
    }
    // AdamW's flags differ from their defaults only when given.
    const AdamWOptions defaults;
    if (t.adamw.beta1 != defaults.beta1 || t.adamw.beta2 != defaults.beta2 ||
        t.adamw.eps != defaults.eps) {
      throw InvalidArgument(
          "--adam-beta1, --adam-beta2 and --adam-eps apply to --optimizer "
          "adamw only (this run's is sgd)");
    }
    return;
  }
  // AdamW.
  if (o.momentum_given || t.sgd.nesterov) {
    throw InvalidArgument(std::string(o.momentum_given ? "--momentum" : "--nesterov") +
                          " applies to --optimizer sgd only (AdamW's moments are "
                          "--adam-beta1 and --adam-beta2)");
  }
  if (!(t.adamw.beta1 >= 0.0 && t.adamw.beta1 < 1.0)) {
    refuse("--adam-beta1", number(t.adamw.beta1), "a number in [0, 1)");
  }
  if (!(t.adamw.beta2 >= 0.0 && t.adamw.beta2 < 1.0)) {
    refuse("--adam-beta2", number(t.adamw.beta2), "a number in [0, 1)");
  }
  positive_number("--adam-eps", t.adamw.eps);
  number_at_least_zero("--weight-decay", t.adamw.weight_decay);
  if (o.topology == dist::Topology::kPsAsync) {
    throw InvalidArgument(
        "--optimizer adamw cannot run on --topology ps-async: its servers "
        "apply the updates with SGD (use allreduce or ps-sync)");
  }
}

// Under AdamW there is no SGD momentum for a compressor to keep: one that keeps it in its
// memory (efm, dgc, sketched-sgd, fetchsgd) is refused rather than run with a momentum
// nobody asked for; a bare biased codec gets plain error feedback (the method is parsed
// with momentum 0: MethodContext::momentum).
void check_compressor_under_adamw(const JobOptions& o) {
  if (o.train.optimizer != OptimizerKind::kAdamW) return;
  // Parsed as written (no momentum known): does the spec itself keep momentum?
  const Method as_written = Method::parse(
      o.compressor, {.reducer = o.reducer, .topology = o.topology, .downlink = o.downlink});
  if (as_written.momentum_in_memory()) {
    throw InvalidArgument("--compressor " + o.compressor +
                          " keeps SGD's momentum in its memory and cannot run under "
                          "--optimizer adamw (use --optimizer sgd, or plain error feedback, "
                          "e.g. ef(topk:ratio=0.01))");
  }
}

void check_lr_schedule(const TrainConfig& t) {
  positive_number("--lr", t.lr);
  integer_at_least("--warmup-steps", t.warmup_steps, 0);
  if (!std::is_sorted(t.milestone_epochs.begin(), t.milestone_epochs.end())) {
    std::string list;
    for (std::int64_t e : t.milestone_epochs) {
      if (!list.empty()) list += ',';
      list += std::to_string(e);
    }
    refuse("--milestones", list, "in increasing order");
  }
  positive_number("--gamma", t.gamma);
}

void check_layout(const TrainConfig& t) {
  number_at_least_zero("--bucket-mb", t.layout.bucket_mb);
  integer_at_least("--min-elements", t.layout.min_elements, 0);
  if (!(t.layout.dense_share >= 0.0 && t.layout.dense_share <= 1.0)) {
    refuse("--dense-share", number(t.layout.dense_share), "a number in [0, 1]");
  }
  if (t.min_group_mb) number_at_least_zero("--min-group-mb", *t.min_group_mb);
}

// --resume reads --checkpoint-dir; without one it would silently start afresh. A
// checkpoint of the other --optimizer is refused here, once, rather than by every worker
// as it loads its own (rank 0's file speaks for the run: every rank runs one optimizer).
void check_checkpoints(const TrainConfig& t) {
  if (t.resume && t.checkpoint_dir.empty()) {
    throw InvalidArgument("--resume needs --checkpoint-dir");
  }
  // Made here, before any worker starts (each would fail on it, in the library's words).
  if (!t.checkpoint_dir.empty()) {
    std::error_code error;
    std::filesystem::create_directories(t.checkpoint_dir, error);
    if (error || !std::filesystem::is_directory(t.checkpoint_dir)) {
      throw InvalidArgument("--checkpoint-dir: cannot make " + t.checkpoint_dir.string() +
                            " a directory (" +
                            (error ? error.message() : std::string("a file is there")) + ")");
    }
  }
  if (!t.resume) return;
  const std::filesystem::path file = rank_checkpoint_file(t.checkpoint_dir, 0);
  const std::optional<std::string> theirs = checkpoint_optimizer(file);
  if (theirs && *theirs != to_string(t.optimizer)) {
    throw InvalidArgument(optimizer_mismatch(file, *theirs, to_string(t.optimizer)));
  }
}

// rendezvous_from_env judges each value (an integer, in range, rank < world size) with
// its own messages. What the command line leaves to the environment gets a value that
// passes, so that only the flags are judged here; the environment is read where the
// process joins the run.
void check_rendezvous_flags(const dist::RendezvousFlags& given) {
  dist::RendezvousFlags f = given;
  if (!f.world_size) f.world_size = std::to_string(kMaxRanks);
  if (!f.rank) f.rank = "0";
  if (!f.master_addr) f.master_addr = "127.0.0.1";
  if (!f.master_port) f.master_port = "1";
  (void)dist::rendezvous_from_env(f, dist::Environment{});
}

// The parameter-server flags against the topology.
void check_topology_options(const JobOptions& o) {
  // -1 is the default: a value >= 0 was given, and only ps-async has a staleness bound.
  if (o.max_staleness >= 0 && o.topology != dist::Topology::kPsAsync) {
    throw InvalidArgument("--max-staleness applies to --topology ps-async only");
  }
  if (o.async_momentum_given && o.topology != dist::Topology::kPsAsync) {
    throw InvalidArgument("--async-momentum applies to --topology ps-async only");
  }
  if (!is_parameter_server(o)) return;
  if (o.reducer != dist::ReducerKind::kAuto) {
    throw InvalidArgument("--reducer applies to --topology allreduce only");
  }
  // What the compressor can run with (schemes, momentum in memories, the downlink) is
  // the Method's to judge (job_method).
}

// --sync-every and the flags that go with it. The outer loop's own rules (fragments divide
// H, delay below H / F, the outer spec) are dist::OuterLoop's; they are checked here by
// name so that the line names the flag.
void check_outer_loop(const JobOptions& o) {
  const dist::OuterLoopOptions& l = o.outer_loop;
  if (l.sync_every < 0) refuse("--sync-every", std::to_string(l.sync_every), "0 or more");
  if (!has_outer_loop(o)) {
    const dist::OuterLoopOptions unset;
    if (l.outer != unset.outer || l.fragments != unset.fragments || l.delay != unset.delay ||
        l.mix != unset.mix) {
      throw InvalidArgument("--outer, --fragments, --delay and --mix need --sync-every H > 0");
    }
    return;
  }
  (void)OuterOptimizer::parse(l.outer);
  if (l.fragments < 1 || l.sync_every % l.fragments != 0) {
    refuse("--fragments", std::to_string(l.fragments),
           "at least 1 and a divisor of --sync-every (" + std::to_string(l.sync_every) + ")");
  }
  const std::int64_t spacing = l.sync_every / l.fragments;
  if (l.delay < 0 || l.delay >= spacing) {
    refuse("--delay", std::to_string(l.delay),
           "in [0, --sync-every / --fragments = " + std::to_string(spacing) +
               "): one exchange in flight at a time");
  }
  if (!(l.mix >= 0.0 && l.mix < 1.0)) refuse("--mix", number(l.mix), "a number in [0, 1)");
  if (is_parameter_server(o)) {
    throw InvalidArgument("--sync-every runs on --topology allreduce only");
  }
  if (o.train.dense_steps > 0) {
    throw InvalidArgument("--dense-steps does not apply with --sync-every (no per-step exchange)");
  }
}

}  // namespace

Method validate_job_options(const JobOptions& o) {
  // Each flag's own range first, then what the flags must agree on.
  check_counts(o);
  check_model(o.train.model, o.data);
  check_data_source(o.data);
  check_run_length(o.train);
  check_optimizer(o);
  check_lr_schedule(o.train);
  check_layout(o.train);
  check_checkpoints(o.train);
  check_rendezvous_flags(o.rendezvous);
  check_batch_fits_shards(o);
  check_topology_options(o);
  check_compressor_under_adamw(o);
  check_outer_loop(o);
  // The outer loop's compressor works on pseudo-gradients: the inner optimizer's momentum
  // is not its own (a bare biased codec gets plain error feedback).
  if (has_outer_loop(o)) {
    Method method = dist::parse_outer_method(o.compressor, o.reducer);
    dist::OuterLoop::check(method, o.outer_loop);
    return method;
  }
  return Method::parse(o.compressor, {.reducer = o.reducer,
                                      .topology = o.topology,
                                      .downlink = o.downlink,
                                      .momentum = train_momentum(o.train),
                                      .nesterov = train_nesterov(o.train)});
}

}  // namespace gradcomp::train
