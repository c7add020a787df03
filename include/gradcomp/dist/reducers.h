// Reducers over a Communicator (see gradcomp/reducer.h for the interface):
//   dense      fp32 allreduce of every bucket, the uncompressed baseline;
//   allreduce  linear codecs (randomk, fp16, none): the summable region of every
//              compressed bucket's message is allreduced, then decoded once;
//   allgather  every other codec: every rank's messages are gathered and each is
//              decoded into the bucket with weight 1/W.
// Each step is fused into as few collectives as possible, issued in a fixed order:
//   1. one fp32 allreduce: all uncompressed buckets + every fp32 linear region
//      (bf16 regions are widened into it as well: Gloo has no bf16 sum);
//   2. one fp16 allreduce of every fp16 linear region (Gloo sums gloo::float16);
//   3. allgather only: one size exchange, then one allgather of this rank's messages
//      (concatenated; skipped when every rank sends nothing).
// Empty steps are skipped on every rank alike, so ranks never disagree.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>

#include "gradcomp/dist/communicator.h"
#include "gradcomp/reducer.h"
#include "gradcomp/registry.h"

namespace gradcomp::dist {

enum class ReducerKind { kAuto, kDense, kAllreduce, kAllgather };

// "auto", "dense", "allreduce", "allgather"; InvalidArgument otherwise.
ReducerKind parse_reducer_kind(std::string_view name);
const char* to_string(ReducerKind kind);

// The compressor an exchange gets when it names none (gradcomp train, ExchangeOptions):
// under kAuto PowerSGD rank 4 with error feedback ("powersgd"), the best recipe measured on
// the main job (docs/measurements/accuracy.md: 0.28 points from dense at 89.5x, where top-k
// 1% lands 0.42 at 20.7x). PowerSGD is an exchange of its own, so a named reducer gets a
// codec it can run: kAllgather top-k 1% with momentum-corrected error feedback, kAllreduce
// the best linear codec measured, "fp16" (0.09 points at 2x; random-k loses 1.81), kDense
// "none" (it compresses nothing). A parameter server, which runs codecs, takes kAllgather's.
std::string default_compressor(ReducerKind kind);

// Builds a reducer for buckets of the given sizes (in the order reduce() receives them).
// One Memory per bucket comes from registry.make_memory(compressor_spec, size) (the
// dense reducer has none); a bucket passed with compressed == false that step is
// averaged densely instead and its memory is left untouched.
// kAuto picks dense for "none", allreduce for a linear codec, allgather otherwise, and
// with allgather sends a bucket in the dense allreduce for any step where its gathered
// message would put more bytes on the wire (Memory::compress_dense; counted in
// ReduceStats::dense_fallbacks). kAllgather gathers every compressed bucket, whatever
// it costs. Forcing allreduce on a non-linear codec throws InvalidArgument. The communicator
// must outlive the reducer.
std::unique_ptr<Reducer> make_reducer(const std::string& compressor_spec, ReducerKind kind,
                                      Communicator& comm, std::span<const BucketShape> buckets,
                                      const CodecRegistry& registry = builtin_registry());
// Whether the reducer make_reducer(compressor_spec, kind) builds averages every bucket
// densely (its dense_only()): --reducer dense, or auto with the none codec. Decides the
// default exchange-group size (gradcomp/layout.h's default_group_mb) without building a
// reducer. InvalidArgument for an invalid spec; combinations of a valid spec and kind that
// make_reducer refuses (a scheme under --reducer dense) are left to it.
bool exchanges_dense(const std::string& compressor_spec, ReducerKind kind,
                     const CodecRegistry& registry = builtin_registry());

// The same for flat buckets with ids 0, 1, ... (tests).
std::unique_ptr<Reducer> make_reducer(const std::string& compressor_spec, ReducerKind kind,
                                      Communicator& comm, std::span<const std::size_t> bucket_sizes,
                                      const CodecRegistry& registry = builtin_registry());

}  // namespace gradcomp::dist
