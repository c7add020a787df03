// How fast this machine encodes and decodes, per element of gradient, one core: the
// codec specs' figures come from `gradcomp bench codec`, the reducer schemes' (PowerSGD,
// Sketched-SGD, FetchSGD) from `gradcomp bench scheme`, which runs the scheme itself in
// a world of one -- both run on the spot by the CLI, or read from their --json output.
// Without a scheme's row, a scheme is approximated as its registry entry says
// (SchemeTraffic: a sketch scheme by its count sketch codec, else per-element constants
// from the network lab; docs/cost-model.md, "Codec and scheme costs"). Torch-free.
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
  // A scheme's timing is of one model's buckets (`bench scheme` rows name it); codec
  // speeds are per element of any gradient (empty).
  std::string model = {};
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

// Reads `gradcomp bench codec --json` and `gradcomp bench scheme --json` output: every
// {"kind": "codec"} and {"kind": "scheme"} line's encode_ms and decode_ms over its n,
// under its "spec" and its "memory" (codec) or "canonical" (scheme). A scheme row is a
// timing of one model's buckets: with `model` given, rows of other models are skipped (a
// file may hold several models' timings). InvalidArgument when a codec or scheme line
// lacks those numbers, has a negative time, or when there is no such line at all.
SpeedTable parse_bench_json(std::string_view text, std::string_view model = {});

// The speed of a plan: the table's entry for its spec (by spec, then canonical); for a
// scheme without one, the entry of the codec standing in for it (speed_spec) or its
// fallback (lab constants); zero for dense. nullptr-like (source empty) when a codec
// spec is missing from the table.
CodecSpeed speed_of(const MethodPlan& plan, const SpeedTable& table);

// `gradcomp bench codec` decodes the message of the spec's codec alone; for a named
// memory (dgc) that is the codec of its largest, warm-up density. Scales such a
// speed's decode to the steady-state message of `spec` (sparse decodes cost in
// proportion to the message). Other specs are returned unchanged.
CodecSpeed steady_state_decode(const CodecSpeed& speed, const std::string& spec,
                               const CodecRegistry& registry = builtin_registry());

}  // namespace gradcomp::advise
