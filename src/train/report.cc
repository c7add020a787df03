#include "train/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

#include "gradcomp/json.h"

namespace gradcomp::train {

namespace {

std::string number(const char* format, double v) {
  char b[64];
  std::snprintf(b, sizeof b, format, v);
  return b;
}

// A language model's figures, from its mean cross-entropy in nats per token (byte).
void add_lm_figures(JsonObject& j, double test_nats, double unigram_nats) {
  j.add("figure", "perplexity")
      .add("test_perplexity", std::exp(test_nats))
      .add("test_bits_per_byte", test_nats / std::log(2.0));
  if (unigram_nats > 0.0) {
    j.add("unigram_perplexity", std::exp(unigram_nats))
        .add("unigram_bits_per_byte", unigram_nats / std::log(2.0));
  }
}

}  // namespace

std::string format_bytes(double b) {
  char buf[32];
  if (b >= 1e6) {
    std::snprintf(buf, sizeof(buf), "%.2f MB", b / 1e6);
  } else if (b >= 1e3) {
    std::snprintf(buf, sizeof(buf), "%.1f kB", b / 1e3);
  } else {
    std::snprintf(buf, sizeof(buf), "%.0f B", b);
  }
  return buf;
}

Report::Report(std::ostream& out, std::ostream& err, std::filesystem::path metrics_file)
    : out_(&out), err_(&err), metrics_file_(std::move(metrics_file)) {}
Report::Report(Report&&) noexcept = default;
Report& Report::operator=(Report&&) noexcept = default;
Report::~Report() = default;

void Report::line(std::string_view text) {
  if (out_ != nullptr) *out_ << text << std::endl;  // a note is seen when it happens
}

void Report::failure(std::string_view text) {
  if (err_ != nullptr) *err_ << text << std::endl;
}

void Report::begin(const RunHeader& h, bool resumed) {
  if (!metrics_file_.empty()) metrics_ = std::make_unique<MetricsWriter>(metrics_file_, resumed);
  language_model_ = h.language_model;
  if (out_ == nullptr) return;
  *out_ << "model " << h.model << " (" << h.tensors << " tensors), " << h.buckets
        << " buckets, reducer " << h.reducer << ", " << h.threads << " thread(s), BLAS " << h.blas
        << "\n";
  *out_ << "ISA: " << h.isa << "\n";
}

void Report::epoch(const EpochRecord& e) {
  if (out_ != nullptr) {
    if (language_model_) {
      lm_epoch_line(e);
    } else {
      char line[320];
      std::snprintf(line, sizeof(line),
                    "epoch %lld%s step %lld  loss %.4f  train acc %.4f  test loss %.4f  test acc "
                    "%.4f  lr %.4g  sent/step %s (dense %s)  %.1f s",
                    static_cast<long long>(e.epoch), e.complete ? "" : " (partial)",
                    static_cast<long long>(e.step), e.train_loss, e.train_accuracy, e.test_loss,
                    e.test_accuracy, e.lr, format_bytes(e.bytes_sent_per_step).c_str(),
                    format_bytes(e.dense_bytes_per_step).c_str(), e.elapsed_seconds);
      *out_ << line << std::endl;
    }
  }
  if (!metrics_) return;
  JsonObject j;
  j.add("type", "epoch")
      .add("epoch", e.epoch)
      .add("complete", e.complete)
      .add("step", e.step)
      .add("train_loss", e.train_loss)
      .add("train_accuracy", e.train_accuracy)
      .add("test_loss", e.test_loss)
      .add("test_accuracy", e.test_accuracy);
  if (language_model_) {
    add_lm_figures(j, e.test_loss, labels_.unigram_nats);
    j.add("train_perplexity", std::exp(e.train_loss));
  }
  j.add("lr", e.lr)
      .add("bytes_sent_per_worker_per_step", e.bytes_sent_per_step)
      .add("bytes_received_per_worker_per_step", e.bytes_received_per_step)
      .add("elapsed_seconds", e.elapsed_seconds);
  metrics_->write(j);
}

void Report::evaluation(const EvalRecord& e) {
  if (out_ != nullptr) {
    char line[240];
    if (language_model_) {
      std::snprintf(line, sizeof(line),
                    "  step %lld  test loss %.4f  test ppl %.3f  sent %s  %.1f s",
                    static_cast<long long>(e.step), e.test_loss, std::exp(e.test_loss),
                    format_bytes(static_cast<double>(e.bytes_sent)).c_str(), e.train_seconds);
    } else {
      std::snprintf(line, sizeof(line),
                    "  step %lld  test loss %.4f  test acc %.4f  sent %s  %.1f s",
                    static_cast<long long>(e.step), e.test_loss, e.test_accuracy,
                    format_bytes(static_cast<double>(e.bytes_sent)).c_str(), e.train_seconds);
    }
    *out_ << line << std::endl;
  }
  if (!metrics_) return;
  JsonObject j;
  j.add("type", "eval")
      .add("step", e.step)
      .add("test_loss", e.test_loss)
      .add("test_accuracy", e.test_accuracy);
  if (language_model_) add_lm_figures(j, e.test_loss, labels_.unigram_nats);
  j.add("bytes_sent", static_cast<double>(e.bytes_sent)).add("train_seconds", e.train_seconds);
  metrics_->write(j);
}

// A language model's epoch line: perplexity and bits per byte where a classifier's line
// has accuracy (the accuracy kept is next-byte accuracy).
void Report::lm_epoch_line(const EpochRecord& e) {
  char line[360];
  std::snprintf(line, sizeof(line),
                "epoch %lld%s step %lld  loss %.4f  train ppl %.3f  test loss %.4f  test ppl "
                "%.3f  test bits/byte %.4f  next-byte acc %.4f  lr %.4g  sent/step %s (dense "
                "%s)  %.1f s",
                static_cast<long long>(e.epoch), e.complete ? "" : " (partial)",
                static_cast<long long>(e.step), e.train_loss, std::exp(e.train_loss), e.test_loss,
                std::exp(e.test_loss), e.test_loss / std::log(2.0), e.test_accuracy, e.lr,
                format_bytes(e.bytes_sent_per_step).c_str(),
                format_bytes(e.dense_bytes_per_step).c_str(), e.elapsed_seconds);
  *out_ << line << std::endl;
}

void Report::summary(const TrainSummary& s) {
  if (metrics_) {
    JsonObject j;
    j.add("type", "summary")
        .add("model", s.model)
        .add("reducer", s.reducer)
        .add("steps", s.steps)
        .add("epochs", s.epochs)
        .add("test_accuracy", s.test_accuracy)
        .add("test_loss", s.test_loss)
        .add("train_loss", s.train_loss);
    if (language_model_) add_lm_figures(j, s.test_loss, labels_.unigram_nats);
    j.add("bytes_sent_per_worker_per_step", s.bytes_sent_per_worker_per_step)
        .add("bytes_received_per_worker_per_step", s.bytes_received_per_worker_per_step)
        .add("dense_bytes_per_step", s.dense_bytes_per_step)
        .add("compression_ratio", s.compression_ratio)
        .add("step_ms_median", s.step_ms_median)
        .add("step_ms_mean", s.step_ms_mean)
        .add("compute_seconds", s.compute_seconds)
        .add("encode_seconds", s.encode_seconds)
        .add("comm_seconds", s.comm_seconds)
        .add("decode_seconds", s.decode_seconds)
        .add("exposed_seconds", s.exposed_seconds)
        .add("dense_fallbacks", s.dense_fallbacks)
        .add("elapsed_seconds", s.elapsed_seconds)
        .add("threads", s.threads)
        .add("rank", s.rank)
        .add("world", s.world)
        .add("blas", s.blas);
    metrics_->write(j);
    metrics_->commit();
  }
  if (out_ == nullptr) return;
  std::ostream& out = *out_;
  char line[256];
  auto row = [&](const char* key, const std::string& value) {
    std::snprintf(line, sizeof line, "  %-26s %s\n", key, value.c_str());
    out << line;
  };
  const RunLabels& l = labels_;
  out << "\n== gradcomp train report ==\n";
  row("workers", std::to_string(s.world));
  if (l.topology != Topology::kAllreduce) {
    row("topology", std::string(to_string(l.topology)) + ", " + std::to_string(l.servers) +
                        " server" + (l.servers > 1 ? "s" : ""));
  }
  row("model / data", l.model + " / " + l.dataset);
  row("compressor", l.compressor);
  row("reducer", s.reducer);
  row("steps (epochs)", std::to_string(s.steps) + " (" + std::to_string(s.epochs) + ")");
  if (language_model_) {
    row("test perplexity", number("%.3f", std::exp(s.test_loss)) +
                               number(" (%.4f bits per byte)", s.test_loss / std::log(2.0)));
    if (l.unigram_nats > 0.0) {
      row("unigram baseline", number("%.3f", std::exp(l.unigram_nats)) +
                                  number(" (%.4f bits per byte)", l.unigram_nats / std::log(2.0)));
    }
    row("next-byte accuracy", number("%.4f", s.test_accuracy));
  } else {
    row("test accuracy", number("%.4f", s.test_accuracy));
  }
  row("test loss", number("%.4f", s.test_loss));
  if (s.world == 1 && l.topology == Topology::kAllreduce) {
    // A world of one has no peers: nothing goes on a wire, and a ratio against zero bytes
    // ("0 B", "0.0x") would read as a failure of the compressor.
    row("sent per worker per step", "nothing (a single worker has no peers)");
    row("compression ratio", "- (nothing is sent)");
  } else {
    row("sent per worker per step", format_bytes(s.bytes_sent_per_worker_per_step));
    row("received per worker/step", format_bytes(s.bytes_received_per_worker_per_step));
    row("dense allreduce per step", format_bytes(s.dense_bytes_per_step));
    row("compression ratio", s.compression_ratio > 0.0 ? number("%.1fx", s.compression_ratio)
                                                       : std::string("- (nothing was sent)"));
  }
  row("step time (median)", number("%.1f ms", s.step_ms_median));
  row("step time (mean)", number("%.1f ms", s.step_ms_mean));
  row("time: compute", number("%.2f s", s.compute_seconds));
  row("time: encode", number("%.2f s", s.encode_seconds));
  row("time: communicate", number("%.2f s", s.comm_seconds));
  row("time: decode", number("%.2f s", s.decode_seconds));
  // The exchange runs on a thread of its own: with the allreduce topology it overlaps
  // backward, and only what the step waited for after backward costs time.
  const double exchange = s.encode_seconds + s.comm_seconds + s.decode_seconds;
  std::string exposed = number("%.2f s", s.exposed_seconds);
  if (exchange > 0.0) {
    const double hidden = std::clamp(1.0 - s.exposed_seconds / exchange, 0.0, 1.0);
    exposed += number(" (%.0f%% of the exchange hidden behind compute)", 100.0 * hidden);
  }
  row("time: waited for exchange", exposed);
  if (s.dense_fallbacks > 0) {
    row("sent dense instead", std::to_string(s.dense_fallbacks) +
                                  " bucket-steps (their messages would have cost more bytes)");
  }
  row("elapsed", number("%.1f s", s.elapsed_seconds));
  row("BLAS", s.blas);
}

void Report::parameter_server(const ParameterServerRecord& ps) {
  JsonObject h;
  std::uint64_t pushes = 0, sum = 0, max = 0;
  for (const auto& [s, n] : ps.staleness) {
    h.add(std::to_string(s), n);
    pushes += n;
    sum += s * n;
    max = std::max(max, s);
  }
  if (out_ != nullptr && ps.topology == Topology::kPsAsync && pushes > 0) {
    char line[160];
    std::snprintf(line, sizeof line, "  %-26s mean %.2f, max %llu updates (%llu pushes)\n",
                  "staleness", static_cast<double>(sum) / static_cast<double>(pushes),
                  static_cast<unsigned long long>(max), static_cast<unsigned long long>(pushes));
    *out_ << line;
  }
  if (!metrics_) return;
  JsonObject j;
  j.add("type", "ps")
      .add("topology", to_string(ps.topology))
      .add("servers", ps.servers)
      .add("workers", ps.workers)
      .add("downlink", to_string(ps.downlink))
      .add("max_staleness", ps.max_staleness);
  if (ps.topology == Topology::kPsAsync) {
    j.add("async_momentum", to_string(ps.async_momentum))
        .add("server_momentum", ps.server_optimizer.momentum)
        .add("server_lr_scale", ps.server_optimizer.lr_scale);
  }
  j
      // {"staleness": pushes, ...} over every push to every server (async; empty for sync).
      .add("staleness_histogram", h)
      .add("staleness_mean",
           pushes > 0 ? static_cast<double>(sum) / static_cast<double>(pushes) : 0.0)
      .add("staleness_max", max);
  metrics_->write(j);
}

}  // namespace gradcomp::train
