// GradientExchange (gradcomp/torch/gradient_exchange.h): gradient hooks fill flat
// bucket buffers, laid out back to back in hand-over order; complete groups of buckets
// go, in order, to the Exchanger, which runs each group's reducer on its own thread while
// backward goes on. Two places for the buffers:
//   staged   host memory (std::vector<float>), the host reducers (dist::Exchanger's
//            groups): CPU parameters, and CUDA ones under a method with no device
//            reducer (copied to the host in the hook, the means back in finish());
//   device   one fp32 tensor on the parameters' device, the device reducers
//            (gradcomp/device/groups.h, as the Python hook's device path): CUDA
//            parameters under a method device::Reducer::supports(), or CPU ones with
//            ExchangeOptions::device_path_on_cpu (CI's check of this path).
#include "gradcomp/torch/gradient_exchange.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>
#include <future>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <utility>

#include <c10/core/Event.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

#include "gradcomp/config_agreement.h"
#include "gradcomp/device/groups.h"
#include "gradcomp/device/reducer.h"
#include "gradcomp/dist/communicator.h"
#include "gradcomp/dist/config_check.h"
#include "gradcomp/dist/exchanger.h"
#include "gradcomp/dist/process_group.h"
#include "gradcomp/dist/reducers.h"
#include "gradcomp/error.h"
#include "gradcomp/finite.h"
#include "gradcomp/json.h"

namespace gradcomp {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string describe_value(float v) { return std::isnan(v) ? "nan" : v > 0 ? "inf" : "-inf"; }

// The bucket id of a state buffer named "bucket<id>.<name>"; names without it sort first.
std::uint64_t state_bucket_id(const std::string& name) {
  constexpr std::string_view kPrefix = "bucket";
  if (name.compare(0, kPrefix.size(), kPrefix) != 0) return 0;
  std::uint64_t id = 0;
  for (std::size_t i = kPrefix.size(); i < name.size() && name[i] >= '0' && name[i] <= '9'; ++i) {
    id = id * 10 + static_cast<std::uint64_t>(name[i] - '0');
  }
  return id;
}
}  // namespace

NonFiniteGradient::NonFiniteGradient(std::string parameter, std::size_t index, std::size_t element,
                                     float value, std::int64_t step)
    : InvalidArgument("step " + std::to_string(step) + ": the gradient of " + parameter + " is " +
                      describe_value(value) + " at element " + std::to_string(element)),
      parameter_(std::move(parameter)),
      index_(index),
      element_(element),
      value_(value),
      step_(step) {}

struct GradientExchange::Impl {
  ExchangeOptions options;
  std::unique_ptr<dist::Communicator> owned_comm;  // over a caller's process group
  dist::Communicator* comm = nullptr;
  std::unique_ptr<dist::Exchanger> exchanger;

  std::vector<std::string> names;
  std::vector<torch::Tensor> params;
  std::vector<BucketPlan> plan;
  // Every bucket's gradient, back to back in hand-over order: a group's buckets are one
  // span, which a dense reducer allreduces where it lies (no packing copy).
  std::vector<float> arena;
  std::vector<std::span<float>> buffers;   // per bucket, into arena
  std::vector<std::size_t> param_bucket;   // per parameter
  std::vector<std::size_t> param_offset;   // per parameter, in its bucket
  std::vector<std::size_t> bucket_offset;  // per bucket, in the arena (hand-over order)
  at::Device param_device{at::kCPU};       // every exchanged parameter's

