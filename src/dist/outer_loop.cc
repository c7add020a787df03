#include "gradcomp/dist/outer_loop.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <numeric>
#include <utility>

#include "gradcomp/dist/config_check.h"
#include "gradcomp/error.h"
#include "gradcomp/json.h"

namespace gradcomp::dist {

namespace {

using Clock = std::chrono::steady_clock;

void check_options(const OuterLoopOptions& o) {
  if (o.sync_every < 1) {
    throw InvalidArgument("outer loop: sync_every (H) must be at least 1, got " +
                          std::to_string(o.sync_every));
  }
  if (o.fragments < 1 || o.sync_every % o.fragments != 0) {
    throw InvalidArgument("outer loop: fragments (" + std::to_string(o.fragments) +
                          ") must be at least 1 and divide sync_every (" +
                          std::to_string(o.sync_every) + ")");
  }
  const std::int64_t spacing = o.sync_every / o.fragments;
  if (o.delay < 0 || o.delay >= spacing) {
    throw InvalidArgument("outer loop: delay (" + std::to_string(o.delay) +
                          ") must be in [0, sync_every / fragments = " + std::to_string(spacing) +
                          "): one round in flight at a time");
  }
  if (!(o.mix >= 0.0 && o.mix < 1.0)) {
    throw InvalidArgument("outer loop: mix must be in [0, 1), got " + std::to_string(o.mix));
  }
}

}  // namespace

OuterLoop::OuterLoop(std::vector<std::span<float>> weights, std::span<const ParamInfo> params,
                     Communicator& comm, Method method, OuterLoopOptions options,
                     ReplicaStaging* staging)
    : weights_(std::move(weights)),
      comm_(comm),
      options_(std::move(options)),
      outer_(OuterOptimizer::parse(options_.outer)),
      staging_(staging) {
  check(method, options_);
  if (weights_.size() != params.size()) {
    throw InvalidArgument("outer loop: " + std::to_string(weights_.size()) + " weight spans for " +
                          std::to_string(params.size()) + " parameters");
  }
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (static_cast<std::int64_t>(weights_[i].size()) != params[i].numel) {
      throw InvalidArgument("outer loop: parameter " + params[i].name + " has " +
                            std::to_string(params[i].numel) + " elements, its span " +
                            std::to_string(weights_[i].size()));
    }
  }
  plan_ = plan_buckets(params, options_.layout);
  // Pieces at their ids (0, 1, ... in plan order), so that state() names and orders
  // buffers as the plan does.
  std::vector<std::vector<BucketPlan>> fragments = fragment_pieces(plan_, options_.fragments);
  std::size_t count = 0;
  for (const std::vector<BucketPlan>& f : fragments) count += f.size();
  pieces_.resize(count);
  fragment_of_.resize(count);
  for (std::size_t f = 0; f < fragments.size(); ++f) {
    for (BucketPlan& p : fragments[f]) {
      fragment_of_[p.id] = static_cast<int>(f);
      pieces_[p.id] = std::move(p);
    }
  }
  shapes_ = bucket_shapes(pieces_);
  fragment_pieces_.resize(static_cast<std::size_t>(options_.fragments));
  fragment_params_.resize(static_cast<std::size_t>(options_.fragments));
  for (std::size_t b = 0; b < pieces_.size(); ++b) {
    const auto f = static_cast<std::size_t>(fragment_of_[b]);
    fragment_pieces_[f].push_back(b);
    for (const BucketPlan::Slot& s : pieces_[b].slots) fragment_params_[f].push_back(s.param);
  }
  for (std::vector<std::size_t>& p : fragment_params_) {
    std::sort(p.begin(), p.end());
    p.erase(std::unique(p.begin(), p.end()), p.end());
  }

