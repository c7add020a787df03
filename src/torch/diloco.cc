#include "gradcomp/torch/diloco.h"

#include <utility>

#include "gradcomp/dist/process_group.h"
#include "gradcomp/error.h"

namespace gradcomp {

DiLoCo::DiLoCo(const NamedParameters& params, c10::intrusive_ptr<c10d::ProcessGroup> group,
               DiLoCoOptions options)
    : options_(std::move(options)) {
  owned_comm_ = std::make_unique<dist::Communicator>(
      dist::communicator_over(std::move(group), options_.timeout));
  build(params, *owned_comm_);
}

DiLoCo::DiLoCo(const NamedParameters& params, dist::Communicator& comm, DiLoCoOptions options)
    : options_(std::move(options)) {
  build(params, comm);
}

DiLoCo::~DiLoCo() = default;

void DiLoCo::build(const NamedParameters& params, dist::Communicator& comm) {
  std::vector<std::pair<std::string, at::Tensor>> trained;
  std::vector<ParamInfo> infos;
  for (const auto& item : params) {
    const torch::Tensor& p = item.value();
    if (!p.requires_grad()) continue;
    trained.emplace_back(item.key(), p);
    infos.push_back({item.key(), p.numel(), p.dim(), p.dim() > 0 ? p.size(0) : 0});
  }
  staging_ =
      std::make_unique<device::ParameterStaging>(trained, "DiLoCo", options_.stage_cpu_parameters);
  const Method method = dist::parse_outer_method(options_.compressor, options_.reducer);
  dist::OuterLoopOptions o;
  o.sync_every = options_.sync_every;
  o.outer = options_.outer;
  o.fragments = options_.fragments;
  o.delay = options_.delay;
  o.mix = options_.mix;
  o.layout = options_.layout;
  o.seed = options_.seed;
  torch::NoGradGuard no_grad;  // the broadcast writes into the parameters
  loop_ = std::make_unique<dist::OuterLoop>(staging_->spans(), infos, comm, method, o,
                                            staging_->staged() ? staging_.get() : nullptr);
}

bool DiLoCo::step() {
  staging_->check_unchanged();
  torch::NoGradGuard no_grad;
  const bool changed = loop_->after_inner_step(steps_ + 1);
  ++steps_;
  return changed;
}

void DiLoCo::synchronize() {
  staging_->check_unchanged();
  torch::NoGradGuard no_grad;
  loop_->synchronize(steps_);
}

void DiLoCo::set_inner_steps(std::int64_t steps) {
  if (steps < 0) throw InvalidArgument("DiLoCo: negative inner step count");
  steps_ = steps;
  loop_->resume_at(steps);
}

std::vector<StateBuffer> DiLoCo::state() { return loop_->state(); }

std::string DiLoCo::describe() const { return loop_->describe(); }

ExchangeStats DiLoCo::take_stats() {
  ExchangeStats s;
  s.reduce = loop_->take_stats();
  s.exposed_seconds = loop_->take_wait_seconds();
  return s;
}

}  // namespace gradcomp
