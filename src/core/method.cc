// Method (gradcomp/method.h): a compressor spec parsed once for its run.
#include "gradcomp/method.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "detail/run_text.h"
#include "gradcomp/error.h"
#include "gradcomp/json.h"
#include "gradcomp/wire.h"

namespace gradcomp {

ReducerKind parse_reducer_kind(std::string_view name) {
  if (name == "auto") return ReducerKind::kAuto;
  if (name == "dense") return ReducerKind::kDense;
  if (name == "allreduce") return ReducerKind::kAllreduce;
  if (name == "allgather") return ReducerKind::kAllgather;
  if (name == "scatter") return ReducerKind::kScatter;
  throw InvalidArgument("reducer: unknown kind '" + std::string(name) +
                        "' (known: auto, allgather, allreduce, dense, scatter)");
}

const char* to_string(ReducerKind kind) {
  switch (kind) {
    case ReducerKind::kAuto:
      return "auto";
    case ReducerKind::kDense:
      return "dense";
    case ReducerKind::kAllreduce:
      return "allreduce";
    case ReducerKind::kAllgather:
      return "allgather";
    case ReducerKind::kScatter:
      return "scatter";
  }
  return "?";
}

Topology parse_topology(std::string_view name) {
  if (name == "allreduce") return Topology::kAllreduce;
  if (name == "ps-sync") return Topology::kPsSync;
  if (name == "ps-async") return Topology::kPsAsync;
  throw InvalidArgument("--topology " + std::string(name) +
                        ": unknown (known: allreduce, ps-sync, ps-async)");
}

const char* to_string(Topology topology) {
  switch (topology) {
    case Topology::kAllreduce:
      return "allreduce";
    case Topology::kPsSync:
      return "ps-sync";
    case Topology::kPsAsync:
      return "ps-async";
  }
  return "?";
}

Downlink parse_downlink(std::string_view name) {
  if (name == "dense") return Downlink::kDense;
  if (name == "compressed") return Downlink::kCompressed;
  throw InvalidArgument("--ps-downlink " + std::string(name) +
                        ": unknown (known: dense, compressed)");
}

const char* to_string(Downlink downlink) {
  return downlink == Downlink::kDense ? "dense" : "compressed";
}

std::string default_compressor(ReducerKind kind) {
  switch (kind) {
    case ReducerKind::kDense:
      return "none";
    case ReducerKind::kAllreduce:
      return "fp16";
    case ReducerKind::kAllgather:
      return "efm(topk:ratio=0.01)";
    case ReducerKind::kScatter:
      return "int";
    case ReducerKind::kAuto:
      break;
  }
  return "powersgd";
}

namespace {

// The none codec is the dense baseline: under kAuto it is averaged densely. Compared by
// wire id, the registry's own name for a codec.
bool is_dense_codec(const Codec& codec) {
  return codec.wire_id() == static_cast<std::uint16_t>(WireId::kNone);
}

bool same_number(double a, double b) {
  // To float precision: the trainer and GradientExchange hold momentum as a float.
  return std::abs(a - b) <= 1e-6 * std::max(1.0, std::abs(b));
}

bool has_param(std::span<const ParamDef> defs, std::string_view key) {
  return std::any_of(defs.begin(), defs.end(), [&](const ParamDef& d) { return d.key == key; });
}

}  // namespace

Method Method::parse(std::string_view spec, const MethodContext& context,
                     const CodecRegistry& registry) {
  Method m;
  m.registry_ = &registry;
  m.context_ = context;
  m.written_ = std::string(spec);
  // A bare biased codec gets its default memory (CodecRegistry::with_default_memory: efm
  // under momentum SGD). On ps-async the servers apply the momentum themselves: the
  // workers' default memory is plain error feedback.
  if (context.momentum) {
    const double momentum = context.topology == Topology::kPsAsync ? 0.0 : *context.momentum;
    m.spec_ = registry.with_default_memory(spec, momentum);
  } else {
    m.spec_ = std::string(spec);
  }
  m.node_ = std::make_shared<const SpecNode>(parse_spec(m.spec_));

  if ((m.scheme_ = registry.find_scheme(m.node_->name)) != nullptr) {
    m.scheme_params_ = resolve_params(m.scheme_->name, m.scheme_->params, *m.node_);
    const std::string canonical = m.scheme_params_.canonical();
    m.canonical_ = canonical.empty() ? m.scheme_->name : m.scheme_->name + ":" + canonical;
    m.momentum_in_memory_ = m.scheme_->carries_momentum;
  } else {
    // Validates the whole spec (wrappers, named memories, every parameter) once.
    const std::unique_ptr<Memory> probe = registry.make_memory(*m.node_, m.spec_, 0);
    m.canonical_ = probe->spec();
    m.momentum_in_memory_ = probe->carries_momentum();
    m.codec_ = registry.make_codec_of(m.spec_);
    if ((m.memory_ = registry.find_memory(m.node_->name)) != nullptr) {
      m.memory_params_ = resolve_params(m.memory_->name, m.memory_->params, *m.node_);
    }
    const SpecNode* innermost = m.node_.get();
    while (innermost->inner) innermost = innermost->inner.get();
    const CodecInfo* info = registry.find(innermost->name);
    if (info != nullptr && info->fixed_threshold) {
      m.fixed_threshold_ = info->fixed_threshold(CodecRegistry::resolve_params(*info, *innermost));
      m.threshold_codec_ = info->name;
    }
  }
  m.resolve_reducer();
  m.check_context();
  // A dense reducer keeps no memory: the optimizer applies its momentum everywhere (the
  // spec's own momentum was still checked against the optimizer's above).
  if (m.dense_only()) m.momentum_in_memory_ = false;
  return m;
}

Method Method::with_momentum(double momentum, bool nesterov) const {
  MethodContext c = context_;
  c.momentum = momentum;
  c.nesterov = nesterov;
  // The spec as first written: parse applies the default memory for this momentum.
  return parse(written_, c, *registry_);
}

void Method::resolve_reducer() {
  const ReducerKind asked = context_.reducer;
  if (scheme_ != nullptr) {
    if (asked != ReducerKind::kAuto) {
      throw InvalidArgument("reducer: " + scheme_->name + " is a reducer of its own; --reducer " +
                            to_string(asked) + " cannot be combined with it (use auto)");
    }
    reducer_ = ReducerKind::kAuto;
    return;
  }
  switch (asked) {
    case ReducerKind::kAuto:
      reducer_ = is_dense_codec(*codec_)   ? ReducerKind::kDense
                 : codec_->traits().linear ? ReducerKind::kAllreduce
                                           : ReducerKind::kAllgather;
      dense_fallback_ = reducer_ == ReducerKind::kAllgather;
      return;
    case ReducerKind::kAllreduce:
      if (!codec_->traits().linear) {
        throw InvalidArgument("reducer: allreduce needs a linear codec; " + codec_->spec() +
                              " is not (use allgather or auto)");
      }
      break;
    case ReducerKind::kScatter:
      // The owner's stage keeps plain error feedback or none; a named memory (DGC) keeps
      // state the owner could not mirror.
      if (memory_ != nullptr) {
        throw InvalidArgument("reducer: scatter runs a codec under ef, efm, noef or bare; " +
                              node_->name + " is a memory of its own (use allgather)");
      }
      break;
    case ReducerKind::kDense:
      // It sends every bucket as fp32: a compressor named with it would be reported as
      // running while nothing is compressed.
      if (!is_dense_codec(*codec_)) {
        throw InvalidArgument("reducer: dense sends every bucket uncompressed; " + codec_->spec() +
                              " compresses (use auto, allreduce or allgather, or the "
                              "compressor none)");
      }
      break;
    case ReducerKind::kAllgather:
      break;
  }
  reducer_ = asked;
}

void Method::check_context() const {
  const MethodContext& c = context_;
  // A memory or scheme that keeps the optimizer's momentum must have the optimizer's, or
  // the compressed and the dense tensors would train with different momenta, silently.
  // efm(...) reads the optimizer's and cannot disagree.
  if (c.momentum && momentum_in_memory_) {
    const SpecNode& n = *node_;
    // The parameters parse resolved: the scheme's or the named memory's (efm has none).
    const Params* p = scheme_ != nullptr ? &scheme_params_ : &memory_params_;
    std::span<const ParamDef> defs;
    if (scheme_ != nullptr) {
      defs = scheme_->params;
    } else if (memory_ != nullptr) {
      defs = memory_->params;
    }
    if (has_param(defs, "momentum") && !same_number(p->get_float("momentum"), *c.momentum)) {
      // Worded for every front end (the CLI's --momentum, gradcomp.torch.SGD, DiLoCo's
      // outer loop, whose exchange has no momentum of its own).
      throw InvalidArgument(
          "spec '" + spec_ + "': its momentum " + json_number(p->get_float("momentum")) +
          " differs from the optimizer's momentum " + json_number(*c.momentum) + "; " + n.name +
          " applies momentum in place of the optimizer, so they must agree "
          "(write momentum=" +
          json_number(*c.momentum) + " in the spec)");
    }
    if (has_param(defs, "nesterov") && p->get_bool("nesterov") != c.nesterov) {
      throw InvalidArgument("spec '" + spec_ +
                            "': nesterov=" + (p->get_bool("nesterov") ? "1" : "0") +
                            " but the optimizer's Nesterov momentum is " +
                            (c.nesterov ? "on" : "off") + "; they must agree");
    }
  }
  if (c.topology == Topology::kAllreduce) return;
  if (scheme_ != nullptr && !(scheme_->runs_on_ps_sync && c.topology == Topology::kPsSync)) {
    throw InvalidArgument("--compressor " + spec_ +
                          " is a reducer scheme of its own; it runs with --topology allreduce" +
                          (scheme_->runs_on_ps_sync ? " or ps-sync" : ""));
  }
  if (c.topology == Topology::kPsAsync && momentum_in_memory_) {
    throw InvalidArgument("--compressor " + spec_ +
                          " carries the optimizer's momentum, but on ps-async the servers "
                          "apply it: it would be applied twice (use it with ps-sync)");
  }
  if (scheme_ != nullptr && c.downlink == Downlink::kCompressed) {
    throw InvalidArgument("--ps-downlink compressed: " + scheme_->name +
                          "'s reply is already the sparse top k; use the dense downlink");
  }
}

std::string Method::schedule(const RunShape& run) const {
  if (scheme_ != nullptr && scheme_->schedule) return scheme_->schedule(scheme_params_, run);
  if (memory_ != nullptr && memory_->schedule) return memory_->schedule(memory_params_, run);
  return {};
}

std::vector<std::string> Method::start_warnings(const RunShape& run) const {
  if (scheme_ != nullptr && scheme_->warnings) return scheme_->warnings(scheme_params_, run);
  if (memory_ != nullptr && memory_->warnings) return memory_->warnings(memory_params_, run);
  // Error feedback around a codec it may not suit.
  const SpecNode& n = *node_;
  if ((n.name == "ef" || n.name == "efm") && n.inner) {
    const CodecInfo* info = registry_->find(n.inner->name);
    if (info != nullptr && !info->feedback_warning.empty()) {
      return {"warning: " + n.name + "(" + info->name + "): " + info->feedback_warning};
    }
  }
  return {};
}

std::optional<std::string> Method::threshold_warning(std::span<const std::span<const float>> grads,
                                                     std::uint64_t step) const {
  const double tau = fixed_threshold_;
  if (!(tau > 0.0)) return std::nullopt;
  double scale = 0;
  for (const std::span<const float> g : grads) {
    if (g.empty()) continue;
    double sum = 0;
    for (const float x : g) sum += std::abs(static_cast<double>(x));
    const double mean = sum / static_cast<double>(g.size());
    if (std::isfinite(mean)) scale = std::max(scale, mean);
  }
  if (!(scale > 0.0) || !(tau > kThresholdFarAbove * scale)) return std::nullopt;
  const std::string& c = threshold_codec_;
  return "warning: " + c + ": threshold=" + detail::number_text(tau) + " is " +
         detail::ratio_text(tau / scale) + "x the gradients' mean |g| (" +
         detail::number_text(scale, 3) + " at step " + std::to_string(step) +
         "): a typical entry waits ~" + detail::ratio_text(tau / scale) +
         " steps in the residual before it is sent; the default " + c +
         " (no threshold=) scales tau to the residual";
}

std::unique_ptr<Memory> Method::make_memory(std::size_t n) const {
  if (scheme_ != nullptr) {
    throw InvalidArgument(scheme_->name + " is a reducer scheme: it has no per-bucket memory");
  }
  return registry_->make_memory(*node_, spec_, n);
}

}  // namespace gradcomp
