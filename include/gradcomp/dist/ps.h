// Parameter-server topologies (MXNet kvstore dist_sync / dist_async, ATOMO's PS,
// BytePS's compressed downlink) on the same c10d group the allreduce reducers use:
// point-to-point Communicator messages with tags, receive-from-any for async.
//
// Roles. A run of W workers and S servers is one group of S + W ranks: workers are
// ranks 0 .. W-1 (so worker 0 is rank 0: it prints progress, writes metrics and the
// report, and hosts the TCPStore in an env-based launch), servers are ranks W .. W+S-1.
//
// Keys. Every bucket becomes one or more keys (plan_keys): buckets larger than
// split_elements are cut into S contiguous ranges, one per server (MXNet's
// MXNET_KVSTORE_BIGARRAY_BOUND, 10^6 elements, is the default bound); the rest are
// placed whole, largest first, on the least-loaded server. No server then carries more
// than total/S elements plus one bucket. A key's messages are encoded on its own range,
// with its own error-feedback memory.
//
// Synchronous (ps-sync): each step a worker sends every server one push (a frame and
// one payload holding a record per key the server owns: the codec message, or fp32 for
// dense buckets); the server decodes the W pushes of each key in worker order into the
// mean (sum of decode(msg_w) / W, exactly what the allgather reducer computes), and
// answers every worker with the same reply: the dense fp32 mean (`dense` downlink,
// MXNet), or the mean re-encoded with the server's own error feedback (`compressed`,
// BytePS). Deterministic: no any-source receive in sync mode.
//
// Sketched-SGD (--compressor sketched-sgd on ps-sync; src/dist/ps/sketch_plan.h): the
// workers push count sketches of their accumulated momentum, the server merges them,
// answers with the candidate heavy hitters, collects the workers' exact values there
// (a second push) and replies with the top k; the workers zero their momentum and error
// where the update landed. The same updates as the allreduce scheme.
//
// Asynchronous (ps-async): servers hold the weights of their keys and apply SGD (the
// workers' momentum / Nesterov / weight decay, lr carried in each push) to every push
// as it arrives, scaled by 1/W so that one push from every worker moves the weights as
// far as one synchronous step; the reply is the key's latest weights (fp32). A worker
// never waits for another unless --max-staleness N is given: then the reply to a
// worker's push c (its c-th step) is held until every worker has pushed at least
// c - N times (stale-synchronous parallel; N = 0 is bulk-synchronous). Staleness of a
// push = updates the server applied between the weights the worker computed on and
// this push (0 = perfectly fresh); the servers send their histograms to worker 0 at
// the end.
//
// Asynchrony adds momentum of its own (Mitliagkas, Zhang, Hadjis and Ré, "Asynchrony
// begets momentum", 2016: about 1 - 1/W with W workers), so by default
// (AsyncMomentum::kCompensate) the servers take it out of the momentum they apply:
// m_server = max(0, m - (1 - 1/W)), at the learning rate that keeps lr / (1 - m), the
// step's long-run size (async_server_optimizer). Default MLP job, 4 workers, one epoch,
// 3 seeds: -1.60 -> -0.75..-0.83 points against allreduce dense with nothing compressed,
// ef(2bit) -3.06 -> -0.28 (docs/measurements/parameter-server.md).
//
// Wire (every PS message): a 48-byte frame on one tag, then, when it announces a
// payload, the payload on the next tag. Frame, little-endian:
//    0 4 magic "GCPS"   4 2 version (1)   6 2 kind (1 hello, 2 push, 3 reply, 4 done, 5 stats,
//                                                    6 candidates)
//    8 4 sender rank   12 4 record count  16 8 step (sync) / worker clock (async)
//   24 8 payload bytes 32 4 f32 lr        36 4 aux (hello: worker count; reply: staleness;
//                                                   sync push: the run's total steps, 0 =
//                                                   unknown; async push: 1 = epoch end)
//   40 8 aux64 (hello: configuration hash; push: steps per epoch; async reply: version)
// Record: 0 4 key id, 4 1 kind (1 fp32, 2 codec message, 3 sketch table, 4 u32 indices,
// 5 sparse update), 5 3 zero, 8 4 bytes, 12 data.
// Everything is validated before it is applied: the frame (magic, version, kind, zero
// padding, the sender rank against the rank Gloo reports, the step), each record (the
// key must be this server's next key, the kind and length must fit it), each codec
// message (decode_add checks codec id, config tag, length and contents). A violation
// ends the run with CorruptMessage naming the rank and its role.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gradcomp/dist/communicator.h"
#include "gradcomp/method.h"
#include "gradcomp/reducer.h"
#include "gradcomp/registry.h"
#include "gradcomp/weight_exchange.h"

