// Local-step training with compressed pseudo-gradients (local SGD, DiLoCo, Streaming
// DiLoCo, SparseLoCo): the workers take `sync_every` (H) inner steps each on their own,
// then exchange what those steps did to the weights and take one outer step together.
//
// Per round, on every worker, for the weights of one fragment (all of them when
// fragments == 1):
//   d    = x - x_local                 the pseudo-gradient (x: the global weights, kept here)
//   mean = exchange(d)                 any gradcomp compressor, through its Reducer: error
//                                      feedback per worker and bucket, kept across rounds
//   x    = outer(x, mean)              gradcomp/outer_optimizer.h (Nesterov, averaging, ...)
//   x_local = mix * x_local + (1 - mix) * x
// Nothing else crosses the network: between rounds the workers do not communicate.
// With a delay (below), the replica has moved on by the time x arrives: the merge adds
// the round's correction instead, x_local += (1 - mix) * (x - x_local at the round's
// start), which keeps the D steps taken meanwhile (they go into the next round's d).
// Replacing the replica by x, as without a delay, would throw those steps away: on the
// default MLP with H = 30 and D = 29 that trained only one step in 30 (0.63 against
// 0.87 after two epochs).
//
// Streaming (Streaming DiLoCo, Douillard et al. 2025): with F fragments, fragment f is
// exchanged after inner steps t with t = (f + 1) H / F (mod H), so a round's bytes are
// spread over H steps. With delay D > 0 the exchange runs on a thread of its own while
// the next D inner steps compute, and its result is merged D steps later (the paper's
// tau): a slow link then does not stall compute. D < H / F, so at most one exchange is in
// flight and every rank issues the same collectives in the same order.
//
// Buckets follow gradcomp's layout rules (gradcomp/layout.h, per-layer): matrices are
// compressed, small and 1-D tensors go in one dense bucket. Fragments are runs of equal
// elements of the buckets laid end to end, cut between rows (layout.h's fragment_pieces): a
// bucket a cut falls in is exchanged as pieces, each with its own compressor memory.
//
// A failed exchange (a peer died, a timeout) throws CommError from the step that waits
// for it, before any weight is touched: no rank applies a partial mean. Each round first
// checks that every rank starts it after the same inner steps (one small allgather on the
// exchange thread): ranks whose step counts drifted apart (a skipped batch, uneven data, a
// state restored on one rank) would exchange different fragments, of different sizes, which
// Gloo aborts the process on; they fail instead, all alike, naming both counts. Resume: the
// state (x, the outer momentum, every memory) is saved after state() and restored with
// resume_at(steps), which continues bit for bit.
#pragma once

#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "gradcomp/dist/communicator.h"
#include "gradcomp/dist/exchanger.h"
#include "gradcomp/layout.h"
#include "gradcomp/memory.h"
#include "gradcomp/method.h"
#include "gradcomp/outer_optimizer.h"
#include "gradcomp/reducer.h"

namespace gradcomp::dist {

// The compressor an outer loop gets when it names none: fp16 pseudo-gradients (OpenDiLoCo).
// On the default MLP it matched fp32 (0.8750 against 0.8742 after two epochs, H = 30) with
// half the bytes, and reached dense's one-epoch accuracy 21% sooner on the lab's 100 Mbit/s
// links (docs/measurements/outer-loop.md).
inline constexpr const char* kDefaultOuterCompressor = "fp16";

// The outer loop's compressor, parsed once: for momentum 0 (the inner optimizer's momentum
// is not the outer loop's: a bare biased codec gets plain error feedback) and the reducer
// asked for (auto: fp16 is allreduced; "scatter" runs any codec at ring-allreduce bytes).
// InvalidArgument as Method::parse.
Method parse_outer_method(std::string_view compressor, ReducerKind reducer = ReducerKind::kAuto);

// Where the replica lives when the loop cannot read it in place (parameters on a GPU): the
// loop reads and writes host spans, and says when, so that this object copies the
// parameters concerned in before a read and back after a write (gradcomp/device/
// parameter_staging.h). Parameters are indices into the loop's weights. Both calls run on
// the caller's thread, inside the OuterLoop's own calls; the exchange thread never reads
// the weights.
class ReplicaStaging {
 public:
  virtual ~ReplicaStaging() = default;
  // Before the loop reads (or partly writes) these parameters' spans: they must hold the
  // replica's values.
  virtual void fetch(std::span<const std::size_t> params) = 0;
  // After the loop wrote these parameters' spans: the replica takes their values.
  virtual void publish(std::span<const std::size_t> params) = 0;
};

struct OuterLoopOptions {
  std::int64_t sync_every = 0;  // H >= 1: inner steps per round (per fragment)
  std::string outer{OuterOptimizer::kDefaultSpec};
  int fragments = 1;       // F >= 1, divides H
  std::int64_t delay = 0;  // D: 0 <= D < H / F inner steps between a round and its merge
  double mix = 0.0;        // share of the local update kept at the merge, in [0, 1)
  LayoutOptions layout{0.0, 1024, 0.0};
  std::uint64_t seed = 0;  // stochastic codecs' seed, the same on every rank
};

class OuterLoop {
 public:
  // weights: the caller's tensors, one span per parameter, in the same order and with
  // the same shapes on every rank; they must stay valid (and in place) for the loop's
  // life. params describes them one to one. The compressor is `method`, parsed for
  // momentum 0 (the outer optimizer's momentum is its own). Rank 0's weights are
  // broadcast to every rank here (as DDP does at construction): replicas that start
  // apart would silently never agree. InvalidArgument for bad options, a spec the
  // outer rule cannot run (sparseloco without error feedback). `staging`, where given,
  // moves the replica in and out of the spans (ReplicaStaging above); it must outlive the
  // loop.
  OuterLoop(std::vector<std::span<float>> weights, std::span<const ParamInfo> params,
            Communicator& comm, Method method, OuterLoopOptions options,
            ReplicaStaging* staging = nullptr);
  ~OuterLoop();
  // What the constructor refuses of the compressor and the options alone (before any
  // rank is started): InvalidArgument naming the problem.
  static void check(const Method& method, const OuterLoopOptions& options);
  OuterLoop(const OuterLoop&) = delete;
  OuterLoop& operator=(const OuterLoop&) = delete;

