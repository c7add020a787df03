#include "train/evaluator.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "gradcomp/error.h"
#include "gradcomp/json.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

namespace gradcomp::train {

namespace {

using Clock = std::chrono::steady_clock;

std::vector<std::filesystem::path> checkpoints_in(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> files;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    // FILE.tmp is a checkpoint being written; only the renamed file is complete. Workers
    // write rank-R.ckpt; parameter servers' server-*.ckpt hold no model.
    if (e.is_regular_file(ec) && e.path().extension() == ".ckpt" &&
        e.path().filename().string().starts_with("rank-")) {
      files.push_back(e.path());
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

std::int64_t run_eval(const EvalOptions& o, std::ostream& out) {
  if (!o.follow && !std::filesystem::is_directory(o.checkpoint_dir)) {
    throw InvalidArgument("eval: --checkpoint-dir " + o.checkpoint_dir.string() +
                          " is not a directory");
  }
  if (o.poll_ms < 1 || o.idle_seconds < 0 || o.eval_batch < 1) {
    throw InvalidArgument("eval: --poll-ms and --eval-batch must be >= 1, --idle-seconds >= 0");
  }
  // One pass over a directory without a worker's checkpoint would print nothing and
  // succeed, which reads as "evaluated"; say so instead (--follow waits for them).
  if (!o.follow && checkpoints_in(o.checkpoint_dir).empty()) {
    throw InvalidArgument("eval: no checkpoint to evaluate in " + o.checkpoint_dir.string() +
                          " (no rank-*.ckpt file)");
  }
  set_threads(o.threads);
  const data::Dataset test = load_dataset(o.data, data::Split::kTest, o.seed);
  ModelConfig mc = o.model;
  mc.in_c = test.c;
  mc.in_h = test.h;
  mc.in_w = test.w;
  mc.num_classes = test.num_classes;
  const std::shared_ptr<Model> model = make_model(mc);

  std::ofstream file_out;
  if (!o.output.empty()) {
    file_out.open(o.output, std::ios::app);
    if (!file_out) throw InvalidArgument("eval: cannot open " + o.output.string());
  }
  std::ostream& lines = o.output.empty() ? out : file_out;

  std::map<std::filesystem::path, std::uint64_t> done;  // file -> step evaluated
  std::int64_t evaluated = 0;
  auto last_new = Clock::now();
  for (;;) {
    bool found = false;
    for (const auto& f : checkpoints_in(o.checkpoint_dir)) {
      const std::optional<std::uint64_t> peeked = checkpoint_step(f);
      // Unreadable: with --follow perhaps still being replaced (tried again on the next
      // pass); without, the load below throws the file's own error (train --resume
      // refuses the same file).
      if (!peeked && o.follow) continue;
      const auto it = done.find(f);
      if (peeked && it != done.end() && it->second == *peeked) continue;
      const auto t0 = Clock::now();
      CheckpointMeta meta;
      try {
        meta = load_model_from_checkpoint(f, *model);
      } catch (const InvalidArgument&) {
        // Replaced between the peek and the read? Retry once on the next pass; a
        // checkpoint of another model fails every time, so report it without follow.
        if (!o.follow) throw;
        continue;
      }
      // The synthetic set is drawn from the run's seed: another seed evaluates the model
      // on other data, silently (0.10 against 0.21 on a short run).
      if (o.data.dataset == "synthetic" && meta.seed != o.seed) {
        throw InvalidArgument("eval: " + f.filename().string() + " was trained with --seed " +
                              std::to_string(meta.seed) + "; --seed " + std::to_string(o.seed) +
                              " draws other synthetic data (give --seed " +
                              std::to_string(meta.seed) + ")");
      }
      const EvalResult r = evaluate_model(*model, test, o.eval_batch);
      done[f] = meta.step;
      found = true;
      ++evaluated;
      JsonObject j;
      j.add("type", "eval")
          .add("file", f.filename().string())
          .add("rank", static_cast<std::int64_t>(meta.rank))
          .add("world", static_cast<std::int64_t>(meta.world))
          .add("step", meta.step)
          .add("epoch", meta.epoch)
          .add("test_accuracy", r.accuracy)
          .add("test_loss", r.loss);
      if (model->language_model()) {
        // Per byte: the accuracy above is next-byte accuracy.
        j.add("figure", "perplexity")
            .add("test_perplexity", std::exp(r.loss))
            .add("test_bits_per_byte", r.loss / std::log(2.0));
      }
      j.add("eval_seconds", std::chrono::duration<double>(Clock::now() - t0).count());
      lines << j.str() << std::endl;
    }
    if (!o.follow) break;
    if (found) last_new = Clock::now();
    if (o.idle_seconds > 0 &&
        std::chrono::duration<double>(Clock::now() - last_new).count() >= o.idle_seconds) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(o.poll_ms));
  }
  return evaluated;
}

}  // namespace gradcomp::train