  // Ranks configured differently would exchange buffers of different sizes (Gloo aborts)
  // or silently train apart: every rank fails alike, naming the first difference.
  ConfigFields fields = {{"outer loop sync_every", std::to_string(options_.sync_every)},
                         {"outer loop optimizer", outer_.spec()},
                         {"outer loop compressor", method.canonical()},
                         {"outer loop reducer", to_string(method.context().reducer)},
                         {"outer loop fragments", std::to_string(options_.fragments)},
                         {"outer loop delay", std::to_string(options_.delay)},
                         {"outer loop mix", json_number(options_.mix)},
                         {"outer loop seed", std::to_string(options_.seed)},
                         {"parameters", std::to_string(params.size())}};
  for (std::size_t i = 0; i < params.size(); ++i) {
    fields.push_back({"parameter " + std::to_string(i) + " (" + params[i].name + ") elements",
                      std::to_string(params[i].numel)});
  }
  check_ranks_agree(comm, fields);
  // One starting point for every replica: rank 0's.
  std::vector<std::size_t> every(weights_.size());
  std::iota(every.begin(), every.end(), std::size_t{0});
  if (staging_ != nullptr) staging_->fetch(every);
  for (const std::span<float> w : weights_) comm.broadcast_bytes(std::as_writable_bytes(w), 0);
  if (staging_ != nullptr) staging_->publish(every);

  global_.resize(pieces_.size());
  delta_.resize(pieces_.size());
  momentum_.resize(pieces_.size());
  round_start_.resize(pieces_.size());
  for (std::size_t b = 0; b < pieces_.size(); ++b) {
    global_[b].resize(pieces_[b].numel);
    for (const BucketPlan::Slot& s : pieces_[b].slots) {
      const std::span<const float> local = weights_of(s);
      std::copy(local.begin(), local.end(),
                global_[b].begin() + static_cast<std::ptrdiff_t>(s.offset));
    }
    delta_[b].assign(pieces_[b].numel, 0.0f);
    if (outer_.has_momentum()) momentum_[b].assign(pieces_[b].numel, 0.0f);
    if (options_.delay > 0) round_start_[b].assign(pieces_[b].numel, 0.0f);
  }

  exchanger_ = std::make_unique<Exchanger>(comm, std::move(method));
  // The memories exist from the start, so that a checkpoint taken before the first round
  // has the same buffers as any later one.
  for (int f = 0; f < options_.fragments; ++f) {
    std::vector<BucketShape> shapes;
    for (const std::size_t b : fragment_pieces_[static_cast<std::size_t>(f)]) {
      shapes.push_back(shapes_[b]);
    }
    if (!shapes.empty()) exchanger_->prepare(static_cast<std::uint64_t>(f), shapes);
  }
}

OuterLoop::~OuterLoop() = default;

Method parse_outer_method(std::string_view compressor, ReducerKind reducer) {
  return Method::parse(compressor, {.reducer = reducer, .momentum = 0.0});
}

void OuterLoop::check(const Method& method, const OuterLoopOptions& options) {
  check_options(options);
  const OuterOptimizer outer = OuterOptimizer::parse(options.outer);
  if (outer.residual_decay() == 1.0) return;
  // The rule decays the memory's residual between rounds: a codec memory must have one.
  bool has_residual = false;
  if (!method.is_scheme()) {
    for (const StateBuffer& s : method.make_memory(1)->state()) {
      has_residual = has_residual || s.name == "residual";
    }
  }
  if (!has_residual) {
    throw InvalidArgument("outer optimizer " + outer.spec() + " decays error feedback, but " +
                          method.spec() +
                          " keeps none: use a biased codec with ef(...), e.g. ef(chunktopk) or "
                          "ef(topk:ratio=0.01)");
  }
}

std::int64_t OuterLoop::sync_offset(int fragment) const {
  return (fragment + 1) * (options_.sync_every / options_.fragments);
}

std::optional<int> OuterLoop::fragment_due(std::int64_t steps) const {
  if (steps < 1) return std::nullopt;
  const std::int64_t spacing = options_.sync_every / options_.fragments;
  if (steps % spacing != 0) return std::nullopt;
  // steps = (f + 1) * spacing (mod H)
  const std::int64_t phase = (steps / spacing - 1) % options_.fragments;
  return static_cast<int>(phase);
}

