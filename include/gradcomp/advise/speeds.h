// How fast this machine encodes and decodes, per element of gradient, one core: the
// codec specs' figures come from `gradcomp bench codec` (run on the spot by the CLI, or
// read from its --json output); the reducer schemes, which that bench does not run,
// use per-element constants fit from the network lab's encode/decode split
// (docs/cost-model.md, "Codec and scheme costs"). Torch-free.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "gradcomp/advise/messages.h"

namespace gradcomp::advise {

struct CodecSpeed {
  double encode = 0.0;  // seconds per gradient element (error feedback included)
  double decode = 0.0;  // seconds per gradient element, one message decoded
  std::string source;   // "bench", "file", "lab constant", ...
  // The bench's input size and the message it decoded (0: unknown).
  double bench_n = 0.0;
  double bench_message_bytes = 0.0;
};

class SpeedTable {
 public:
  // By the spec as given and by the memory's canonical spec.
  void set(const std::string& spec, CodecSpeed speed);
  const CodecSpeed* find(std::string_view spec) const;
  bool empty() const { return by_spec_.empty(); }

 private:
  std::map<std::string, CodecSpeed, std::less<>> by_spec_;
};

// Reads `gradcomp bench codec --json` output: every {"kind": "codec"} line's encode_ms
// and decode_ms over its n, under its "spec" and its "memory". InvalidArgument when a
// codec line lacks them, or when no line is a codec row.
SpeedTable parse_bench_json(std::string_view text);

// The speed of a plan: the table's entry for a codec spec (by spec, then canonical),
// the lab constants for a scheme, zero for dense. nullptr-like (source empty) when a
// codec spec is missing from the table.
CodecSpeed speed_of(const MethodPlan& plan, const SpeedTable& table);

// `gradcomp bench codec` decodes the message of the spec's codec alone; for a named
// memory (dgc) that is the codec of its largest, warm-up density. Scales such a
// speed's decode to the steady-state message of `spec` (sparse decodes cost in
// proportion to the message). Other specs are returned unchanged.
CodecSpeed steady_state_decode(const CodecSpeed& speed, const std::string& spec,
                               const CodecRegistry& registry = builtin_registry());

}  // namespace gradcomp::advise
