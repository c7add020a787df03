// Reducers over a Communicator (see gradcomp/reducer.h for the interface):
//   dense      fp32 allreduce of every bucket, the uncompressed baseline;
//   allreduce  linear codecs (randomk, fp16, none): the summable region of every
//              compressed bucket's message is allreduced, then decoded once;
//   allgather  every other codec: every rank's messages are gathered and each is
//              decoded into the bucket with weight 1/W;
//   scatter    any codec, when asked for: rank j receives every rank's compressed slice j
//              of each bucket, decodes their mean and sends it back compressed, point to
//              point (src/dist/scatter_reducer.cc).
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
#include <vector>

#include "gradcomp/dist/communicator.h"
#include "gradcomp/method.h"
#include "gradcomp/reducer.h"
#include "gradcomp/registry.h"

namespace gradcomp::dist {

// The reducer kinds and the default compressor live with the Method (gradcomp/method.h).
using gradcomp::default_compressor;
using gradcomp::parse_reducer_kind;
using gradcomp::ReducerKind;
using gradcomp::to_string;

// Builds the reducer that runs `method` for buckets of the given shapes (in the order
// reduce() receives them): the method's scheme, or a fused reducer of its kind
// (method.reducer()) with one Memory per bucket from method.make_memory(size) (the dense
// reducer has none). A bucket passed with compressed == false in a step is averaged
// densely instead and its memory is left untouched. With method.dense_fallback() a bucket
// goes in the dense allreduce for any step where its gathered message would put more bytes
// on the wire (Memory::compress_dense; counted in ReduceStats::dense_fallbacks). The
// communicator must outlive the reducer.
std::unique_ptr<Reducer> make_reducer(const Method& method, Communicator& comm,
                                      std::span<const BucketShape> buckets);

// What the reducer make_reducer(method, ...) builds says it is (Reducer::describe()):
// "dense", "allreduce(fp16)", "allgather(efm(topk:ratio=0.01,...))", "powersgd:rank=4,...".
std::string describe_reducer(const Method& method);

// The same for a spec parsed here with only the reducer kind as its context (tests,
// benchmarks): InvalidArgument as Method::parse.
std::unique_ptr<Reducer> make_reducer(const std::string& compressor_spec, ReducerKind kind,
                                      Communicator& comm, std::span<const BucketShape> buckets,
                                      const CodecRegistry& registry = builtin_registry());
// The same for flat buckets with ids 0, 1, ... (tests).
std::unique_ptr<Reducer> make_reducer(const std::string& compressor_spec, ReducerKind kind,
                                      Communicator& comm, std::span<const std::size_t> bucket_sizes,
                                      const CodecRegistry& registry = builtin_registry());

// The allgather's messages, shared by every reducer that gathers them (this one, the
// device reducer of gradcomp/device/reducer.h): rank r's segment [offsets[r],
// offsets[r + 1]) of `gathered` split into its n_messages messages (header + payload),
// out[r * n_messages + j]. Checks the framing only (lengths; CorruptMessage naming the
// rank and message); each message's contents are the decoder's to check.
void split_gathered(std::span<const std::byte> gathered, std::span<const std::size_t> offsets,
                    std::size_t world, std::size_t n_messages,
                    std::vector<std::span<const std::byte>>& out);

}  // namespace gradcomp::dist