bool OuterLoop::after_inner_step(std::int64_t steps) {
  bool changed = false;
  if (pending_ && steps >= pending_->merge_at) {
    merge_pending(/*host_current=*/false);
    changed = true;
  }
  if (const std::optional<int> f = fragment_due(steps)) {
    start_round(*f, steps);
    if (options_.delay == 0) {
      merge_pending(/*host_current=*/true);
      changed = true;
    }
  }
  return changed;
}

void OuterLoop::merge_pending(bool host_current) {
  const int f = pending_->fragment;
  finish_outer_step();
  merge(f, host_current);
  pending_.reset();
}

void OuterLoop::fetch(int fragment) {
  if (staging_ != nullptr) staging_->fetch(fragment_params_[static_cast<std::size_t>(fragment)]);
}

void OuterLoop::publish(int fragment) {
  if (staging_ != nullptr) {
    staging_->publish(fragment_params_[static_cast<std::size_t>(fragment)]);
  }
}

void OuterLoop::start_round(int fragment, std::int64_t steps) {
  const std::vector<std::size_t>& buckets = fragment_pieces_[static_cast<std::size_t>(fragment)];
  pending_ = Pending{fragment, steps + options_.delay, false};
  if (buckets.empty()) {
    pending_->stepped = true;  // a fragment with nothing in it (more fragments than buckets)
    return;
  }
  std::vector<BucketShape> shapes;
  std::vector<BucketRef> refs;
  if (outer_.residual_decay() < 1.0) {
    // SparseLoCo's accumulator: e <- decay * e, before this round's d is added to it. The
    // exchanger is idle: the previous round was merged (delay < spacing).
    const auto decay = static_cast<float>(outer_.residual_decay());
    for (const StateBuffer& s : exchanger_->state(static_cast<std::uint64_t>(fragment))) {
      if (!s.name.ends_with(".residual")) continue;
      for (float& e : s.data) e *= decay;
    }
  }
  fetch(fragment);
  for (const std::size_t b : buckets) {
    std::vector<float>& d = delta_[b];
    const std::vector<float>& x = global_[b];
    for (const BucketPlan::Slot& s : pieces_[b].slots) {
      const std::span<const float> local = weights_of(s);
      for (std::size_t i = 0; i < s.numel; ++i) d[s.offset + i] = x[s.offset + i] - local[i];
      if (options_.delay > 0) {
        std::copy(local.begin(), local.end(),
                  round_start_[b].begin() + static_cast<std::ptrdiff_t>(s.offset));
      }
    }
    shapes.push_back(shapes_[b]);
    refs.push_back({.id = pieces_[b].id, .grad = d, .compressed = pieces_[b].compressible});
  }
  StepContext ctx;
  ctx.seed = options_.seed;
  ctx.step = static_cast<std::uint64_t>(steps);
  ctx.lr = static_cast<float>(outer_.lr());
  exchanger_->submit(
      static_cast<std::uint64_t>(fragment), shapes, std::move(refs), ctx,
      [this](std::exception_ptr error) {
        if (error && !failure_) failure_ = error;
      },
      [this, steps] { check_round_agrees(steps); });
}

void OuterLoop::check_round_agrees(std::int64_t steps) {
  try {
    check_ranks_agree(comm_, {{"the inner steps before an outer round", std::to_string(steps)}});
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(std::string("outer loop: ") + e.what() +
                          " (every rank must take the same inner steps between rounds)");
  }
}

void OuterLoop::wait_for_exchange() {
  const auto t0 = Clock::now();
  exchanger_->drain();
  wait_seconds_ += std::chrono::duration<double>(Clock::now() - t0).count();
  if (failure_) std::rethrow_exception(failure_);
}

void OuterLoop::finish_outer_step() {
  if (!pending_ || pending_->stepped) return;
  wait_for_exchange();
  for (const std::size_t b : fragment_pieces_[static_cast<std::size_t>(pending_->fragment)]) {
    outer_.update(global_[b], delta_[b], momentum_[b]);
  }
  pending_->stepped = true;
}