  // After the inner optimizer's step that completed `steps` inner steps since the start
  // of training (1, 2, ...): starts the rounds due, merges the ones due. Returns true
  // when it changed the caller's weights. Throws CommError when a round failed.
  bool after_inner_step(std::int64_t steps);

  // Every state buffer, named by piece id: "outer.bucket<id>.global",
  // "outer.bucket<id>.momentum", with a delay "outer.bucket<id>.round_start" (the replica
  // when its round started), and the compressor's memories "bucket<id>.<name>". Waits for an
  // exchange in flight first (its outer step is applied to x, its merge stays due). Writable: a
  // checkpoint restores through them, then calls resume_at.
  std::vector<StateBuffer> state();
  // After restoring state(): training continues after `steps` inner steps; a merge that
  // was due after them is still done.
  void resume_at(std::int64_t steps);

  // The end of training: one model on every rank. After the inner step that completed
  // `steps` steps (after_inner_step(steps) first): waits for a round in flight and merges
  // it, then exchanges every fragment now, one after the other, and sets x and every
  // replica to the mean of the replicas (x - mean d; the outer optimizer and its momentum
  // are left out, mix ignored). Collective: every rank calls it at the
  // same step. Without it each rank ends with its own replica, up to H + D steps apart
  // from the others; which one is "the model" would be arbitrary. Training may go on
  // after it, on the usual schedule.
  void synchronize(std::int64_t steps);

  // Waits for an exchange in flight (delay > 0) and applies its outer step; its merge
  // stays due. After it the communicator is idle until the next round starts: call it
  // before other collectives on the same process group, or before building another loop
  // over it (two threads issuing collectives on one group can pair different operations
  // across ranks, which Gloo aborts on).
  void drain() { finish_outer_step(); }

  // Bytes and seconds of the rounds finished since the last call.
  ReduceStats take_stats();
  // Seconds the caller's steps waited for rounds since the last call.
  double take_wait_seconds();

  // "nesterov:lr=0.7,momentum=0.9 every 30 steps over allgather(ef(topk:ratio=0.01)), 2
  // fragments, delay 5".
  std::string describe() const;
  // The layout of the weights (per-layer buckets).
  const std::vector<BucketPlan>& buckets() const { return plan_; }
  // What is exchanged: the buckets, cut into fragments (layout.h's fragment_pieces), in
  // id order, and the fragment of each.
  const std::vector<BucketPlan>& pieces() const { return pieces_; }
  const std::vector<int>& fragment_of_piece() const { return fragment_of_; }
  // Inner steps after which fragment f's round starts, in [1, H]: (f + 1) H / F.
  std::int64_t sync_offset(int fragment) const;

 private:
  struct Pending {
    int fragment = 0;
    std::int64_t merge_at = 0;  // inner steps
    bool stepped = false;       // the outer step is applied to x
  };

  // The caller's weights a piece's slot covers.
  std::span<float> weights_of(const BucketPlan::Slot& s) const {
    return weights_[s.param].subspan(s.param_offset, s.numel);
  }
  void start_round(int fragment, std::int64_t steps);
  // On the exchange thread, before the round's collectives: InvalidArgument on every rank
  // alike when the ranks start it after different inner steps.
  void check_round_agrees(std::int64_t steps);
  void wait_for_exchange();  // throws the exchange's failure
  void finish_outer_step();  // waits for the exchange in flight, applies the outer step
  // host_current: the spans hold the replica's values (its round just started).
  void merge(int fragment, bool host_current);
  // The round in flight: its outer step (if not yet) and its merge.
  void merge_pending(bool host_current);
  void fetch(int fragment);  // ReplicaStaging::fetch of the fragment's parameters
  void publish(int fragment);
  std::optional<int> fragment_due(std::int64_t steps) const;

  std::vector<std::span<float>> weights_;
  Communicator& comm_;
  OuterLoopOptions options_;
  OuterOptimizer outer_;
  std::vector<BucketPlan> plan_;
  std::vector<BucketPlan> pieces_;   // id order
  std::vector<BucketShape> shapes_;  // of pieces_
  std::vector<int> fragment_of_;
  std::vector<std::vector<std::size_t>> fragment_pieces_;  // indices into pieces_
  ReplicaStaging* staging_ = nullptr;
  std::vector<std::vector<std::size_t>> fragment_params_;  // the parameters each one covers
  // Per piece: x, the round's pseudo-gradient (the mean after the exchange), momentum.
  // round_start_: with a delay, the replica's weights when the piece's round started.
  std::vector<std::vector<float>> global_, delta_, momentum_, round_start_;
  std::optional<Pending> pending_;
  std::exception_ptr failure_;
  double wait_seconds_ = 0;
  std::unique_ptr<Exchanger> exchanger_;  // last: its thread stops first
};

}  // namespace gradcomp::dist