  // The device path (see the top of this file); empty otherwise.
  bool on_device = false;
  at::Tensor device_arena;  // the arena's counterpart on param_device
  std::unique_ptr<device::Groups> device_groups;
  std::vector<std::vector<device::Groups::Slot>> group_slots;  // per group, in its data
  // CUDA only: the stream the device reducers run on (one of the pool's, so that they
  // overlap backward), waiting for each gradient's copy (the hook records `copied` on
  // its own stream); per group, `reduced`, recorded after its reducer, which finish()
  // waits for before it reads the means.
  std::optional<c10::Stream> side;
  std::unique_ptr<c10::Event> copied;
  std::vector<std::shared_ptr<c10::Event>> reduced;
  // Checkpoints on the device path: state() copies the memories into these host tensors
  // and hands out spans of them; the next step copies them back first (the caller may
  // have written a checkpoint into them). Per group, in the reducer's order.
  std::vector<std::vector<std::pair<std::string, at::Tensor>>> state_mirrors;
  // Per group: the host buffer a dense step's allreduce runs on (see
  // hand_over_device_dense).
  std::vector<std::vector<float>> dense_host;
  // Groups: consecutive buckets in hand-over order (backward's), one exchange job each.
  struct Group {
    std::vector<std::size_t> buckets;  // plan indices, in hand-over order
    std::vector<BucketShape> shapes;   // what its reducer is built for
    std::size_t params = 0;            // parameters in its buckets
    std::span<float> data;             // its buckets, back to back in the arena (staged)
    std::size_t offset = 0;            // where they start in the arena (either path)
    std::size_t numel = 0;
    bool compressible = false;  // any of its buckets
  };
  std::vector<Group> groups;
  std::vector<std::size_t> bucket_group;  // per bucket
  float inv_world = 1.0f;                 // 1 / ranks
  // Per parameter: its AccumulateGrad node (held, as the variable holds it only weakly)
  // and the key of our post hook on it. The pointer type is whatever grad_accumulator
  // returns: a shared_ptr in torch 1.13, an intrusive_ptr in 2.x.
  using AccumulatorPtr =
      decltype(torch::autograd::impl::grad_accumulator(std::declval<const at::Tensor&>()));
  std::vector<AccumulatorPtr> accumulators;
  std::vector<std::uintptr_t> hook_keys;

  // This step.
  std::mutex mutex;
  std::vector<char> seen;                // per parameter: its gradient arrived
  std::vector<std::size_t> missing;      // per group: parameters still to arrive
  std::size_t next = 0;                  // next group to hand over
  std::vector<std::promise<void>> done;  // per group
  std::vector<std::future<void>> pending;
  bool started = false;
  Clock::time_point backward_start;
  Clock::time_point last_hook;

  std::int64_t step = 0;
  float lr = 1.0f;
  // ExchangeOptions::loss_scaling: the scale set for the coming backward, and the one
  // this step's gradients carry (taken at its first gradient, used until finish()).
  float loss_scale = 1.0f;
  float step_scale = 1.0f;
  bool compressed_last = false;
  double exposed_seconds = 0;
  double backward_seconds = 0;

  // Warnings not taken yet; the fixed 2-bit threshold check (Method::threshold_warning), due at the
  // first compressed step from kThresholdCheckStep on, with copies of that step's
  // compressible gradients (the exchange overwrites the buffers with the means).
  std::vector<std::string> warnings;
  bool threshold_check_due = false;
  std::vector<std::vector<float>> threshold_grads;

  RunShape run_shape() const {
    RunShape r;
    r.steps_per_epoch = options.steps_per_epoch;
    r.total_steps = options.total_steps;
    for (const BucketPlan& b : plan) {
      if (b.compressible) r.compressed_sizes.push_back(b.numel);
    }
    return r;
  }

  // What every rank must hold alike, as given: the options that decide the collectives
  // (and the memories' behaviour), then each exchanged parameter. Compared before any of
  // it is validated, so that a rank whose own check would fail does not leave the others
  // waiting in a collective it never joins: ranks that differ all throw the same line.
  ConfigFields config_fields(const NamedParameters& named) const {
    const auto number = [](double v) { return json_number(v); };  // exact, shortest
    const ExchangeOptions& o = options;
    ConfigFields f = {
        {"compressor", o.compressor},
        {"reducer", to_string(o.reducer)},
        {"bucket_mb", number(o.layout.bucket_mb)},
        {"min_elements", std::to_string(o.layout.min_elements)},
        {"dense_share", number(o.layout.dense_share)},
        {"min_group_mb", o.min_group_mb ? number(*o.min_group_mb) : "default"},
        {"dense_steps", std::to_string(o.dense_steps)},
        {"seed", std::to_string(o.seed)},
        {"steps_per_epoch", std::to_string(o.steps_per_epoch)},
        {"total_steps", std::to_string(o.total_steps)},
        {"momentum", number(o.momentum)},
        {"nesterov", o.nesterov ? "true" : "false"},
        {"check_finite", o.check_finite ? "true" : "false"},
        {"loss_scaling", o.loss_scaling ? "true" : "false"},
    };
    std::size_t exchanged = 0;
    for (const auto& item : named) exchanged += item.value().requires_grad() ? 1 : 0;
    f.push_back({"parameters that require grad", std::to_string(exchanged)});
    std::size_t i = 0;
    for (const auto& item : named) {
      const torch::Tensor& p = item.value();
      if (!p.requires_grad()) continue;
      std::ostringstream shape;
      shape << p.scalar_type() << " " << p.sizes() << " on " << p.device().type();
      f.push_back({"parameter " + std::to_string(i++) + " (" + item.key() + ")", shape.str()});
    }
    return f;
  }

