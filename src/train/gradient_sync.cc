#include "train/gradient_sync.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <utility>

#include "gradcomp/error.h"
#include "gradcomp/weight_exchange.h"
#include "train/layout.h"
#include "train/trainer.h"

namespace gradcomp::train {

namespace {

using Clock = std::chrono::steady_clock;

// The run's length as the learning-rate schedule counts it (epochs * steps per epoch,
// not --steps): DGC bounds its warm-up by it, and a run stopped early and resumed must
// see the same value to stay bit-identical.
std::uint64_t run_total_steps(const SyncSetup& setup) {
  return static_cast<std::uint64_t>(std::max<std::int64_t>(setup.config.epochs, 0)) *
         static_cast<std::uint64_t>(std::max<std::int64_t>(setup.steps_per_epoch, 0));
}

// The allreduce topology: the public GradientExchange, hooks and all.
class ExchangeSync final : public GradientSync {
 public:
  ExchangeSync(const SyncSetup& setup, dist::Communicator& comm, ExchangeOptions options)
      : exchange_(setup.named_parameters, comm, std::move(options)) {}

  void begin_step(const StepInfo& step) override {
    exchange_.set_step(step.step);
    exchange_.set_learning_rate(step.lr);
  }
  void finish_step() override { exchange_.finish(); }
  bool momentum_in_memory() const override { return exchange_.momentum_in_memory(); }
  const std::vector<BucketPlan>& buckets() const override { return exchange_.buckets(); }
  ExchangeStats take_stats() override { return exchange_.take_stats(); }
  std::vector<StateBuffer> state() override { return exchange_.state(); }
  std::string describe() const override { return exchange_.describe(); }
  std::vector<std::string> take_warnings() override { return exchange_.take_warnings(); }

 private:
  GradientExchange exchange_;
};

// Parameter servers and single-process tests: one Reducer call after backward.
class ReducerSync final : public GradientSync {
 public:
  ReducerSync(const SyncSetup& setup, const ReducerFactory& make_reducer, Method method)
      : config_(setup.config), method_(std::move(method)) {
    std::vector<torch::Tensor> params;
    for (const auto& item : setup.named_parameters) {
      names_.push_back(item.key());
      params.push_back(item.value());
    }
    std::vector<ParamInfo> infos;
    for (std::size_t i = 0; i < params.size(); ++i) {
      const torch::Tensor& p = params[i];
      infos.push_back({names_[i], p.numel(), p.dim(), p.dim() > 0 ? p.size(0) : 0});
    }
    std::vector<BucketPlan> plan = plan_buckets(infos, config_.layout);
    const std::vector<BucketShape> shapes = bucket_shapes(plan);
    buffers_ = std::make_unique<GradientBuffers>(std::move(params), std::move(plan));
    reducer_ = make_reducer(shapes);
    if (!reducer_) throw InvalidArgument("trainer: the reducer factory returned nothing");
    weight_exchange_ = dynamic_cast<WeightExchange*>(reducer_.get());
    ctx_.seed = config_.seed;
    ctx_.rank = static_cast<std::uint32_t>(config_.rank);
    ctx_.world = static_cast<std::uint32_t>(config_.world);
    ctx_.steps_per_epoch = static_cast<std::uint64_t>(setup.steps_per_epoch);
    ctx_.total_steps = run_total_steps(setup);
    ctx_.momentum = static_cast<float>(train_momentum(config_));
    ctx_.nesterov = train_nesterov(config_);
    RunShape run;
    run.steps_per_epoch = ctx_.steps_per_epoch;
    run.total_steps = ctx_.total_steps;
    for (const BucketPlan& b : buffers_->plan()) {
      if (b.compressible) run.compressed_sizes.push_back(b.numel);
    }
    warnings_ = method_.start_warnings(run);
    threshold_check_due_ = method_.fixed_threshold() > 0.0;
  }

  void begin_step(const StepInfo& step) override {
    ctx_.step = static_cast<std::uint64_t>(step.step);
    ctx_.lr = step.lr;
    compress_ = step.compress;
  }

  void finish_step() override {
    const auto t0 = Clock::now();
    buffers_->gather();
    check_threshold();
    if (const std::optional<NonFiniteElement> bad_at = buffers_->find_non_finite()) {
      throw gradcomp::NonFiniteGradient(names_.at(bad_at->param), bad_at->param, bad_at->element,
                                        bad_at->value, static_cast<std::int64_t>(ctx_.step));
    }
    try {
      if (weight_exchange_ != nullptr) {
        weight_exchange_->exchange_weights(buffers_->refs(compress_), buffers_->weights(), ctx_);
      } else {
        reducer_->reduce(buffers_->refs(compress_), ctx_);
      }
    } catch (const EncodeError& e) {
      throw InvalidArgument("step " + std::to_string(ctx_.step) + ": " + e.what() + " [bucket " +
                            std::to_string(e.bucket()) + " is " + bucket_name(e.bucket()) + "]");
    }
    if (weight_exchange_ != nullptr) {
      buffers_->scatter_weights();
    } else {
      buffers_->scatter();
    }
    exposed_seconds_ += std::chrono::duration<double>(Clock::now() - t0).count();
  }

