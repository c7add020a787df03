// The report of a training run, text and JSON lines together: what the user reads on
// rank 0's standard output (notes and warnings, the header, one line per epoch, the final
// table) and what --metrics FILE.jsonl records (one object per epoch, a summary, the
// parameter server's staleness), written side by side from the same values. Only the
// process that reports a run writes it (rank 0 of the workers, or a single process);
// every other rank trains with a silent one.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <ostream>
#include <string>
#include <string_view>

#include "gradcomp/dist/ps.h"
#include "gradcomp/method.h"
#include "train/metrics.h"

namespace gradcomp::train {

// What the final table says about the run besides its measurements.
struct RunLabels {
  Topology topology = Topology::kAllreduce;
  int servers = 0;
  std::string model;
  std::string dataset;
  std::string compressor;
  // Text: the unigram baseline's cross-entropy in nats per byte on the test windows
  // (data::unigram_cross_entropy), printed beside the model's; 0: none.
  double unigram_nats = {};
};

// The start of the training loop, printed once.
struct RunHeader {
  std::string model;
  std::size_t tensors = 0;
  std::size_t buckets = 0;
  std::string reducer;
  int threads = 1;
  std::string blas;
  std::string isa;
  // A language model: the test figure is perplexity (exp of the mean cross-entropy per
  // token) and bits per byte, not accuracy; the epoch lines, the table and the JSON lines
  // ("figure": "perplexity") say so.
  bool language_model = {};
};

struct EpochRecord {
  std::int64_t epoch = 0;  // 1-based
  bool complete = true;    // false: the run stopped inside it (--steps)
  std::int64_t step = 0;
  double train_loss = 0;
  double train_accuracy = 0;
  double test_loss = 0;
  double test_accuracy = 0;
  double lr = 0;
  double bytes_sent_per_step = 0;
  double bytes_received_per_step = 0;
  double dense_bytes_per_step = 0;
  double elapsed_seconds = 0;
};

// A test-set evaluation inside an epoch or at its end (TrainConfig::eval_every).
struct EvalRecord {
  std::int64_t step = 0;
  double test_loss = 0;
  double test_accuracy = 0;
  std::uint64_t bytes_sent = 0;  // by this worker since the run (this process) started
  double train_seconds = 0;      // since the start, evaluations excluded
};

struct TrainSummary {
  std::int64_t steps = 0;   // global step at the end
  std::int64_t epochs = 0;  // completed epochs
  double test_accuracy = 0;
  double test_loss = 0;
  double train_loss = 0;  // mean over the last epoch's steps (this process)
  // Bytes this worker sent per step, averaged over the steps after the dense warm-up
  // (over all steps if the run never left it).
  double bytes_sent_per_worker_per_step = 0;
  double bytes_received_per_worker_per_step = 0;  // the same, downlink
  // A dense fp32 ring allreduce of the gradient (2(W-1)/W of it; W=1: the gradient).
  double dense_bytes_per_step = 0;
  double compression_ratio = 0;  // dense / sent
  // Steps after the dense warm-up, the first 2 steps of the process excluded.
  double step_ms_median = 0;
  // The mean over the same steps: what an outer loop's steps cost on average (its median
  // is a step without a round).
  double step_ms_mean = 0;
  double compute_seconds = 0;  // forward, backward, bucket copies, optimizer
  // On the exchange's thread, alongside backward when it overlaps (allreduce topology).
  double encode_seconds = 0;
  double comm_seconds = 0;
  double decode_seconds = 0;
  // What the step waited for the exchange after backward: the part not hidden.
  double exposed_seconds = 0;
  // Bucket-steps sent dense because the compressed message would have cost more bytes.
  std::uint64_t dense_fallbacks = 0;
  double elapsed_seconds = 0;
  std::string blas;
  std::string reducer;
  std::string model;
  int threads = 1;
  int rank = 0;
  int world = 1;  // workers
};

struct ParameterServerRecord {
  Topology topology = Topology::kPsSync;
  int servers = 0;
  int workers = 0;
  Downlink downlink = Downlink::kDense;
  int max_staleness = -1;
  dist::AsyncMomentum async_momentum = dist::AsyncMomentum::kCompensate;
  dist::AsyncServerOptimizer server_optimizer;  // async: what the servers applied
  dist::StalenessHistogram staleness;  // pushes per staleness, every server; empty for ps-sync
};

class Report {
 public:
  // Silent: writes nothing (ranks other than the reporting one; tests).
  Report() = default;
  // Reports on `out`; the launcher's failures go to `err`. JSON lines go to
  // `metrics_file` once begin() opened it (empty: none).
  Report(std::ostream& out, std::ostream& err, std::filesystem::path metrics_file = {});
  Report(Report&&) noexcept;
  Report& operator=(Report&&) noexcept;
  ~Report();

  bool silent() const { return out_ == nullptr; }
  void set_metrics_file(std::filesystem::path file) { metrics_file_ = std::move(file); }
  void set_labels(RunLabels labels) { labels_ = std::move(labels); }

  // One line of text: a note, a warning, the compressor's schedule.
  void line(std::string_view text);
  // A failure the process reports itself (the local launcher's failed worker).
  void failure(std::string_view text);

  // The training loop starts: opens the metrics file (appended to when the run resumed
  // from a checkpoint: it continues the run that wrote it) and prints the header.
  void begin(const RunHeader& header, bool resumed);
  void epoch(const EpochRecord& e);
  void evaluation(const EvalRecord& e);
  // The summary line and the final table. The run has ended: the metrics file takes this
  // run's lines (until then they are in FILE.partial, MetricsWriter::commit; a run that
  // fails never gets here and leaves the file as it was).
  void summary(const TrainSummary& s);
  void parameter_server(const ParameterServerRecord& ps);

 private:
  void lm_epoch_line(const EpochRecord& e);

  std::ostream* out_ = nullptr;
  std::ostream* err_ = nullptr;
  std::filesystem::path metrics_file_;
  std::unique_ptr<MetricsWriter> metrics_;
  RunLabels labels_;
  bool language_model_ = false;
};

// "1.23 MB", "4.5 kB", "12 B".
std::string format_bytes(double bytes);

}  // namespace gradcomp::train