  void build(const NamedParameters& named) {
    if (options.compare_ranks) {
      try {
        dist::check_ranks_agree(*comm, config_fields(named));
      } catch (const InvalidArgument& e) {
        throw InvalidArgument(std::string("GradientExchange: ") + e.what());
      }
    }
    std::vector<ParamInfo> infos;
    for (const auto& item : named) {
      const torch::Tensor& p = item.value();
      // One device for every exchanged parameter: their buckets share one buffer.
      if (p.requires_grad() && !params.empty() && p.device() != param_device) {
        throw InvalidArgument("GradientExchange: parameters on several devices (" + names.front() +
                              " on " + param_device.str() + ", " + item.key() + " on " +
                              p.device().str() +
                              "); give every exchanged parameter the same device");
      }
      if (p.scalar_type() != torch::kFloat || !p.is_contiguous() ||
          !(p.device().is_cpu() || p.device().is_cuda())) {
        throw InvalidArgument("GradientExchange: parameter " + item.key() +
                              " is not a contiguous float32 tensor on the CPU or a CUDA device");
      }
      if (!p.requires_grad()) continue;  // frozen: nothing to exchange
      if (params.empty()) param_device = p.device();
      names.push_back(item.key());
      params.push_back(p);
      infos.push_back({item.key(), p.numel(), p.dim(), p.dim() > 0 ? p.size(0) : 0});
    }
    plan = plan_buckets(infos, options.layout);
    param_bucket.assign(params.size(), 0);
    param_offset.assign(params.size(), 0);
    for (std::size_t b = 0; b < plan.size(); ++b) {
      for (const BucketPlan::Slot& s : plan[b].slots) {
        param_bucket[s.param] = b;
        param_offset[s.param] = s.offset;
      }
    }
    if (options.compressor.empty()) options.compressor = default_compressor(options.reducer);
    // Once, for this optimizer: a bare biased codec gets efm(...) under momentum.
    Method method = Method::parse(
        options.compressor,
        {.reducer = options.reducer, .momentum = options.momentum, .nesterov = options.nesterov});
    options.compressor = method.spec();
    on_device =
        device::Reducer::supports(method) && (param_device.is_cuda() || options.device_path_on_cpu);
    const std::vector<std::size_t> order = hand_over_order(plan);
    std::size_t total = 0;
    bucket_offset.assign(plan.size(), 0);
    for (std::size_t b : order) {
      bucket_offset[b] = total;
      total += plan[b].numel;
    }
    if (on_device) {
      device_arena = torch::zeros({static_cast<std::int64_t>(total)},
                                  torch::TensorOptions().dtype(torch::kFloat).device(param_device));
    } else {
      arena.assign(total, 0.0f);
      buffers.resize(plan.size());
      for (std::size_t b : order) {
        buffers[b] = std::span<float>(arena.data() + bucket_offset[b], plan[b].numel);
      }
    }
    exchanger = std::make_unique<dist::Exchanger>(*comm, std::move(method));
    if (options.loss_scaling) exchanger->set_non_finite(dist::Exchanger::NonFinite::kSkipStep);
    form_groups();  // the default group size depends on whether the exchange is dense
    inv_world = 1.0f / static_cast<float>(comm->world_size());
    if (on_device) {
      build_device_groups();
    } else {
      for (std::size_t g = 0; g < groups.size(); ++g) exchanger->prepare(g, groups[g].shapes);
    }
    warnings = exchanger->method().start_warnings(run_shape());
    threshold_check_due = exchanger->method().fixed_threshold() > 0.0;
    reset_step();
    for (std::size_t i = 0; i < params.size(); ++i) {
      // A post hook on the parameter's AccumulateGrad node, as DDP's reducer does: it
      // runs once per backward, after autograd has written .grad (after every tensor
      // hook, whenever the user registered it), so what is exchanged is exactly the
      // .grad an after-backward exchange would read.
      accumulators.push_back(torch::autograd::impl::grad_accumulator(params[i]));
      hook_keys.push_back(accumulators.back()->add_post_hook(
          std::make_unique<torch::autograd::utils::LambdaPostHook>(
              [this, i](const torch::autograd::variable_list& outputs,
                        const torch::autograd::variable_list& /*inputs*/) {
                on_gradient(i);
                return outputs;
              })));
    }
  }

