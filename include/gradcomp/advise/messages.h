// What a compressor spec puts on the wire each step, per worker, for a model's buckets:
// its rounds (which collective, how many bytes) under the allreduce topology and under
// the synchronous parameter server. Codec and named-memory specs are measured, not
// re-derived: a deterministic synthetic gradient of each bucket's size is encoded
// through the registry (make_memory, then Memory::compress) and its byte count taken,
// so the model follows the wire format. Reducer schemes (powersgd, sketched-sgd,
// fetchsgd) are derived from their parameters with the reducers' own helpers.
// Torch-free.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gradcomp/layout.h"
#include "gradcomp/registry.h"

namespace gradcomp::advise {

enum class Collective { kAllreduce, kAllgather };

// One collective of the allreduce topology. bytes: the allreduced buffer, or the largest
// message one worker contributes to the allgather.
struct Round {
  std::string what;  // "dense fp32 + linear regions", "P", "Q", "messages", ...
  Collective kind = Collective::kAllreduce;
  double bytes = 0.0;
};

// One request/reply exchange with the parameter servers (bytes per worker).
struct PsRound {
  std::string what;
  double push_bytes = 0.0;
  double pull_bytes = 0.0;
};

struct MethodPlan {
  std::string spec;       // as given
  std::string canonical;  // the memory's or scheme's canonical spec
  std::string family;  // "dense", "allreduce", "allgather", "powersgd", "sketched-sgd", "fetchsgd"
  // Allreduce topology: every exchange group's collectives, group after group (the
  // trainer's GradientExchange runs one job per group of buckets; layout.h).
  std::vector<Round> rounds;
  std::vector<Round> dense_rounds;      // what dense ("none") sends in the same groups
  std::vector<PsRound> ps_rounds;       // ps-sync; empty: not available there
  std::string ps_note;                  // why not, when ps_rounds is empty
  double gradient_bytes = 0.0;          // 4 * elements of the model
  std::size_t compressed_elements = 0;  // elements in buckets that are compressed
  double message_bytes = 0.0;           // one worker's compressed messages (codec specs)
  bool decode_per_peer = false;         // allgather: each worker decodes W messages
  int rank = 0;                         // powersgd: the rank (encode cost scales with it)
  // The codec whose measured speed approximates a sketch scheme's when the scheme itself
  // was not timed (`gradcomp bench scheme`): the count sketch codec of the same rows,
  // table share and decoded share (building the sketch is their encode, ranking every
  // coordinate's estimate their decode; their momentum and error passes are left out).
  // Empty: none (PowerSGD falls back to lab constants; codecs are measured themselves).
  std::string speed_spec;
};

struct PlanOptions {
  LayoutOptions layout{.bucket_mb = 0.0, .min_elements = 1024, .dense_share = 0.01};
  // GradientExchange's ExchangeOptions::min_group_mb; unset: its default_group_mb()
  // (1 MiB for dense, 25 MiB for a compressed method).
  std::optional<double> min_group_mb;
};

// Bytes of one message of `spec` (a codec or named-memory spec, wrappers allowed) for
// an n-element synthetic gradient: Memory::compress's return value at step 0, without
// a warm-up schedule (steady state). InvalidArgument for an unknown spec.
std::size_t encoded_bytes(const CodecRegistry& registry, std::string_view spec, std::size_t n);

// The plan of one spec ("none" is dense) over the model's parameters. InvalidArgument
// for an unknown or malformed spec.
MethodPlan plan_method(std::string_view spec, std::span<const ParamInfo> params,
                       const PlanOptions& options = {},
                       const CodecRegistry& registry = builtin_registry());

}  // namespace gradcomp::advise