void OuterLoop::merge(int fragment, bool host_current) {
  // A parameter may lie partly in another fragment: its spans are fetched whole before
  // any write, so that publishing them writes back that part's current values.
  if (!host_current) fetch(fragment);
  const auto keep = static_cast<float>(options_.mix);
  for (const std::size_t b : fragment_pieces_[static_cast<std::size_t>(fragment)]) {
    const std::vector<float>& x = global_[b];
    for (const BucketPlan::Slot& s : pieces_[b].slots) {
      const std::span<float> local = weights_of(s);
      if (options_.delay > 0) {
        // The replica moved on during the delay: add the round's correction to it.
        const float* start = round_start_[b].data() + s.offset;
        for (std::size_t i = 0; i < s.numel; ++i) {
          local[i] += (1.0f - keep) * (x[s.offset + i] - start[i]);
        }
      } else if (keep == 0.0f) {
        std::copy_n(x.begin() + static_cast<std::ptrdiff_t>(s.offset), s.numel, local.begin());
      } else {
        for (std::size_t i = 0; i < s.numel; ++i) {
          local[i] = keep * local[i] + (1.0f - keep) * x[s.offset + i];
        }
      }
    }
  }
  publish(fragment);
}

void OuterLoop::synchronize(std::int64_t steps) {
  if (pending_) merge_pending(/*host_current=*/false);
  for (int f = 0; f < options_.fragments; ++f) {
    start_round(f, steps);  // fetches the fragment's parameters
    wait_for_exchange();
    pending_.reset();
    for (const std::size_t b : fragment_pieces_[static_cast<std::size_t>(f)]) {
      // The mean of the replicas (x - mean d), not an outer step: Nesterov's momentum
      // extrapolates past it (measured: 0.2-0.4 points lower on the MLP).
      std::vector<float>& x = global_[b];
      for (std::size_t i = 0; i < x.size(); ++i) x[i] -= delta_[b][i];
      for (const BucketPlan::Slot& s : pieces_[b].slots) {
        const auto from = x.begin() + static_cast<std::ptrdiff_t>(s.offset);
        std::copy_n(from, s.numel, weights_of(s).begin());
        // A merge resume_at() may still think due at `steps` then adds x - x: nothing.
        if (options_.delay > 0) {
          std::copy_n(from, s.numel,
                      round_start_[b].begin() + static_cast<std::ptrdiff_t>(s.offset));
        }
      }
    }
    publish(f);
  }
}

std::vector<StateBuffer> OuterLoop::state() {
  finish_outer_step();
  std::vector<StateBuffer> out;
  for (std::size_t b = 0; b < pieces_.size(); ++b) {
    const std::string prefix = "outer.bucket" + std::to_string(pieces_[b].id) + ".";
    out.push_back({prefix + "global", global_[b]});
    if (outer_.has_momentum()) out.push_back({prefix + "momentum", momentum_[b]});
    if (options_.delay > 0) out.push_back({prefix + "round_start", round_start_[b]});
  }
  for (int f = 0; f < options_.fragments; ++f) {
    for (StateBuffer& s : exchanger_->state(static_cast<std::uint64_t>(f))) {
      out.push_back(std::move(s));
    }
  }
  return out;
}

void OuterLoop::resume_at(std::int64_t steps) {
  pending_.reset();
  if (options_.delay == 0 || steps < 1) return;
  // The latest round started at or before `steps`; its merge is due if not done yet.
  const std::int64_t spacing = options_.sync_every / options_.fragments;
  const std::int64_t started = steps - steps % spacing;
  if (started >= 1 && started + options_.delay > steps) {
    pending_ = Pending{*fragment_due(started), started + options_.delay, true};
  }
}

ReduceStats OuterLoop::take_stats() { return exchanger_->take_stats(); }

double OuterLoop::take_wait_seconds() { return std::exchange(wait_seconds_, 0.0); }

std::string OuterLoop::describe() const {
  std::string out = outer_.spec() + " every " + std::to_string(options_.sync_every) +
                    " steps over " + exchanger_->describe();
  if (options_.fragments > 1) out += ", " + std::to_string(options_.fragments) + " fragments";
  if (options_.delay > 0) out += ", delay " + std::to_string(options_.delay);
  if (options_.mix > 0) out += ", mix " + std::to_string(options_.mix);
  return out;
}

}  // namespace gradcomp::dist