  // The groups of gradcomp/layout.h's exchange_groups, each one exchange job.
  void form_groups() {
    try {
      const double group_mb =
          options.min_group_mb.value_or(default_group_mb(exchanger->dense_only()));
      for (std::vector<std::size_t>& g : exchange_groups(plan, group_mb)) {
        groups.emplace_back();
        groups.back().buckets = std::move(g);
      }
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(std::string("GradientExchange: ") + e.what());
    }
    bucket_group.assign(plan.size(), 0);
    for (std::size_t g = 0; g < groups.size(); ++g) {
      std::size_t numel = 0;
      for (std::size_t b : groups[g].buckets) numel += plan[b].numel;
      groups[g].offset = bucket_offset[groups[g].buckets.front()];
      groups[g].numel = numel;
      if (!on_device) groups[g].data = std::span<float>(arena.data() + groups[g].offset, numel);
      for (std::size_t b : groups[g].buckets) {
        bucket_group[b] = g;
        groups[g].compressible = groups[g].compressible || plan[b].compressible;
        groups[g].shapes.push_back({plan[b].id, plan[b].numel, plan[b].compressible, plan[b].rows});
        groups[g].params += plan[b].slots.size();
      }
    }
  }

  // The device path: a device reducer per group, built now so that state() can be
  // restored before the first step; CUDA: the side stream and the events.
  void build_device_groups() {
    device_groups = std::make_unique<device::Groups>(*exchanger, *comm);
    group_slots.resize(groups.size());
    state_mirrors.resize(groups.size());
    dense_host.resize(groups.size());
    for (std::size_t g = 0; g < groups.size(); ++g) {
      for (std::size_t b : groups[g].buckets) {
        group_slots[g].push_back({{plan[b].id, plan[b].numel, plan[b].compressible, plan[b].rows},
                                  bucket_offset[b] - groups[g].offset});
      }
      (void)device_groups->group(g, group_slots[g], param_device);
    }
    if (param_device.is_cuda()) {
      const c10::impl::VirtualGuardImpl impl(param_device.type());
      side = impl.getStreamFromGlobalPool(param_device);
      copied = std::make_unique<c10::Event>(param_device.type());
      for (std::size_t g = 0; g < groups.size(); ++g) {
        reduced.push_back(std::make_shared<c10::Event>(param_device.type()));
      }
    }
  }

  // CUDA: the side stream waits for what this thread's stream has queued so far (a
  // gradient's copy into the arena). No wait on the host.
  void side_waits_for_this_stream() {
    if (!side) return;
    const c10::impl::VirtualGuardImpl impl(param_device.type());
    copied->record(impl.getStream(param_device));
    copied->block(*side);
  }

  // Group g of the device arena.
  at::Tensor device_data(std::size_t g) const {
    return device_arena.narrow(0, static_cast<std::int64_t>(groups[g].offset),
                               static_cast<std::int64_t>(groups[g].numel));
  }
  // Parameter i's place in the device arena.
  at::Tensor device_slot(std::size_t i) const {
    return device_arena.narrow(
        0, static_cast<std::int64_t>(bucket_offset[param_bucket[i]] + param_offset[i]),
        params[i].numel());
  }

  void reset_step() {
    seen.assign(params.size(), 0);
    missing.assign(groups.size(), 0);
    for (std::size_t g = 0; g < groups.size(); ++g) missing[g] = groups[g].params;
    next = 0;
    done.clear();
    done.resize(groups.size());
    pending.clear();
    started = false;
  }

