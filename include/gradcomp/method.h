// A compression method: what `--compressor SPEC` means in one run, parsed and validated
// once, then handed to every layer instead of the string.
//
// faiss's index_factory is the model: a string is parsed once into an object that callers
// question ("is it linear? does it carry the optimizer's momentum?") and that builds what
// runs it (the codec, one memory per bucket; the distributed layer builds the reducer from
// it, gradcomp/dist/reducers.h). Nothing outside the registry compares method names or
// parses the spec again, and nobody builds a probe reducer to learn a trait.
//
// The context is the run around the spec: the reducer asked for, the topology, the
// optimizer's momentum. Method::parse applies what the context implies (a bare biased
// codec gets momentum-corrected error feedback under momentum SGD: with_default_memory)
// and refuses, with one InvalidArgument line, a spec that cannot run in it (a scheme under
// a forced reducer, allreduce of a non-linear codec, a scheme on a parameter server that
// cannot run it, momentum kept in a memory that disagrees with the optimizer's, ...).
// Torch-free.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gradcomp/codec.h"
#include "gradcomp/memory.h"
#include "gradcomp/registry.h"

namespace gradcomp {

// How the workers combine compressed buckets (gradcomp/dist/reducers.h):
// kAuto: dense for the none codec, allreduce for a linear codec, allgather otherwise (with
// a dense fallback for a bucket whose gathered message would be larger); a scheme runs
// its own exchange. kScatter, only when asked for: each rank owns 1/W of every bucket,
// receives every rank's compressed slice of it, and sends back the compressed mean (any
// codec, 2(W-1)/W of a message per rank, like a ring allreduce; error feedback at both
// ends when the method keeps one).
enum class ReducerKind : std::uint8_t { kAuto, kDense, kAllreduce, kAllgather, kScatter };
// "auto", "dense", "allreduce", "allgather", "scatter"; InvalidArgument otherwise.
ReducerKind parse_reducer_kind(std::string_view name);
const char* to_string(ReducerKind kind);

// Who exchanges with whom: every worker with every other (allreduce), or workers with
// parameter servers, synchronously or not (gradcomp/dist/ps.h).
enum class Topology : std::uint8_t { kAllreduce, kPsSync, kPsAsync };
// What the parameter servers send back: the dense update or a compressed one.
enum class Downlink : std::uint8_t { kDense, kCompressed };
// "allreduce", "ps-sync", "ps-async" / "dense", "compressed"; InvalidArgument otherwise.
Topology parse_topology(std::string_view name);
const char* to_string(Topology topology);
Downlink parse_downlink(std::string_view name);
const char* to_string(Downlink downlink);

// The compressor an exchange gets when it names none (gradcomp train, ExchangeOptions, the
// Python hook): under kAuto PowerSGD rank 4 with error feedback ("powersgd"), the best
// recipe measured on the main job (docs/measurements/accuracy.md: 0.28 points from dense
// at 89.5x, where top-k 1% lands 0.42 at 20.7x). PowerSGD is an exchange of its own, so a
// named reducer gets a codec it can run: kAllgather top-k 1% with momentum-corrected error
// feedback, kAllreduce the best linear codec measured, "fp16" (0.09 points at 2x; random-k
// loses 1.81), kDense "none" (it compresses nothing). A parameter server, which runs
// codecs, takes kAllgather's.
std::string default_compressor(ReducerKind kind);

// The run a method is parsed for.
struct MethodContext {
  ReducerKind reducer = ReducerKind::kAuto;
  Topology topology = Topology::kAllreduce;
  Downlink downlink = Downlink::kDense;
  // The optimizer's momentum and Nesterov flag. Known: a bare biased codec gets efm(...)
  // when momentum > 0, ef(...) when 0, and a method that keeps the momentum itself (dgc,
  // sketched-sgd, fetchsgd) must have the same. nullopt: not known yet (the Python hook
  // before it sees the optimizer): the spec runs as written (a bare biased codec gets
  // plain error feedback) until Method::with_momentum.
  std::optional<double> momentum = std::nullopt;
  bool nesterov = false;
};

class Method {
 public:
  // Parses and validates `spec` for `context`; InvalidArgument with one line otherwise.
  // The registry must outlive the method.
  static Method parse(std::string_view spec, const MethodContext& context = {},
                      const CodecRegistry& registry = builtin_registry());

  // The same spec for an optimizer with this momentum (parse with context.momentum set).
  Method with_momentum(double momentum, bool nesterov) const;

