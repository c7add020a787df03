// Building codecs and memories from spec strings, faiss-style.
//
//   spec    := wrapper '(' spec ')' | name [ ':' param { ',' param } ]
//   param   := key '=' value
//   wrapper := 'ef' | 'efm' | 'noef'
//
// Examples: "topk:ratio=0.001", "ef(qsgd:levels=16,bucket=512)", "noef(2bit)",
// "efm(topk:ratio=0.01)".
// A plain biased codec (traits.needs_memory) gets error feedback by default;
// noef(...) switches it off for ablations; ef(...) adds it to any codec; efm(...) is
// error feedback with momentum correction (make_momentum_error_feedback, memory.h).
// Which of ef and efm a bare codec gets depends on the optimizer: see
// CodecRegistry::with_default_memory, which Method::parse (gradcomp/method.h) applies for
// every way in (gradcomp train, the LibTorch GradientExchange, the Python hook).
// The grammar is strict: names and keys are [a-z0-9_-]+, values are consumed whole
// by std::from_chars, no whitespace inside. Unknown names and keys, duplicate keys,
// malformed and out-of-range values throw InvalidArgument listing the known choices.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "gradcomp/codec.h"
#include "gradcomp/memory.h"
#include "gradcomp/scheme_traffic.h"

namespace gradcomp {

// ---- the run a method is described for ---------------------------------------------

// What a method will do in one run depends on the run's length and on what it compresses:
// the hooks below describe it for the run's header and its start-of-run warnings
// (Method::schedule, Method::start_warnings in gradcomp/method.h).
struct RunShape {
  std::uint64_t steps_per_epoch = 0;  // 0: unknown
  std::uint64_t total_steps = 0;      // steps of the whole run; 0: unknown
  // Elements of every bucket that is exchanged compressed (the layout's compressible
  // buckets), for the sketch geometry check.
  std::vector<std::size_t> compressed_sizes;
};

// ---- parsed spec strings --------------------------------------------------------

struct SpecNode {
  std::string name;
  std::vector<std::pair<std::string, std::string>> params;  // in the order written
  std::unique_ptr<SpecNode> inner;                          // set for wrapper(inner)
};

// Parses the grammar above; throws InvalidArgument with the offending position.
SpecNode parse_spec(std::string_view spec);

// ---- parameters -----------------------------------------------------------------

enum class ParamKind : std::uint8_t { kInt, kFloat, kChoice, kBool };

struct ParamDef {
  std::string key;
  ParamKind kind = ParamKind::kFloat;
  std::string default_value;  // as a user would type it
  std::string help;
  double min = 0;  // inclusive bounds for kInt / kFloat ...
  double max = 0;
  bool min_exclusive = false;        // ... unless the lower bound is exclusive (ratio > 0)
  std::vector<std::string> choices;  // kChoice
};

ParamDef int_param(std::string key, std::int64_t def, std::int64_t min, std::int64_t max,
                   std::string help);
ParamDef float_param(std::string key, double def, double min, double max, std::string help,
                     bool min_exclusive = false);
ParamDef choice_param(std::string key, std::string def, std::vector<std::string> choices,
                      std::string help);
ParamDef bool_param(std::string key, bool def, std::string help);

// Validated parameter values, every declared key present (defaults filled in).
class Params {
 public:
  using Value = std::variant<std::int64_t, double, std::string, bool>;

  std::int64_t get_int(std::string_view key) const;
  double get_float(std::string_view key) const;
  const std::string& get_choice(std::string_view key) const;
  bool get_bool(std::string_view key) const;

  // "k1=v1,k2=v2" in declaration order, numbers in shortest round-trip form.
  std::string canonical() const;

  void set(std::string key, Value v);

