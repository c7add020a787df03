// What a compressor spec puts on the wire each step, per worker, for a model's buckets:
// its rounds (which collective, how many bytes) under the allreduce topology and under
// the synchronous parameter server. Codec and named-memory specs are measured, not
// re-derived: a deterministic synthetic gradient of each bucket's size is encoded
// through the registry (make_memory, then Memory::compress) and its byte count taken,
// so the model follows the wire format. Reducer schemes (powersgd, sketched-sgd,
// fetchsgd) describe their own traffic in their registry entry
// (SchemeDescription::traffic, gradcomp/scheme_traffic.h).
// Torch-free.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gradcomp/layout.h"
#include "gradcomp/registry.h"

namespace gradcomp::advise {

// The rounds of the core's scheme traffic (gradcomp/scheme_traffic.h), codecs' and
// dense's included.
using Round = CollectiveRound;
using PsRound = ServerRound;

// What the step model, the speeds and the sweep ask of a plan, set where it is built
// (its family is only the label reports print).
struct PlanTraits {
  // Averages every bucket as fp32 ("none"): nothing to encode, decode or time; the
  // baseline of the speedups.
  bool dense = false;
  // A reducer scheme: timed as a whole (`gradcomp bench scheme`), by its spec or
  // canonical spec.
  bool scheme = false;
  // Every collective it runs is an allreduce (dense, linear codecs, the schemes): its
  // bytes per worker stay under twice the buffer whatever W. false: it allgathers.
  bool all_allreduce = false;
  // Its allreduces are independent, each of a buffer backward has finished, so backward
  // can hide them (dense, linear codecs). A scheme's later rounds wait for its first;
  // allgathered messages are decoded after the gather.
  bool overlappable = false;
  // Allgathered messages: each worker decodes W of them.
  bool decode_per_peer = false;
};

inline constexpr PlanTraits kDenseTraits{
    .dense = true, .all_allreduce = true, .overlappable = true};

// A method run as an outer loop's exchange (gradcomp train --sync-every): written
// SPEC+--sync-every=H[+--fragments=F][+--delay=D][+--outer=RULE][+--mix=A], the flags of
// gradcomp train. Every H / F inner steps one fragment's pseudo-gradient is exchanged by
// SPEC; with D > 0 that exchange overlaps the next D steps.
struct OuterPlan {
  std::int64_t sync_every = 0;  // H; 0: a per-step method
  int fragments = 1;            // F
  std::int64_t delay = 0;       // D
  std::string flags;            // "+--sync-every=30+...", as written (a per-step method's
                                // "+--reducer=scatter" too, its sync_every 0)
};

// One fragment's exchange: its collectives and the elements its codec encodes.
struct FragmentPlan {
  std::vector<CollectiveRound> rounds;
  std::size_t compressed_elements = 0;
};

struct MethodPlan {
  std::string spec;       // as given
  std::string canonical;  // the memory's or scheme's canonical spec
  // What reports print: "dense", "allreduce", "allgather", or the scheme's name.
  std::string family;
  PlanTraits traits = {};
  // Allreduce topology: every exchange group's collectives, group after group (the
  // trainer's GradientExchange runs one job per group of buckets; layout.h).
  std::vector<Round> rounds;
  std::vector<Round> dense_rounds;      // what dense ("none") sends in the same groups
  std::vector<PsRound> ps_rounds;       // ps-sync; empty: not available there
  std::string ps_note;                  // why not, when ps_rounds is empty
  double gradient_bytes = 0.0;          // 4 * elements of the model
  std::size_t compressed_elements = 0;  // elements in buckets that are compressed
  std::size_t compressed_buckets = 0;   // buckets that are compressed (powersgd: factored)
  double message_bytes = 0.0;           // one worker's compressed messages (codec specs)
  // A scheme not timed itself: the codec whose measured speed stands in for it (the
  // sketch schemes' count sketch codec), "" for none; without that, `fallback` (lab
  // constants). Empty for codecs, which are measured themselves.
  std::string speed_spec;
  ElementCost fallback = {};
  // An outer loop (outer.sync_every > 0): `spec` is the exchange's compressor, and each
  // fragment's collectives replace `rounds` (one exchange job per fragment).
  OuterPlan outer = {};
  std::vector<FragmentPlan> fragments;
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

// The plan of one spec ("none" is dense, SPEC+--sync-every=H... an outer loop: OuterPlan)
// over the model's parameters. InvalidArgument for an unknown or malformed spec.
MethodPlan plan_method(std::string_view spec, std::span<const ParamInfo> params,
                       const PlanOptions& options = {},
                       const CodecRegistry& registry = builtin_registry());

}  // namespace gradcomp::advise