namespace gradcomp::dist {

// The topologies and downlinks are part of a Method's context (gradcomp/method.h).
using gradcomp::Downlink;
using gradcomp::parse_downlink;
using gradcomp::parse_topology;
using gradcomp::to_string;
using gradcomp::Topology;

inline constexpr std::size_t kDefaultSplitElements = 1'000'000;

// ps-async: the momentum the servers apply (see the rule above).
enum class AsyncMomentum {
  kCompensate,  // m - (1 - 1/W), floored at 0, at the lr that keeps lr / (1 - m)
  kAsGiven,     // the workers' --momentum and lr as they are
};
AsyncMomentum parse_async_momentum(std::string_view name);  // "compensate" | "as-given"
const char* to_string(AsyncMomentum rule);

// One key: a contiguous range of one bucket, owned by one server.
struct PsKey {
  std::uint32_t id = 0;    // 0, 1, ... in (bucket, offset) order
  std::size_t bucket = 0;  // index into the shapes (reduce() order)
  std::uint32_t bucket_id = 0;
  std::uint32_t part = 0;  // 0 for a whole bucket; j for the j-th range of a split one
  std::uint32_t parts = 1;
  std::size_t offset = 0;  // elements from the bucket's start
  std::size_t numel = 0;
  int server = 0;  // 0 .. S-1
  bool compressible = true;
  std::uint32_t rows = 0;  // the range's matrix view when it is whole rows, else 0
  // StepContext::bucket for this key: the bucket id for part 0 (so an unsplit bucket
  // draws exactly the randomness the allreduce reducers draw), bucket id | part << 20
  // for the other parts.
  std::uint32_t context_bucket() const { return bucket_id | (part << 20); }
};

// Pure function of its arguments (the same on every rank). servers >= 1.
std::vector<PsKey> plan_keys(std::span<const BucketShape> buckets, int servers,
                             std::size_t split_elements = kDefaultSplitElements);

struct PsConfig {
  Topology topology = Topology::kPsSync;
  int servers = 1;
  int workers = 1;
  std::string compressor = "none";
  Downlink downlink = Downlink::kDense;
  int max_staleness = -1;  // async: -1 unbounded
  std::size_t split_elements = kDefaultSplitElements;
  std::uint64_t seed = 0;
  // Async: the optimizer the servers apply (the workers' --momentum, --nesterov,
  // --weight-decay).
  double momentum = 0.0;
  bool nesterov = false;
  double weight_decay = 0.0;
  AsyncMomentum async_momentum = AsyncMomentum::kCompensate;

  // The compressor parsed for this topology and downlink (gradcomp/method.h), as written
  // (gradcomp train hands over the spec with its default memory already applied):
  // InvalidArgument for what a parameter server cannot run.
  Method method(const CodecRegistry& registry = builtin_registry()) const;