  // On the autograd thread, once per parameter per backward.
  void on_gradient(std::size_t i) {
    const torch::Tensor& grad = params[i].grad();
    std::lock_guard lock(mutex);
    if (!started) {
      started = true;
      backward_start = Clock::now();
      step_scale = loss_scale;
    }
    last_hook = Clock::now();
    if (seen[i]) {
      throw InvalidArgument("GradientExchange: a second gradient for " + names[i] +
                            " before finish() (call finish() after every backward; "
                            "accumulating gradients over several backward passes is not "
                            "supported)");
    }
    const std::size_t b = param_bucket[i];
    if (on_device) {
      // Into the device arena, on this thread's stream; the finite check runs on the
      // exchange thread (see hand_over_device). A dense group's share of the mean is
      // taken here, as the host path does (the same float products).
      at::Tensor slot = device_slot(i);
      slot.view(params[i].sizes()).copy_(grad);
      if (dense_now(bucket_group[b])) {
        slot.mul_(inv_world);
      } else if (unscale_now(bucket_group[b])) {
        slot.div_(step_scale);
      }
      side_waits_for_this_stream();
      seen[i] = 1;
      --missing[bucket_group[b]];
      hand_over_ready();
      return;
    }
    // Staged: a CUDA gradient is copied to its host bucket here, synchronously (the
    // method has no device reducer: device::Reducer::supports).
    const torch::Tensor g = grad.to(torch::kCPU, torch::kFloat).contiguous();
    const std::span<float> slot(buffers[b].data() + param_offset[i],
                                static_cast<std::size_t>(g.numel()));
    if (dense_now(bucket_group[b])) {
      // This rank's share of the mean, written as it is copied (DDP's way): the sum over
      // ranks is then the mean, with no pass over the bucket after the transfer.
      const float* src = g.data_ptr<float>();
      for (std::size_t k = 0; k < slot.size(); ++k) slot[k] = src[k] * inv_world;
    } else if (unscale_now(bucket_group[b])) {
      const float* src = g.data_ptr<float>();
      const float scale = step_scale;
      for (std::size_t k = 0; k < slot.size(); ++k) slot[k] = src[k] / scale;
    } else {
      std::memcpy(slot.data(), g.data_ptr<float>(), slot.size_bytes());
    }
    if (checks_finite()) {
      const std::size_t bad = find_non_finite(slot);
      if (bad < slot.size()) throw NonFiniteGradient(names[i], i, bad, slot[bad], step);
    }
    seen[i] = 1;
    --missing[bucket_group[b]];
    hand_over_ready();
  }

  // Hands over every complete group from `next` on, in order. Holds `mutex`.
  void hand_over_ready() {
    while (next < groups.size() && missing[next] == 0) hand_over(next++);
  }

  // Whether group g is averaged densely this step: the dense reducer, or only buckets
  // that are dense now (the dense bucket; any bucket during the dense warm-up). Such a
  // group bypasses its reducer, which would do the same sum / W.
  bool dense_now(std::size_t g) const {
    return exchanger->dense_only() || !groups[g].compressible || step < options.dense_steps;
  }

  // Under loss scaling a group that goes through its reducer is exchanged unscaled (and
  // its means scaled back in write_means); a dense one is a sum, which the scale passes
  // through.
  bool unscale_now(std::size_t g) const { return options.loss_scaling && !dense_now(g); }

  // NonFiniteGradient is thrown only without loss scaling: with it an overflow is the
  // scaler's to handle (dist::Exchanger::NonFinite::kSkipStep).
  bool checks_finite() const { return options.check_finite && !options.loss_scaling; }

  void hand_over(std::size_t g) {
    StepContext ctx;
    ctx.seed = options.seed;
    ctx.step = static_cast<std::uint64_t>(step);
    ctx.steps_per_epoch = options.steps_per_epoch;
    ctx.total_steps = options.total_steps;
    ctx.lr = lr;
    ctx.momentum = options.momentum;
    ctx.nesterov = options.nesterov;
    std::promise<void>& promise = done[g];
    pending.push_back(promise.get_future());
    auto complete = [&promise](std::exception_ptr e) {
      if (e) {
        promise.set_exception(e);
      } else {
        promise.set_value();
      }
    };
    if (on_device) {
      hand_over_device(g, ctx, std::move(complete));
      return;
    }
    if (dense_now(g)) {
      exchanger->submit_dense(groups[g].data, ctx, std::move(complete),
                              dist::Exchanger::DenseInput::kSharesGiven);
      return;
    }
    std::vector<BucketRef> refs;
    for (std::size_t b : groups[g].buckets) {
      const bool compress = step >= options.dense_steps && plan[b].compressible;
      if (compress && threshold_check_due &&
          static_cast<std::uint64_t>(step) >= Method::kThresholdCheckStep) {
        threshold_grads.emplace_back(buffers[b].begin(), buffers[b].end());
      }
      refs.push_back({plan[b].id, buffers[b], compress});
    }
    exchanger->submit(g, groups[g].shapes, std::move(refs), ctx, std::move(complete));
  }

