#include "train/job_config.h"

#include <string>

#include "gradcomp/dist/reducers.h"
#include "gradcomp/json.h"
#include "gradcomp/layout.h"
#include "gradcomp/registry.h"
#include "gradcomp/wire.h"

namespace gradcomp::train {

namespace {

// The group size in effect: a compressed exchange's default differs from a dense one's.
double effective_group_mb(const JobOptions& o, const Method& method) {
  return o.train.min_group_mb.value_or(default_group_mb(method.dense_only()));
}

const char* decay_name(LrDecay d) {
  switch (d) {
    case LrDecay::kConstant:
      return "constant";
    case LrDecay::kStep:
      return "step";
    case LrDecay::kCosine:
      return "cosine";
  }
  return "?";
}

template <class T>
std::string list_of(const std::vector<T>& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

}  // namespace

ModelConfig job_model_config(const JobOptions& o, const data::Dataset& shape_of) {
  ModelConfig mc = o.train.model;
  mc.in_c = shape_of.c;
  mc.in_h = shape_of.h;
  mc.in_w = shape_of.w;
  mc.num_classes = shape_of.num_classes;
  mc.seed = o.train.seed;
  return mc;
}

ConfigFields job_config_fields(const JobOptions& o, const Method& method, int world_size,
                               Model& model, std::span<const BucketPlan> plan) {
  const TrainConfig& t = o.train;
  const bool ps = o.topology != dist::Topology::kAllreduce;
  auto yes_no = [](bool b) { return std::string(b ? "on" : "off"); };
  auto ps_only = [ps](const std::string& v) { return ps ? v : std::string("-"); };
  const bool adamw = t.optimizer == OptimizerKind::kAdamW;
  auto sgd_only = [adamw](const std::string& v) { return adamw ? std::string("-") : v; };
  auto adamw_only = [adamw](const std::string& v) { return adamw ? v : std::string("-"); };
  ConfigFields f = {
      {"wire format version", std::to_string(kWireVersion)},
      {"world size", std::to_string(world_size)},
      {"--topology", dist::to_string(o.topology)},
      {"--servers", ps_only(std::to_string(o.servers))},
      {"--ps-downlink", ps_only(dist::to_string(o.downlink))},
      {"--max-staleness", ps_only(std::to_string(o.max_staleness))},
      {"--async-momentum", o.topology == dist::Topology::kPsAsync
                               ? dist::to_string(o.async_momentum)
                               : std::string("-")},
      {"--ps-split-elements", ps_only(std::to_string(o.split_elements))},
      {"--compressor", method.canonical()},
      {"--reducer", dist::to_string(o.reducer)},
      {"--seed", std::to_string(t.seed)},
      {"gradient dtype", "float32"},
      {"--model", t.model.name},
      {"--dataset", o.data.dataset},
      {"--synthetic-train",
       o.data.dataset == "synthetic" ? std::to_string(o.data.synthetic_train) : std::string("-")},
      {"--context",
       is_text_dataset(o.data.dataset) ? std::to_string(o.data.context) : std::string("-")},
      {"--batch-size", std::to_string(t.batch_size)},
      {"--epochs", std::to_string(t.epochs)},
      {"--steps", std::to_string(t.max_steps)},
      {"--dense-steps", std::to_string(t.dense_steps)},
      {"--sync-every", std::to_string(o.outer_loop.sync_every)},
      {"--outer", o.outer_loop.sync_every > 0 ? o.outer_loop.outer : std::string("-")},
      {"--fragments", std::to_string(o.outer_loop.fragments)},
      {"--delay", std::to_string(o.outer_loop.delay)},
      {"--mix", json_number(o.outer_loop.mix)},
      {"--lr", json_number(t.lr)},
      {"--warmup-steps", std::to_string(t.warmup_steps)},
      {"--lr-decay", decay_name(t.decay)},
      {"--milestones", list_of(t.milestone_epochs)},
      {"--gamma", json_number(t.gamma)},
      {"--optimizer", to_string(t.optimizer)},
      {"--momentum", sgd_only(json_number(t.sgd.momentum))},
      {"--nesterov", sgd_only(yes_no(t.sgd.nesterov))},
      {"--adam-beta1", adamw_only(json_number(t.adamw.beta1))},
      {"--adam-beta2", adamw_only(json_number(t.adamw.beta2))},
      {"--adam-eps", adamw_only(json_number(t.adamw.eps))},
      {"--weight-decay", json_number(adamw ? t.adamw.weight_decay : t.sgd.weight_decay)},
      {"--bucket-mb", json_number(t.layout.bucket_mb)},
      {"--min-elements", std::to_string(t.layout.min_elements)},
      {"--dense-share", json_number(t.layout.dense_share)},
      // The size in effect (its default depends on the exchange), so that a rank given
      // the default and one given the same value explicitly agree.
      {"--min-group-mb", ps ? std::string("-") : json_number(effective_group_mb(o, method))},
      {"--resume", yes_no(t.resume)},
  };
  const auto params = model.named_parameters(/*recurse=*/true);
  f.push_back({"model parameters", std::to_string(params.size())});
  std::size_t i = 0;
  for (const auto& p : params) {
    ++i;
    f.push_back({"model parameter " + std::to_string(i) + " (" + p.key() + ") shape",
                 list_of(p.value().sizes().vec())});
  }
  f.push_back({"buckets", std::to_string(plan.size())});
  for (const BucketPlan& b : plan) {
    f.push_back({"bucket " + std::to_string(b.id) + " (" + b.name + ")",
                 std::to_string(b.numel) + " elements, " +
                     (b.compressible ? "compressed" : "dense") +
                     (b.rows ? ", " + std::to_string(b.rows) + " rows" : "")});
  }
  return f;
}

}  // namespace gradcomp::train