  bool owns_weights() const override { return weight_exchange_ != nullptr; }
  bool momentum_in_memory() const override { return reducer_->momentum_in_memory(); }
  const std::vector<BucketPlan>& buckets() const override { return buffers_->plan(); }
  ExchangeStats take_stats() override {
    ExchangeStats s;
    s.reduce = reducer_->take_stats();
    s.exposed_seconds = std::exchange(exposed_seconds_, 0.0);
    return s;
  }
  std::vector<StateBuffer> state() override { return reducer_->state(); }
  std::string describe() const override { return reducer_->describe(); }
  std::vector<std::string> take_warnings() override { return std::exchange(warnings_, {}); }

 private:
  // A fixed 2-bit threshold far above the gradients' scale, once, after the first steps.
  void check_threshold() {
    if (!threshold_check_due_ || !compress_ || ctx_.step < Method::kThresholdCheckStep) return;
    threshold_check_due_ = false;
    std::vector<std::span<const float>> grads;
    for (std::size_t b = 0; b < buffers_->plan().size(); ++b) {
      if (buffers_->plan()[b].compressible) grads.emplace_back(buffers_->bucket(b));
    }
    if (auto w = method_.threshold_warning(grads, ctx_.step)) {
      warnings_.push_back(std::move(*w));
    }
  }

  std::string bucket_name(std::uint32_t id) const {
    for (const BucketPlan& b : buffers_->plan()) {
      if (b.id == id) return b.name;
    }
    return "unknown";
  }

  const TrainConfig& config_;
  Method method_;
  std::vector<std::string> warnings_;
  bool threshold_check_due_ = false;
  std::vector<std::string> names_;
  std::unique_ptr<GradientBuffers> buffers_;
  std::unique_ptr<Reducer> reducer_;
  // The reducer, when the servers hold the weights (the asynchronous parameter server):
  // the step trades the gradient for them, and the trainer skips its optimizer step.
  WeightExchange* weight_exchange_ = nullptr;
  StepContext ctx_;
  bool compress_ = true;
  double exposed_seconds_ = 0;
};

// --sync-every: the public DiLoCo on the model's parameters; nothing happens in a step
// until the optimizer has stepped.
class OuterSync final : public GradientSync {
 public:
  OuterSync(const SyncSetup& setup, dist::Communicator& comm, DiLoCoOptions options)
      : diloco_(setup.named_parameters, comm, std::move(options)) {}

  void begin_step(const StepInfo& /*step*/) override {}
  void finish_step() override {}  // the gradients stay local
  bool after_optimizer_step(std::int64_t steps) override {
    if (diloco_.inner_steps() + 1 != steps) {
      throw Error("outer loop: step " + std::to_string(steps) + " after " +
                  std::to_string(diloco_.inner_steps()) + " inner steps");
    }
    return diloco_.step();
  }
  void resume_at(std::int64_t steps) override { diloco_.set_inner_steps(steps); }
  void finish_training(std::int64_t /*steps*/) override { diloco_.synchronize(); }
  bool momentum_in_memory() const override { return false; }
  const std::vector<BucketPlan>& buckets() const override { return diloco_.loop().buckets(); }
  ExchangeStats take_stats() override { return diloco_.take_stats(); }
  std::vector<StateBuffer> state() override { return diloco_.state(); }
  std::string describe() const override { return diloco_.describe(); }
  std::vector<std::string> take_warnings() override { return {}; }

 private:
  DiLoCo diloco_;
};

}  // namespace

SyncFactory exchange_sync(dist::Communicator& comm, std::string compressor, ReducerKind reducer) {
  return [&comm, compressor = std::move(compressor),
          reducer](const SyncSetup& setup) -> std::unique_ptr<GradientSync> {
    const TrainConfig& c = setup.config;
    ExchangeOptions o;
    o.compressor = compressor;
    o.reducer = reducer;
    o.layout = c.layout;
    o.min_group_mb = c.min_group_mb;
    o.dense_steps = c.dense_steps;
    o.seed = c.seed;
    o.steps_per_epoch = static_cast<std::uint64_t>(setup.steps_per_epoch);
    o.total_steps = run_total_steps(setup);
    o.momentum = static_cast<float>(train_momentum(c));
    o.nesterov = train_nesterov(c);
    // The worker compared its whole job with the other ranks' before building its
    // trainer (train/job_config.h), and trainers may be built one rank at a time (tests
    // serialise their models' initialisation).
    o.compare_ranks = false;
    return std::make_unique<ExchangeSync>(setup, comm, std::move(o));
  };
}

SyncFactory reducer_sync(ReducerFactory make_reducer, Method method) {
  return [make_reducer = std::move(make_reducer),
          method = std::move(method)](const SyncSetup& setup) -> std::unique_ptr<GradientSync> {
    return std::make_unique<ReducerSync>(setup, make_reducer, method);
  };
}

SyncFactory outer_sync(dist::Communicator& comm, std::string compressor, ReducerKind reducer,
                       dist::OuterLoopOptions options) {
  return [&comm, compressor = std::move(compressor), reducer,
          options = std::move(options)](const SyncSetup& setup) -> std::unique_ptr<GradientSync> {
    DiLoCoOptions o;
    o.sync_every = options.sync_every;
    o.compressor = compressor;
    o.reducer = reducer;
    o.outer = options.outer;
    o.fragments = options.fragments;
    o.delay = options.delay;
    o.mix = options.mix;
    o.layout = setup.config.layout;
    o.seed = setup.config.seed;
    return std::make_unique<OuterSync>(setup, comm, std::move(o));
  };
}

}  // namespace gradcomp::train