  bool is_server(int rank) const { return rank >= workers; }
  int server_rank(int s) const { return workers + s; }
  // "server 1 (rank 5)" / "worker 2 (rank 2)"
  std::string role_of(int rank) const;
};

// What the ps-async servers apply to each push, from the configuration's momentum,
// worker count and rule: momentum, and the factor on the workers' lr (before the 1/W).
struct AsyncServerOptimizer {
  double momentum = 0.0;
  double lr_scale = 1.0;
  double implicit = 0.0;  // the momentum asynchrony is taken to add: 1 - 1/W
};
AsyncServerOptimizer async_server_optimizer(const PsConfig& config);
// For the run's header: ", server momentum 0.15 at 8.5x lr (asynchrony's 0.75 taken out)"
// or ", server momentum 0.9 as given".
std::string describe_async_optimizer(const PsConfig& config);

// Staleness histogram: staleness -> pushes.
using StalenessHistogram = std::map<std::uint64_t, std::uint64_t>;

// A worker's side of the parameter server: a Reducer. ps-sync: reduce() pushes and
// pulls the mean gradient. ps-async: the servers hold the weights, so the worker is also
// a WeightExchange (gradcomp/weight_exchange.h) and exchange_weights() replaces the
// weights instead (reduce() is refused). finish() tells the servers this worker is done
// (call it once, after the last step); on worker 0 it also collects the servers'
// staleness histograms.
class PsWorker : public Reducer {
 public:
  virtual void finish() = 0;
  // Worker 0 after finish(): every server's pushes (async); empty otherwise.
  virtual StalenessHistogram staleness() const = 0;
};

// Builds a worker (config.topology ps-sync or ps-async; a ps-async one is a
// WeightExchange) and shakes hands with every server: a server built for another
// configuration (compressor, buckets, topology, counts) rejects it and both sides throw
// InvalidArgument. comm.world_size() must be workers + servers and comm.rank() < workers.
std::unique_ptr<PsWorker> make_ps_worker(const PsConfig& config, Communicator& comm,
                                         std::span<const BucketShape> buckets,
                                         const CodecRegistry& registry = builtin_registry());

struct PsServerReport {
  std::uint64_t steps = 0;  // pushes handled per worker (sync) / all pushes (async)
  std::uint64_t bytes_received = 0;
  std::uint64_t bytes_sent = 0;
  StalenessHistogram staleness;
};

// A server's own state across a restart (gradcomp train --checkpoint-dir / --resume).
// The server says what and when; the caller owns the files (gradcomp_dist knows no file
// format). fp32 arrays are named "key<id>/<state>": a compressed downlink's error
// feedback (ps-sync), "weights" and "velocity" (ps-async); counters are ps-async's
// weights version and every worker's clock. Servers without state (ps-sync with a dense
// downlink) never call either function; empty functions: no checkpoints.
struct PsServerCheckpoints {
  // The state after `step` rounds. ps-sync: at the end of every epoch, before the reply
  // that completes it (so a worker's checkpoint of that step implies the server's), and
  // when the workers finish; ps-async: when a worker is the first to end its e-th epoch
  // (before its reply, so a server checkpoint at least as new stands beside every
  // worker's), and at the end, with `step` the weights version (updates applied, growing
  // across restarts).
  std::function<void(std::uint64_t step, std::span<const StateBuffer> arrays,
                     std::span<const std::int64_t> counters)>
      save;
  // Fills arrays and counters (the names and sizes save() wrote) from the state after
  // `step` rounds (ps-sync: the step the workers resume at) or the newest (ps-async:
  // nullopt). Returns false, writing nothing, when there is no such checkpoint; throws
  // InvalidArgument for a file that does not fit.
  std::function<bool(std::optional<std::uint64_t> step, std::span<const StateBuffer> arrays,
                     std::span<std::int64_t> counters)>
      load;
};

// A server's whole life: handshake, then serve until every worker said done.
// initial_weights (async only): one span per bucket, the model's starting parameters
// in the bucket layout (the servers build the same model from the same seed).
// Throws CommError when a worker dies or times out (naming it), CorruptMessage on a
// bad message, InvalidArgument on a configuration mismatch.
PsServerReport run_ps_server(const PsConfig& config, Communicator& comm,
                             std::span<const BucketShape> buckets,
                             std::span<const std::span<const float>> initial_weights = {},
                             const CodecRegistry& registry = builtin_registry(),
                             const PsServerCheckpoints& checkpoints = {});

}  // namespace gradcomp::dist