  // The device path's hand-over: a group to compress through its device reducer (its
  // dense buckets with compressed = false, as the host reducer takes them); a group that
  // is dense now (the dense bucket alone, any group during the warm-up) averaged as the
  // host path averages it: its shares (scaled in the hook) copied to a host buffer, one
  // allreduce, copied back. So both paths compute the same sums in the same order for
  // any number of ranks (the device reducer would sum first and scale after).
  void hand_over_device(std::size_t g, const StepContext& ctx, dist::Exchanger::Done complete) {
    if (dense_now(g)) {
      hand_over_device_dense(g, ctx, std::move(complete));
      return;
    }
    const bool compress = step >= options.dense_steps;
    if (compress && threshold_check_due &&
        static_cast<std::uint64_t>(step) >= Method::kThresholdCheckStep) {
      for (std::size_t b : groups[g].buckets) {
        if (!plan[b].compressible) continue;
        const at::Tensor t = device_arena
                                 .narrow(0, static_cast<std::int64_t>(bucket_offset[b]),
                                         static_cast<std::int64_t>(plan[b].numel))
                                 .to(at::kCPU);
        threshold_grads.emplace_back(t.data_ptr<float>(), t.data_ptr<float>() + t.numel());
      }
    }
    device::Groups::Hooks hooks;
    hooks.stream = side;
    const at::Tensor data = device_data(g);
    hooks.before = [this, g, data, step = step, mirrors = std::exchange(state_mirrors[g], {})]() {
      // A checkpoint written into state()'s spans since the last step.
      if (!mirrors.empty()) {
        std::vector<std::pair<std::string, at::Tensor>> live = device_groups->state(g);
        for (std::size_t k = 0; k < live.size() && k < mirrors.size(); ++k) {
          live[k].second.copy_(mirrors[k].second);
        }
      }
      if (checks_finite()) check_finite_device(g, data, step);
    };
    if (side) hooks.after = [event = reduced[g], stream = *side] { event->record(stream); };
    device_groups->submit(g, data, group_slots[g], compress, ctx, std::move(complete),
                          std::move(hooks));
  }

  void hand_over_device_dense(std::size_t g, const StepContext& ctx,
                              dist::Exchanger::Done complete) {
    std::vector<float>& host = dense_host[g];
    host.resize(groups[g].numel);
    const at::Tensor data = device_data(g);
    const at::Tensor staged =
        at::from_blob(host.data(), {static_cast<std::int64_t>(host.size())}, at::kFloat);
    auto ready = [this, g, data, staged, step = step] {
      std::optional<c10::StreamGuard> guard;
      if (side) guard.emplace(*side);
      staged.copy_(data);  // waits for the side stream, so for the gradients' copies
      if (!checks_finite()) return;
      const std::span<const float> values(staged.data_ptr<float>(), groups[g].numel);
      const std::size_t bad = find_non_finite(values);
      if (bad < values.size()) throw non_finite_at(g, bad, values[bad], step);
    };
    auto finished = [this, g, data, staged, complete = std::move(complete)](std::exception_ptr e) {
      if (!e) {
        try {
          std::optional<c10::StreamGuard> guard;
          if (side) guard.emplace(*side);
          data.copy_(staged);
          if (side) reduced[g]->record(*side);
        } catch (...) {
          e = std::current_exception();
        }
      }
      complete(e);
    };
    exchanger->submit_dense(host, ctx, std::move(finished),
                            dist::Exchanger::DenseInput::kSharesGiven, std::move(ready));
  }

  // NonFiniteGradient for element `bad` of group g's buffer: the tensor that holds it.
  NonFiniteGradient non_finite_at(std::size_t g, std::size_t bad, float value,
                                  std::int64_t at_step) const {
    for (std::size_t b : groups[g].buckets) {
      for (const BucketPlan::Slot& s : plan[b].slots) {
        const std::size_t start = bucket_offset[b] - groups[g].offset + s.offset;
        if (bad >= start && bad < start + s.numel) {
          return NonFiniteGradient(names[s.param], s.param, bad - start, value, at_step);
        }
      }
    }
    return NonFiniteGradient("(outside every tensor)", 0, bad, value, at_step);
  }

  // On the exchange thread, before group g's reducer: NonFiniteGradient (out of finish())
  // for the first NaN or infinity in its buffer. One reduction over the group, and a
  // wait for it: the device path cannot throw out of backward without waiting for every
  // gradient's copy in the hook.
  void check_finite_device(std::size_t g, const at::Tensor& data, std::int64_t at_step) const {
    if (at::isfinite(data).all().item<bool>()) return;
    const at::Tensor host = data.to(at::kCPU);
    const std::span<const float> values(host.data_ptr<float>(), groups[g].numel);
    const std::size_t bad = find_non_finite(values);
    throw non_finite_at(g, bad, values[bad], at_step);
  }

