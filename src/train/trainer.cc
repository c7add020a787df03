#include "train/trainer.h"

#include <dlfcn.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <numeric>
#include <optional>
#include <set>

#include <ATen/Version.h>

#include "gradcomp/cpu.h"
#include "gradcomp/error.h"
#include "train/blas_core_env.h"

namespace gradcomp::train {

namespace {

using Clock = std::chrono::steady_clock;
double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Step times of the first steps of a process include page faults and lazy setup.
constexpr std::int64_t kColdSteps = 2;

}  // namespace

void set_threads(int threads, int blas_threads) {
  if (threads < 1 || threads > kMaxThreads || blas_threads < 0 || blas_threads > kMaxThreads) {
    throw InvalidArgument("threads: " + std::to_string(threads) + " must be in [1, " +
                          std::to_string(kMaxThreads) + "], blas threads " +
                          std::to_string(blas_threads) + " in [0, " + std::to_string(kMaxThreads) +
                          "]");
  }
  at::set_num_threads(threads);
  using SetThreads = void (*)(int);
  if (auto* f = reinterpret_cast<SetThreads>(::dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) {
    f(blas_threads == 0 ? threads : blas_threads);
  }
}

namespace {

// torch's build setting BLAS_INFO (at::show_config()): "mkl" in the pip wheels, which link
// MKL into libtorch_cpu where /proc/self/maps does not show it; "generic" (the system's
// libblas, OpenBLAS on Debian) in Debian's torch. Empty if the setting is not there.
std::string torch_blas_info() {
  const std::string config = at::show_config();
  const std::string key = "BLAS_INFO=";
  const std::size_t at = config.find(key);
  if (at == std::string::npos) return "";
  const std::size_t from = at + key.size();
  return config.substr(from, config.find_first_of(", \n", from) - from);
}

}  // namespace

std::string describe_blas() {
  // MKL inside torch does the models' matrix products; a mapped OpenBLAS is then the
  // LAPACK of gradcomp's own SVD (ATOMO).
  const std::string torch_blas = torch_blas_info();
  const std::string torch_mkl = "MKL, inside torch (BLAS_INFO=mkl)";
  {
    // Make sure the BLAS is loaded and initialised.
    torch::NoGradGuard no_grad;
    const torch::Tensor a = torch::ones({64, 64});
    (void)torch::mm(a, a);
  }
  std::set<std::string> libs;
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    const std::size_t slash = line.find('/');
    if (slash == std::string::npos) continue;
    const std::string path = line.substr(slash);
    const std::string base = path.substr(path.rfind('/') + 1);
    // A CUDA build of torch maps cuBLAS too: the GPU's BLAS, not the CPU's.
    if (base.starts_with("libcublas")) continue;
    for (const char* key : {"blas", "mkl", "blis", "atlas"}) {
      if (base.find(key) != std::string::npos) libs.insert(path);
    }
  }
  std::string where;
  for (const std::string& l : libs) where += (where.empty() ? "" : ", ") + l;
  using GetConfig = char* (*)();
  if (auto* f = reinterpret_cast<GetConfig>(::dlsym(RTLD_DEFAULT, "openblas_get_config"))) {
    std::string cfg = f();
    while (!cfg.empty() && cfg.back() == ' ') cfg.pop_back();
    std::string core;
    if (const char* c = std::getenv("OPENBLAS_CORETYPE")) {
      core = std::string(" [OPENBLAS_CORETYPE=") + c;
      if (std::getenv(kBlasCoreSetByGradcomp) != nullptr) {
        core += ", set by gradcomp: OpenBLAS fell back to its generic Prescott kernels here";
      }
      core += "]";
    }
    const std::string openblas = cfg + " (" + where + ")" + core;
    return torch_blas == "mkl" ? torch_mkl + "; gradcomp's LAPACK: " + openblas : openblas;
  }
  if (torch_blas == "mkl") return libs.empty() ? torch_mkl : torch_mkl + "; also mapped: " + where;
  if (libs.empty()) return "unknown (no BLAS library mapped)";
  return where;
}

Trainer::Trainer(TrainConfig config, data::Dataset train, data::Dataset test,
                 const SyncFactory& make_sync)
    : config_(std::move(config)), train_(std::move(train)), test_(std::move(test)) {
  const std::int64_t shard_samples =
      config_.smallest_shard > 0 ? std::min(config_.smallest_shard, train_.n) : train_.n;
  if (config_.batch_size < 1 || config_.batch_size > shard_samples) {
    throw InvalidArgument("trainer: batch size " + std::to_string(config_.batch_size) +
                          " must be in [1, " + std::to_string(shard_samples) +
                          "] (samples in the smallest shard)");
  }
  if (config_.epochs < 1) throw InvalidArgument("trainer: epochs must be >= 1");
  if (config_.max_steps < 0 || config_.dense_steps < 0 || config_.eval_batch < 1) {
    throw InvalidArgument("trainer: steps, dense steps must be >= 0 and eval batch >= 1");
  }
  if (test_.c != train_.c || test_.h != train_.h || test_.w != train_.w ||
      test_.num_classes != train_.num_classes) {
    throw InvalidArgument("trainer: test set " + test_.name + " has a different shape than " +
                          train_.name);
  }
  set_threads(config_.threads, config_.blas_threads);
  config_.model.in_c = train_.c;
  config_.model.in_h = train_.h;
  config_.model.in_w = train_.w;
  config_.model.num_classes = train_.num_classes;
  config_.model.seed = config_.seed;
  model_ = make_model(config_.model);
  params_ = model_->parameters();
  optimizer_ = make_optimizer(config_.optimizer, params_, config_.sgd, config_.adamw);

  steps_per_epoch_ = shard_samples / config_.batch_size;
  LrScheduleOptions lr;
  lr.base_lr = config_.lr;
  // A warm-up longer than the run (tiny test runs with the default warm-up) is cut to
  // half the run, so a cosine decay still has steps to run over.
  lr.warmup_steps = std::min(config_.warmup_steps, config_.epochs * steps_per_epoch_ / 2);
  lr.decay = config_.decay;
  lr.gamma = config_.gamma;
  for (std::int64_t e : config_.milestone_epochs) lr.milestones.push_back(e * steps_per_epoch_);
  lr.total_steps = config_.epochs * steps_per_epoch_;
  schedule_ = std::make_unique<LrSchedule>(lr);

  sync_ = make_sync(SyncSetup{model_->named_parameters(), config_, steps_per_epoch_});
  if (!sync_) throw InvalidArgument("trainer: the gradient sync factory returned nothing");
  if (sync_->momentum_in_memory()) {
    // The compressor's memories apply momentum to compressed buckets (DGC's momentum
    // correction); applying it again in the optimizer would square it.
    for (const BucketPlan& b : sync_->buckets()) {
      if (!b.compressible) continue;
      for (const BucketPlan::Slot& slot : b.slots) {
        optimizer_->set_skip_momentum(slot.param, true);
        memory_momentum_params_.push_back(slot.param);
      }
    }
  }

  batch_x_ = torch::empty({config_.batch_size, train_.c, train_.h, train_.w}, torch::kFloat);
  batch_y_ = torch::empty({config_.batch_size}, torch::kLong);
}

void Trainer::fill_batch(std::int64_t index_in_epoch) {
  const std::uint64_t epoch = epoch_of(step_);
  if (epoch != order_epoch_) {
    order_ = data::epoch_order(train_.n, config_.seed, epoch);
    order_epoch_ = epoch;
  }
  const std::size_t sample = train_.sample_elements();
  float* x = batch_x_.data_ptr<float>();
  std::int64_t* y = batch_y_.data_ptr<std::int64_t>();
  const std::int64_t first = index_in_epoch * config_.batch_size;
  for (std::int64_t i = 0; i < config_.batch_size; ++i) {
    const std::int64_t s = order_[static_cast<std::size_t>(first + i)];
    std::memcpy(x + static_cast<std::size_t>(i) * sample,
                train_.images.data() + static_cast<std::size_t>(s) * sample,
                sample * sizeof(float));
    y[i] = train_.labels[static_cast<std::size_t>(s)];
  }
}

double Trainer::train_step() {
  const auto t0 = Clock::now();
  fill_batch(step_ % steps_per_epoch_);
  model_->train();
  for (torch::Tensor& p : params_) {
    // Dropping the gradient lets autograd hand its fresh result over instead of adding
    // it into a zeroed buffer.
    p.mutable_grad().reset();
  }
  const bool compress = step_ >= config_.dense_steps;
  // Dense steps (--dense-steps) bypass the memories, so the optimizer keeps the momentum
  // of those parameters until compression starts (its buffer is then dropped).
  for (const std::size_t p : memory_momentum_params_) {
    if (optimizer_->skip_momentum(p) != compress) optimizer_->set_skip_momentum(p, compress);
  }
  sync_->begin_step({step_, static_cast<float>(schedule_->lr(step_)), compress});
  const torch::Tensor logits = model_->forward(batch_x_);
  // A classifier's targets are the labels; a language model's the batch's next tokens.
  const torch::Tensor targets = model_->targets(batch_x_, batch_y_);
  const torch::Tensor loss = at::cross_entropy_loss(logits, targets);
  const double loss_value = loss.item<double>();
  // A diverged run stops here, before backward hands its gradient to the exchange: a
  // dense sum would silently turn every replica into NaN, a selecting codec would fail
  // on a non-finite input with a less telling message.
  if (!std::isfinite(loss_value)) {
    const char* value = std::isnan(loss_value) ? "nan" : loss_value > 0 ? "inf" : "-inf";
    throw Error("step " + std::to_string(step_) + ": the training loss is " + value +
                " (the run diverged; a lower --lr or --warmup-steps may help)");
  }
  {
    torch::NoGradGuard no_grad;
    epoch_correct_ += logits.argmax(1).eq(targets).sum().item<std::int64_t>();
  }
  try {
    // The exchange of each bucket starts inside backward, as its gradients are complete
    // (allreduce topology); finish_step() waits for the rest and writes the means.
    loss.backward();
    sync_->finish_step();
  } catch (const gradcomp::NonFiniteGradient& e) {
    // A finite loss can still have a non-finite gradient (an overflow in backward): the
    // exchange stopped it before a codec or a peer saw it.
    throw Error("step " + std::to_string(step_) + ", rank " + std::to_string(config_.rank) +
                ": the gradient of " + e.parameter() + " is " +
                (std::isnan(e.value()) ? "nan"
                 : e.value() > 0       ? "inf"
                                       : "-inf") +
                " at element " + std::to_string(e.element()) + " while the loss is finite (" +
                std::to_string(loss_value) + "); a lower --lr or --warmup-steps may help");
  }
  // The asynchronous parameter server's servers apply the update: the worker got their
  // latest weights instead of a mean gradient.
  if (!sync_->owns_weights()) optimizer_->step(schedule_->lr(step_));
  (void)sync_->after_optimizer_step(step_ + 1);
  for (const std::string& w : sync_->take_warnings()) report().line(w);
  const double step_seconds = seconds(t0, Clock::now());

  const ExchangeStats s = sync_->take_stats();
  compute_seconds_ += step_seconds - s.exposed_seconds;
  exposed_seconds_ += s.exposed_seconds;
  totals_.add_costs(s.reduce);
  totals_.steps += s.reduce.steps;
  if (compress) {
    ++compressed_steps_;
    compressed_bytes_ += s.reduce.bytes_sent;
    compressed_bytes_received_ += s.reduce.bytes_received;
    if (steps_this_process_ >= kColdSteps) step_ms_.push_back(step_seconds * 1e3);
  }
  ++steps_this_process_;
  ++step_;
  epoch_loss_sum_ += loss_value;
  epoch_seen_ += targets.numel();  // predictions: batch_size, or tokens of a language model
  ++epoch_steps_;
  return loss_value;
}

EvalResult evaluate_model(Model& model, const data::Dataset& test, std::int64_t eval_batch) {
  torch::NoGradGuard no_grad;
  model.eval();
  double loss_sum = 0;
  std::int64_t correct = 0;
  std::int64_t predictions = 0;  // test.n, or the tokens a language model predicts
  const std::size_t sample = test.sample_elements();
  for (std::int64_t begin = 0; begin < test.n; begin += eval_batch) {
    const std::int64_t n = std::min(eval_batch, test.n - begin);
    // Views of the test arrays: no copy (the model does not write its input).
    const torch::Tensor x = torch::from_blob(
        const_cast<float*>(test.images.data()) + static_cast<std::size_t>(begin) * sample,
        {n, test.c, test.h, test.w}, torch::kFloat);
    const torch::Tensor y =
        torch::from_blob(const_cast<std::int64_t*>(test.labels.data()) + begin, {n}, torch::kLong);
    const torch::Tensor logits = model.forward(x);
    const torch::Tensor t = model.targets(x, y);
    loss_sum += at::cross_entropy_loss(logits, t, {}, at::Reduction::Sum).item<double>();
    correct += logits.argmax(1).eq(t).sum().item<std::int64_t>();
    predictions += t.numel();
  }
  model.train();
  const double n = static_cast<double>(std::max<std::int64_t>(predictions, 1));
  return {loss_sum / n, static_cast<double>(correct) / n};
}

void Trainer::warn_if_diverging(std::int64_t epoch, double train_loss) {
  if (warned_diverging_ || report().silent()) return;
  const double guessing =
      std::log(static_cast<double>(std::max<std::int64_t>(train_.num_classes, 2)));
  if (!(train_loss > 2.0 * guessing)) return;
  warned_diverging_ = true;
  char line[320];
  std::snprintf(line, sizeof(line),
                "warning: epoch %lld's training loss %.4g is above twice what guessing scores "
                "(2 ln %lld = %.2f): the run is diverging; a lower --lr, or a compressor that "
                "keeps more of the gradient, may help",
                static_cast<long long>(epoch), train_loss,
                static_cast<long long>(train_.num_classes), 2.0 * guessing);
  report().line(line);
}

EvalResult Trainer::evaluate() { return evaluate_model(*model_, test_, config_.eval_batch); }

std::filesystem::path Trainer::checkpoint_file() const {
  return rank_checkpoint_file(config_.checkpoint_dir, config_.rank);
}

void Trainer::save_checkpoint(const std::filesystem::path& file) {
  CheckpointMeta meta;
  meta.step = static_cast<std::uint64_t>(step_);
  meta.epoch = epoch_of(step_);
  meta.seed = config_.seed;
  meta.rank = static_cast<std::uint32_t>(config_.rank);
  meta.world = static_cast<std::uint32_t>(config_.world);
  const std::vector<StateBuffer> state = sync_->state();
  // The previous checkpoint stays as FILE.prev: ranks killed while some had written this
  // one and others had not can still resume together from the one before. (A run that
  // resumed from an older step rewrites a step it already had: that file is replaced.)
  // The rotation happens only once the new file is written: a failed save changes nothing.
  const std::optional<std::uint64_t> existing = checkpoint_step(file);
  const bool rotate = existing && *existing < meta.step;
  train::save_checkpoint(file, meta, *model_, *optimizer_, state,
                         rotate ? previous_checkpoint_file(file) : std::filesystem::path{});
}

void Trainer::load_checkpoint(const std::filesystem::path& file) {
  // Check the run identity before restoring anything: read_checkpoint validates the
  // arrays before it copies, but seed/rank/world are only known after.
  const std::vector<StateBuffer> state = sync_->state();
  std::vector<ArrayView> arrays = training_arrays(*model_, *optimizer_, state);
  // Stage into copies so that a wrong seed/rank/world leaves the trainer untouched.
  std::vector<std::vector<std::byte>> staging(arrays.size());
  std::vector<ArrayView> staged = arrays;
  for (std::size_t i = 0; i < arrays.size(); ++i) {
    staging[i].resize(arrays[i].count * (arrays[i].type == ArrayType::kInt64 ? 8 : 4));
    staged[i].data = staging[i].data();
  }
  const CheckpointMeta meta = read_checkpoint(file, staged);
  if (meta.seed != config_.seed || meta.rank != static_cast<std::uint32_t>(config_.rank) ||
      meta.world != static_cast<std::uint32_t>(config_.world)) {
    throw InvalidArgument("checkpoint " + file.string() + ": written by seed " +
                          std::to_string(meta.seed) + " rank " + std::to_string(meta.rank) + "/" +
                          std::to_string(meta.world) + ", this run is seed " +
                          std::to_string(config_.seed) + " rank " + std::to_string(config_.rank) +
                          "/" + std::to_string(config_.world));
  }
  torch::NoGradGuard no_grad;
  for (std::size_t i = 0; i < arrays.size(); ++i) {
    if (!staging[i].empty()) std::memcpy(arrays[i].data, staging[i].data(), staging[i].size());
  }
  step_ = static_cast<std::int64_t>(meta.step);
  sync_->resume_at(step_);
}

TrainSummary Trainer::run() {
  const auto start = Clock::now();
  if (config_.resume && !config_.checkpoint_dir.empty()) {
    const std::filesystem::path from =
        config_.resume_file.empty() ? checkpoint_file() : config_.resume_file;
    if (std::filesystem::exists(from)) {
      load_checkpoint(from);
      report().line("resumed from " + from.string() + " at step " + std::to_string(step_));
    } else {
      report().line("no checkpoint at " + checkpoint_file().string() + ", starting from scratch");
    }
  }
  if (!config_.checkpoint_dir.empty()) std::filesystem::create_directories(config_.checkpoint_dir);
  const std::string blas = describe_blas();
  // A resumed run's metrics continue those of the run it resumes.
  report().begin({.model = config_.model.name,
                  .tensors = params_.size(),
                  .buckets = sync_->buckets().size(),
                  .reducer = sync_->describe(),
                  .threads = config_.threads,
                  .blas = blas,
                  .isa = isa_summary(),
                  .language_model = model_->language_model()},
                 config_.resume && step_ > 0);
  for (const std::string& w : sync_->take_warnings()) report().line(w);
  const int blas_threads = config_.blas_threads == 0 ? config_.threads : config_.blas_threads;
  if (config_.threads > 1 && blas_threads > 1 && blas.starts_with("OpenBLAS") &&
      std::getenv("OMP_WAIT_POLICY") == nullptr) {
    report().line("note: OpenMP and OpenBLAS both run " + std::to_string(blas_threads) +
                  " threads; libgomp's spinning workers slow OpenBLAS down (measured 5x here): "
                  "set OMP_WAIT_POLICY=passive or use one BLAS thread");
  }

  const std::int64_t end_step = config_.epochs * steps_per_epoch_;
  const std::int64_t stop =
      config_.max_steps > 0 ? std::min(config_.max_steps, end_step) : end_step;
  // What a dense fp32 exchange of the whole gradient costs this worker, counted the way
  // gradcomp_dist counts every collective (the bytes Gloo's ring allreduce sends:
  // 2(W-1)/W of the buffer), so compression_ratio compares like with like. A single
  // process has no wire: its reference is the gradient itself.
  std::size_t gradient_elements = 0;
  for (const BucketPlan& b : sync_->buckets()) gradient_elements += b.numel;
  const double gradient_bytes = static_cast<double>(gradient_elements * sizeof(float));
  const double world = static_cast<double>(config_.world);
  const double dense_bytes =
      config_.world > 1 ? 2.0 * (world - 1.0) / world * gradient_bytes : gradient_bytes;
  EvalResult last_eval{};
  bool evaluated_at_stop = false;
  std::int64_t completed_epochs = step_ / steps_per_epoch_;
  while (step_ < stop) {
    epoch_loss_sum_ = 0;
    epoch_correct_ = 0;
    epoch_seen_ = 0;
    epoch_steps_ = 0;
    const std::int64_t epoch = step_ / steps_per_epoch_;
    const std::uint64_t bytes_before = totals_.bytes_sent;
    const std::uint64_t received_before = totals_.bytes_received;
    const std::int64_t epoch_end = std::min((epoch + 1) * steps_per_epoch_, stop);
    while (step_ < epoch_end) {
      train_step();
      if (config_.eval_every > 0 && step_ % config_.eval_every == 0 && step_ < epoch_end) {
        const auto t_eval = Clock::now();
        const EvalResult r = evaluate();
        report().evaluation({.step = step_,
                             .test_loss = r.loss,
                             .test_accuracy = r.accuracy,
                             .bytes_sent = totals_.bytes_sent,
                             .train_seconds = seconds(start, t_eval) - eval_seconds_});
        eval_seconds_ += seconds(t_eval, Clock::now());
      }
    }
    const bool epoch_done = step_ % steps_per_epoch_ == 0;
    if (epoch_done) completed_epochs = step_ / steps_per_epoch_;
    if (step_ == end_step) {
      // The end of training (not a --max-steps stop, which a resume continues): an outer
      // loop's replicas become one model before it is evaluated and saved.
      sync_->finish_training(step_);
      const ExchangeStats s = sync_->take_stats();
      totals_.add_costs(s.reduce);
    }
    const auto t_eval = Clock::now();
    last_eval = evaluate();
    evaluated_at_stop = true;
    if (config_.eval_every > 0) {
      report().evaluation({.step = step_,
                           .test_loss = last_eval.loss,
                           .test_accuracy = last_eval.accuracy,
                           .bytes_sent = totals_.bytes_sent,
                           .train_seconds = seconds(start, t_eval) - eval_seconds_});
    }
    eval_seconds_ += seconds(t_eval, Clock::now());
    if (!config_.checkpoint_dir.empty()) save_checkpoint(checkpoint_file());
    const double elapsed = seconds(start, Clock::now());
    const double train_loss =
        epoch_loss_sum_ / static_cast<double>(std::max<std::int64_t>(epoch_steps_, 1));
    const double train_acc = static_cast<double>(epoch_correct_) /
                             static_cast<double>(std::max<std::int64_t>(epoch_seen_, 1));
    const double bytes_per_step = static_cast<double>(totals_.bytes_sent - bytes_before) /
                                  static_cast<double>(std::max<std::int64_t>(epoch_steps_, 1));
    report().epoch(
        {.epoch = epoch + 1,
         .complete = epoch_done,
         .step = step_,
         .train_loss = train_loss,
         .train_accuracy = train_acc,
         .test_loss = last_eval.loss,
         .test_accuracy = last_eval.accuracy,
         .lr = schedule_->lr(step_ - 1),
         .bytes_sent_per_step = bytes_per_step,
         .bytes_received_per_step = static_cast<double>(totals_.bytes_received - received_before) /
                                    static_cast<double>(std::max<std::int64_t>(epoch_steps_, 1)),
         .dense_bytes_per_step = dense_bytes,
         .elapsed_seconds = elapsed});
    warn_if_diverging(epoch + 1, train_loss);
  }
  if (!evaluated_at_stop) last_eval = evaluate();  // e.g. resumed at the end already

  TrainSummary s;
  s.steps = step_;
  s.epochs = completed_epochs;
  s.test_accuracy = last_eval.accuracy;
  s.test_loss = last_eval.loss;
  s.train_loss = epoch_loss_sum_ / static_cast<double>(std::max<std::int64_t>(epoch_steps_, 1));
  const std::uint64_t counted_steps = compressed_steps_ > 0 ? compressed_steps_ : totals_.steps;
  const std::uint64_t counted_bytes =
      compressed_steps_ > 0 ? compressed_bytes_ : totals_.bytes_sent;
  s.bytes_sent_per_worker_per_step =
      counted_steps > 0 ? static_cast<double>(counted_bytes) / static_cast<double>(counted_steps)
                        : 0.0;
  const std::uint64_t counted_received =
      compressed_steps_ > 0 ? compressed_bytes_received_ : totals_.bytes_received;
  s.bytes_received_per_worker_per_step =
      counted_steps > 0 ? static_cast<double>(counted_received) / static_cast<double>(counted_steps)
                        : 0.0;
  s.dense_bytes_per_step = dense_bytes;
  s.compression_ratio =
      s.bytes_sent_per_worker_per_step > 0 ? dense_bytes / s.bytes_sent_per_worker_per_step : 0.0;
  s.step_ms_median = median(step_ms_);
  s.step_ms_mean = step_ms_.empty() ? 0.0
                                    : std::accumulate(step_ms_.begin(), step_ms_.end(), 0.0) /
                                          static_cast<double>(step_ms_.size());
  s.compute_seconds = compute_seconds_;
  s.encode_seconds = totals_.encode_seconds;
  s.comm_seconds = totals_.comm_seconds;
  s.decode_seconds = totals_.decode_seconds;
  s.exposed_seconds = exposed_seconds_;
  s.dense_fallbacks = totals_.dense_fallbacks;
  s.elapsed_seconds = seconds(start, Clock::now());
  s.blas = blas;
  s.reducer = sync_->describe();
  s.model = config_.model.name;
  s.threads = config_.threads;
  s.rank = config_.rank;
  s.world = config_.world;
  report().summary(s);
  return s;
}

}  // namespace gradcomp::train