 private:
  const Value& at(std::string_view key) const;
  std::vector<std::pair<std::string, Value>> values_;
};

// Validates node's parameters against defs (unknown keys, malformed and out-of-range
// values throw InvalidArgument naming `owner`), filling in defaults.
Params resolve_params(const std::string& owner, std::span<const ParamDef> defs,
                      const SpecNode& node);

// What an entry says about a run, from its validated parameters: one line for the run's
// header ("" when there is nothing to say), and start-of-run warnings, one line each,
// when its settings cannot do what was asked in this run. Optional (empty: nothing).
using RunSchedule = std::function<std::string(const Params&, const RunShape&)>;
using RunWarnings = std::function<std::vector<std::string>(const Params&, const RunShape&)>;

// ---- named memories ---------------------------------------------------------------

// A memory with an algorithm and parameters of its own (DGC's momentum correction),
// written on its own in a compressor spec ("dgc:density=0.001") instead of wrapping a
// codec. Its messages are those of a plain registered codec, named by codec_spec(params):
// make_memory() builds that codec and hands it to make(), and make_codec_of() returns it,
// so receivers decode what the memory sends with an ordinary codec.
struct MemoryInfo {
  std::string name;
  std::string summary;  // one line for `gradcomp list`
  std::vector<ParamDef> params;
  // Further specs (besides the defaults) that the registry tests build and `gradcomp list`
  // shows, e.g. "dgc:density=0.01,warmup_epochs=0".
  std::vector<std::string> examples;
  // The plain codec spec of the memory's messages, e.g. "topk:ratio=0.25,select=sampled".
  std::function<std::string(const Params&)> codec_spec;
  // A memory for a bucket of n elements whose messages `codec` decodes.
  std::function<std::unique_ptr<Memory>(const Params&, std::shared_ptr<const Codec> codec,
                                        std::size_t n)>
      make;
  RunSchedule schedule = {};  // dgc: its density warm-up
  RunWarnings warnings = {};
};

// ---- reducer schemes ----------------------------------------------------------------

// A method that is a whole exchange protocol rather than a codec under a generic reducer
// (PowerSGD, Sketched-SGD, FetchSGD): what it is, without the code that runs it. The
// registry holds it so that a Method (gradcomp/method.h) is parsed and questioned in the
// core; the distributed layer pairs each description with its reducer
// (gradcomp/dist/schemes.h). Users name schemes in --compressor exactly like codecs
// ("powersgd:rank=2").
struct SchemeDescription {
  std::string name;     // what users type: "powersgd"
  std::string summary;  // one line for `gradcomp list`
  std::vector<ParamDef> params;
  std::vector<std::string> examples;
  // Keeps the momentum of the tensors it compresses (its "momentum" parameter, which must
  // equal the optimizer's): the optimizer skips momentum there.
  bool carries_momentum = false;
  // Also runs on a ps-sync parameter server (the server merges what the workers send and
  // replies with the sparse update itself: a dense downlink only).
  bool runs_on_ps_sync = false;
  RunSchedule schedule = {};  // powersgd: its dense warm-up
  RunWarnings warnings = {};
  // What one step sends for a model's buckets, and how to time it (the cost model,
  // gradcomp/scheme_traffic.h). Every built-in scheme has one.
  SchemeTrafficFn traffic = {};
};

// The canonical spec of a scheme spec ("powersgd" -> "powersgd:rank=4,..."), validating
// its parameters; InvalidArgument for unknown keys or bad values.
std::string canonical_scheme_spec(const SchemeDescription& info, const SpecNode& node);

// ---- codec registry -------------------------------------------------------------

struct CodecInfo {
  std::string name;
  std::uint16_t wire_id = 0;  // unique per codec; written into every message header
  std::string summary;        // one line for `gradcomp list`
  CodecTraits traits;         // as listed; an instance may refine them from its parameters
  std::vector<ParamDef> params;
  // Further spec strings (besides the defaults) that the generic codec contract tests
  // sweep, e.g. "topk:ratio=0.5,select=exact". Shown as examples by `gradcomp list`.
  std::vector<std::string> examples;
  std::function<std::unique_ptr<Codec>(CodecIdentity, const Params&)> make;
  // Why error feedback (ef/efm) on this codec can fail, warned at the start of a run that
  // asks for it; empty: nothing to warn about.
  std::string feedback_warning = {};
  // A threshold the spec fixes (2bit:threshold=T), 0 when it has none: checked against
  // the gradients' scale once (Method::threshold_warning). Empty: the codec has none.
  std::function<double(const Params&)> fixed_threshold = {};
};

class CodecRegistry {
 public:
  // Throws InvalidArgument on a duplicate name or wire id.
  void add(CodecInfo info);