  // A codec knows the bucket it failed on, the user the tensor: one line with both.
  [[noreturn]] void rethrow_naming_tensors(std::exception_ptr error) const {
    try {
      std::rethrow_exception(error);
    } catch (const EncodeError& e) {
      for (const BucketPlan& b : plan) {
        if (b.id == e.bucket()) {
          throw InvalidArgument("step " + std::to_string(step) + ": " + e.what() + " [bucket " +
                                std::to_string(b.id) + " is " + b.name + "]");
        }
      }
      throw;
    }
  }

  // Group g's means from its buckets into its parameters' .grad.
  void write_means(std::size_t g) {
    if (on_device) {
      // On this thread's stream, after the side stream's reducer (CUDA).
      if (side) {
        const c10::impl::VirtualGuardImpl impl(param_device.type());
        reduced[g]->block(impl.getStream(param_device));
      }
      for (const std::size_t b : groups[g].buckets) {
        for (const BucketPlan::Slot& s : plan[b].slots) {
          torch::Tensor& p = params[s.param];
          if (!p.grad().defined() || !p.grad().is_contiguous()) {
            p.mutable_grad() = torch::empty_like(p);
          }
          p.mutable_grad().view({-1}).copy_(device_slot(s.param));
          if (unscale_now(g)) p.mutable_grad().mul_(step_scale);
        }
      }
      return;
    }
    for (const std::size_t b : groups[g].buckets) {
      for (const BucketPlan::Slot& s : plan[b].slots) {
        torch::Tensor& p = params[s.param];
        if (!p.grad().defined() || !p.grad().is_contiguous()) {
          p.mutable_grad() = torch::empty_like(p);
        }
        // A copy within the host for CPU parameters, to the device for CUDA ones.
        p.mutable_grad().view({-1}).copy_(
            torch::from_blob(buffers[b].data() + s.offset, {static_cast<std::int64_t>(s.numel)},
                             torch::TensorOptions().dtype(torch::kFloat)));
        if (unscale_now(g)) p.mutable_grad().mul_(step_scale);
      }
    }
  }

  void finish() {
    {
      std::lock_guard lock(mutex);
      if (started)
        backward_seconds += std::chrono::duration<double>(last_hook - backward_start).count();
      // Parameters that got no gradient this step (unused) count as zeros.
      for (std::size_t i = 0; i < params.size(); ++i) {
        if (seen[i]) continue;
        const std::size_t b = param_bucket[i];
        if (on_device) {
          device_slot(i).zero_();
          side_waits_for_this_stream();
        } else {
          std::fill_n(buffers[b].data() + param_offset[i], params[i].numel(), 0.0f);
        }
        seen[i] = 1;
        --missing[bucket_group[b]];
      }
      hand_over_ready();
    }
    // Group by group: a group's means go into .grad while the exchanger works on the
    // next group's collective, so only the last group's copy follows the last transfer.
    // Every future is waited for even after a failure (the exchanges use our buffers).
    std::exception_ptr first;
    torch::NoGradGuard no_grad;
    for (std::size_t g = 0; g < pending.size(); ++g) {
      const Clock::time_point t0 = Clock::now();
      try {
        pending[g].get();
      } catch (...) {
        if (!first) first = std::current_exception();
      }
      exposed_seconds += seconds_since(t0);
      if (!first) write_means(g);
    }
    if (first) {
      reset_step();
      rethrow_naming_tensors(first);
    }
    compressed_last = step >= options.dense_steps;
    if (!threshold_grads.empty()) {
      const std::vector<std::span<const float>> grads(threshold_grads.begin(),
                                                      threshold_grads.end());
      if (auto w = exchanger->method().threshold_warning(grads, static_cast<std::uint64_t>(step))) {
        warnings.push_back(std::move(*w));
      }
      threshold_check_due = false;
      threshold_grads.clear();
    }
    ++step;
    reset_step();
  }
};

GradientExchange::GradientExchange(const NamedParameters& params,
                                   c10::intrusive_ptr<c10d::ProcessGroup> group,
                                   ExchangeOptions options)
    : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  impl_->owned_comm = std::make_unique<dist::Communicator>(
      dist::communicator_over(std::move(group), impl_->options.timeout));
  impl_->comm = impl_->owned_comm.get();
  impl_->build(params);
}

GradientExchange::GradientExchange(const NamedParameters& params, dist::Communicator& comm,
                                   ExchangeOptions options)
    : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  impl_->comm = &comm;
  impl_->build(params);
}