  // The spec as it runs: as written, with the default memory applied ("efm(topk)"). What
  // headers print and ranks compare.
  const std::string& spec() const { return spec_; }
  // Every parameter spelled out in declaration order ("efm(topk:ratio=0.01,...)",
  // "powersgd:rank=4,...").
  const std::string& canonical() const { return canonical_; }
  // The outermost name of the spec: "efm", "dgc", "powersgd", "none".
  const std::string& name() const { return node_->name; }
  const MethodContext& context() const { return context_; }
  const CodecRegistry& registry() const { return *registry_; }

  // A reducer scheme (an exchange protocol of its own) rather than a codec: its
  // description and validated parameters.
  bool is_scheme() const { return scheme_ != nullptr; }
  const SchemeDescription* scheme() const { return scheme_; }
  const Params& scheme_params() const { return scheme_params_; }

  // The reducer that runs a codec method: the context's, kAuto resolved (kDense for the
  // none codec, kAllreduce for a linear codec, kAllgather otherwise). kAuto for a scheme.
  ReducerKind reducer() const { return reducer_; }
  // kAllgather chosen by kAuto: a bucket goes dense in a step where its gathered message
  // would put more bytes on the wire.
  bool dense_fallback() const { return dense_fallback_; }
  // Every bucket is averaged densely, whatever it is (none under kAuto, or kDense).
  bool dense_only() const { return reducer_ == ReducerKind::kDense; }
  // The messages may be summed while compressed (a linear codec).
  bool linear() const { return codec_ != nullptr && codec_->traits().linear; }
  // The method keeps the optimizer's momentum for the tensors it compresses (efm, dgc with
  // correction, sketched-sgd, fetchsgd; not under a dense reducer, which keeps no
  // memory): the optimizer must skip momentum there.
  bool momentum_in_memory() const { return momentum_in_memory_; }

  // A named memory's validated parameters, every one spelled out ("dgc:..."; a device
  // reducer runs DGC from them); empty for other methods.
  const Params& memory_params() const { return memory_params_; }

  // The codec of the method's messages (what decodes what a memory sends: the codec
  // inside ef/efm/noef, a named memory's message codec); null for a scheme.
  const std::shared_ptr<const Codec>& codec() const { return codec_; }
  // The memory of one bucket of n elements (a codec method; InvalidArgument for a scheme).
  std::unique_ptr<Memory> make_memory(std::size_t n) const;

  // What the method will do in this run, in words (each registry entry's hooks:
  // registry.h, RunSchedule / RunWarnings). One line for the run's header, "" when the
  // method has no schedule, e.g.
  //   "dgc warm-up: 58 steps of 468 (4 epochs capped at 1/8 of the run), 4 stages of
  //    14.6 steps at density 0.25, 0.0625, 0.015625, 0.00390625, then 0.001"
  //   "powersgd warm-up: 100 dense steps of 702, then rank 4"
  std::string schedule(const RunShape& run) const;
  // The start-of-run warnings, one line each: a dgc warm-up longer than 1/8 of the run
  // (capped) or off (steps per epoch unknown); a sketch with fewer columns than the
  // candidates it ranks; error feedback on count-sketch estimates; a powersgd warm-up that
  // covers the whole run. gradcomp train prints them, GradientExchange returns them
  // (take_warnings), the Python package emits them with warnings.warn.
  std::vector<std::string> start_warnings(const RunShape& run) const;
  // The threshold the spec fixes (2bit:threshold=T, bare or inside ef/efm/noef), 0 when
  // it has none. At step kThresholdCheckStep (after the first steps, whose gradients are
  // the largest) it is compared with the compressed buckets' gradients: a warning when
  // T > kThresholdFarAbove * the largest bucket's mean |g| (empty spans and non-finite
  // means ignored), since an entry of typical size then waits that many steps in the
  // residual before it is sent once.
  double fixed_threshold() const { return fixed_threshold_; }
  std::optional<std::string> threshold_warning(std::span<const std::span<const float>> grads,
                                               std::uint64_t step) const;
  static constexpr std::uint64_t kThresholdCheckStep = 10;
  static constexpr double kThresholdFarAbove = 10.0;

 private:
  Method() = default;
  void resolve_reducer();
  void check_context() const;

  const CodecRegistry* registry_ = nullptr;
  MethodContext context_;
  std::string written_;  // as given to parse
  std::string spec_;
  std::string canonical_;
  std::shared_ptr<const SpecNode> node_;  // shared: a Method is a value, copied freely
  const SchemeDescription* scheme_ = nullptr;
  Params scheme_params_;
  std::shared_ptr<const Codec> codec_;
  const MemoryInfo* memory_ = nullptr;  // a named memory (dgc) and its parameters
  Params memory_params_;
  double fixed_threshold_ = 0;
  std::string threshold_codec_;  // the codec whose threshold it is
  ReducerKind reducer_ = ReducerKind::kAuto;
  bool dense_fallback_ = false;
  bool momentum_in_memory_ = false;
};

}  // namespace gradcomp
