// What one step of a reducer scheme puts on the wire, per worker, for a model's buckets:
// the answer of a scheme's registry entry (SchemeDescription::traffic, registry.h) to the
// cost model (`gradcomp advise`, src/advise), which turns it into its plan without knowing
// which scheme it asked. Derived from the scheme's validated parameters with the rules its
// reducer applies (which matrices PowerSGD factors, the sketch geometry), so a new scheme
// is costed by describing it once. Torch-free.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "gradcomp/layout.h"

namespace gradcomp {

class Params;

enum class Collective : std::uint8_t { kAllreduce, kAllgather, kScatter };
// "allreduce", "allgather", "scatter".
const char* to_string(Collective kind);

// One collective of the allreduce topology. bytes: the allreduced buffer, the largest
// message one worker contributes to the allgather, or one worker's whole message that the
// scatter reducer sends 1/W to each owner (and gets back as the owners' means).
struct CollectiveRound {
  std::string what = {};  // "sketches + dense", "Q", ...
  Collective kind = Collective::kAllreduce;
  double bytes = 0.0;
};

// One request/reply exchange with the parameter servers, bytes per worker.
struct ServerRound {
  std::string what = {};
  double push_bytes = 0.0;
  double pull_bytes = 0.0;  // the servers' reply
};

// Seconds per compressed element on one core, and where the figures come from.
struct ElementCost {
  double encode = 0.0;
  double decode = 0.0;
  std::string source = {};  // "lab constant", ...
};

struct SchemeTraffic {
  // The allreduce topology: the scheme's collectives, in order (the first one carries the
  // buckets it leaves dense as fp32).
  std::vector<CollectiveRound> rounds = {};
  // The synchronous parameter server (--topology ps-sync); empty when the scheme cannot
  // run there (SchemeDescription::runs_on_ps_sync false), server_note says why.
  std::vector<ServerRound> server_rounds = {};
  std::string server_note = {};
  std::size_t compressed_elements = 0;  // elements in the buckets it compresses
  std::size_t compressed_buckets = 0;   // those buckets (powersgd: the matrices it factors)
  // How to time it when the scheme itself was not timed (`gradcomp bench scheme`): the
  // codec spec whose measured speed stands in for it ("" for none), else fallback.
  std::string speed_spec = {};
  ElementCost fallback = {};
};

// A scheme's traffic for these buckets (a whole model, or one exchange group of it).
using SchemeTrafficFn =
    std::function<SchemeTraffic(const Params&, std::span<const BucketPlan> buckets)>;

}  // namespace gradcomp