GradientExchange::~GradientExchange() {
  if (!impl_) return;
  for (std::size_t i = 0; i < impl_->params.size(); ++i) {
    impl_->accumulators[i]->del_post_hook(impl_->hook_keys[i]);
  }
  impl_->exchanger.reset();  // waits for exchanges in flight (they hold our buffers)
  // And for the device work they queued, before the arena goes back to the allocator.
  if (impl_->side) impl_->side->synchronize();
}

void GradientExchange::set_learning_rate(float lr) {
  std::lock_guard lock(impl_->mutex);
  impl_->lr = lr;
}

void GradientExchange::set_loss_scale(float scale) {
  if (!impl_->options.loss_scaling) {
    throw InvalidArgument(
        "GradientExchange::set_loss_scale: the exchange was built without "
        "ExchangeOptions::loss_scaling");
  }
  if (!(std::isfinite(scale) && scale > 0.0f)) {
    throw InvalidArgument("GradientExchange::set_loss_scale: " + std::to_string(scale) +
                          " is not a finite scale > 0");
  }
  std::lock_guard lock(impl_->mutex);
  impl_->loss_scale = scale;
}

void GradientExchange::finish() { impl_->finish(); }

bool GradientExchange::momentum_in_memory() const { return impl_->exchanger->momentum_in_memory(); }

bool GradientExchange::compressible(std::size_t i) const {
  return impl_->plan.at(impl_->param_bucket.at(i)).compressible;
}

bool GradientExchange::compressed_this_step(std::size_t i) const {
  return impl_->compressed_last && compressible(i);
}

const std::vector<BucketPlan>& GradientExchange::buckets() const { return impl_->plan; }

std::string GradientExchange::describe() const {
  if (impl_->on_device) return impl_->device_groups->describe();
  if (impl_->param_device.is_cuda()) {
    return impl_->exchanger->describe() + " staged through the host from " +
           impl_->param_device.str();
  }
  return impl_->exchanger->describe();
}

bool GradientExchange::on_device() const { return impl_->on_device; }

std::string GradientExchange::schedule() const {
  return impl_->exchanger->method().schedule(impl_->run_shape());
}

std::vector<std::string> GradientExchange::take_warnings() {
  return std::exchange(impl_->warnings, {});
}

ExchangeStats GradientExchange::take_stats() {
  ExchangeStats s;
  s.reduce = impl_->exchanger->take_stats();
  s.exposed_seconds = std::exchange(impl_->exposed_seconds, 0.0);
  s.backward_seconds = std::exchange(impl_->backward_seconds, 0.0);
  return s;
}

std::vector<StateBuffer> GradientExchange::state() {
  impl_->exchanger->drain();
  if (impl_->side) impl_->side->synchronize();  // the device reducers' last writes
  std::vector<StateBuffer> out;
  for (std::size_t g = 0; g < impl_->groups.size(); ++g) {
    if (!impl_->on_device) {
      for (StateBuffer& s : impl_->exchanger->state(g)) out.push_back(std::move(s));
      continue;
    }
    // Host copies of the device memories (kept, and copied back before the group's next
    // step, so that what the caller writes into them is restored). Copied again only
    // after a step: until then the ones handed out last hold what counts.
    auto& mirrors = impl_->state_mirrors[g];
    if (mirrors.empty()) {
      for (const auto& [name, t] : impl_->device_groups->state(g)) {
        mirrors.emplace_back(
            name, t.to(at::kCPU, /*non_blocking=*/false, /*copy=*/true).contiguous().view({-1}));
      }
    }
    for (auto& [name, t] : mirrors) {
      out.push_back(
          {name, std::span<float>(t.data_ptr<float>(), static_cast<std::size_t>(t.numel()))});
    }
  }
  // Reducers name their state "bucket<id>.<name>" (gradcomp/reducer.h): in bucket id
  // order, as a reducer over every bucket lists it, whatever the grouping.
  std::stable_sort(out.begin(), out.end(), [](const StateBuffer& a, const StateBuffer& b) {
    return state_bucket_id(a.name) < state_bucket_id(b.name);
  });
  return out;
}

std::int64_t GradientExchange::step() const { return impl_->step; }

void GradientExchange::set_step(std::int64_t step) {
  if (step < 0) throw InvalidArgument("GradientExchange: step " + std::to_string(step) + " < 0");
  impl_->step = step;
}

}  // namespace gradcomp