  const CodecInfo* find(std::string_view name) const;
  const CodecInfo* find_wire_id(std::uint16_t id) const;
  std::vector<const CodecInfo*> all() const;  // sorted by name
  std::string known_names() const;            // "1bit, 2bit, fp16, ..."

  // Named memories share the namespace of codecs and wrappers. Throws InvalidArgument on
  // a name already taken or a missing codec_spec / factory.
  void add_memory(MemoryInfo info);
  const MemoryInfo* find_memory(std::string_view name) const;
  std::vector<const MemoryInfo*> memories() const;  // sorted by name

  // Reducer schemes share the namespace too. Throws InvalidArgument on a name taken.
  void add_scheme(SchemeDescription info);
  const SchemeDescription* find_scheme(std::string_view name) const;
  std::vector<const SchemeDescription*> schemes() const;  // sorted by name

  // A plain codec spec ("qsgd:levels=16"); wrappers are rejected.
  std::shared_ptr<const Codec> make_codec(std::string_view spec) const;
  std::shared_ptr<const Codec> make_codec(const SpecNode& node) const;

  // A full compressor spec, wrappers and named memories allowed, for a bucket of n elements.
  std::unique_ptr<Memory> make_memory(std::string_view spec, std::size_t n) const;
  // The same for a spec already parsed into `node` (`spec` names it in messages).
  std::unique_ptr<Memory> make_memory(const SpecNode& node, std::string_view spec,
                                      std::size_t n) const;

  // The spec a bare biased codec means under an optimizer with momentum m: "efm(spec)"
  // when m > 0 (momentum correction: the measured best recipe for every biased codec
  // under momentum SGD, docs/measurements/accuracy.md), "ef(spec)" when m == 0. Wrapped
  // specs, named memories, unbiased codecs and names this registry does not know (the
  // reducer schemes) come back unchanged; a bad spec throws as make_memory would.
  std::string with_default_memory(std::string_view spec, double momentum) const;

  // The codec inside a compressor spec: ef(...) and noef(...) are stripped, so
  // "ef(topk:ratio=0.01)" gives the codec that decodes what make_memory's memory sends;
  // a named memory gives the codec of its codec_spec ("dgc:density=0.001" -> topk).
  std::shared_ptr<const Codec> make_codec_of(std::string_view compressor_spec) const;

  // Validates `node`'s parameters against info's declarations, filling defaults.
  static Params resolve_params(const CodecInfo& info, const SpecNode& node);

 private:
  // The memory's validated parameters and its codec, for make_memory / make_codec_of.
  std::pair<Params, std::shared_ptr<const Codec>> memory_codec(const MemoryInfo& info,
                                                               const SpecNode& node,
                                                               std::string_view spec) const;

  std::map<std::string, CodecInfo, std::less<>> codecs_;
  std::map<std::string, MemoryInfo, std::less<>> memories_;
  std::map<std::string, SchemeDescription, std::less<>> schemes_;
};

// Registers every built-in codec, named memory and scheme description. Explicit (no static
// initialisers a linker may drop).
void register_builtin_codecs(CodecRegistry& registry);

// A process-wide registry holding the built-in codecs, built on first use.
const CodecRegistry& builtin_registry();

}  // namespace gradcomp
