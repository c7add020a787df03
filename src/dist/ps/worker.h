// The workers' side of the parameter server (gradcomp/dist/ps.h: make_ps_worker),
// private to src/dist/ps: a Reducer that pushes each key's message to the server
// owning it and pulls the reply -- the mean gradient (ps-sync, Worker::reduce()) or the
// latest weights (ps-async, AsyncWorker::exchange_weights()). Its work in three files:
//   worker.cc           construction (the key plan, buffers sized for the largest
//                       messages) and the interfaces: reduce, exchange_weights, the
//                       checkpointed state, statistics;
//   worker_step.cc      one step: every key encoded into one push per server,
//                       Sketched-SGD's second round, the replies validated and applied;
//   worker_messages.cc  the frames exchanged with the servers: the handshake, a round
//                       trip of pushes and replies, the goodbye (with worker 0's
//                       staleness statistics).
//
// One step, per server and all servers at once: post the push frame, the push payload
// and the reply frame receive; wait for them; post the reply payload receive (its size
// is in the reply frame); wait; validate and apply every record. A CommError is
// rethrown naming this worker and the server (rank and role). Sketched-SGD
// (sketch_plan.h) makes that two round trips with the servers that own a sketched key:
// the sketches out and the candidates back, then the values at the candidates out and
// the top k back.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "gradcomp/dist/communicator.h"
#include "gradcomp/dist/ps.h"
#include "gradcomp/error.h"
#include "gradcomp/memory.h"
#include "gradcomp/registry.h"
#include "gradcomp/weight_exchange.h"
#include "protocol.h"
#include "sketch_plan.h"

namespace gradcomp::dist::ps {

// The ps-sync worker, and the base of the ps-async one (AsyncWorker, below), which
// make_ps_worker builds for that topology.
class Worker : public PsWorker {
 public:
  Worker(const PsConfig& config, Communicator& comm, std::span<const BucketShape> buckets,
         const CodecRegistry& registry);

  ~Worker() override = default;

  // ---- worker.cc: the Reducer interface

  void reduce(std::span<const BucketRef> buckets, const StepContext& ctx) override;

  ReduceStats take_stats() override;

  std::vector<StateBuffer> state() override;

  std::string describe() const override;

  bool momentum_in_memory() const override;

  StalenessHistogram staleness() const override;

  // ---- worker_messages.cc

  void finish() override;

 protected:
  // ---- worker.cc: AsyncWorker's exchange_weights, refused on ps-sync

  void push_gradient_pull_weights(std::span<const BucketRef> grads,
                                  std::span<const std::span<float>> weights,
                                  const StepContext& ctx);

 private:
  // Runs f; a CommError becomes one naming this worker, the action and the server.
  template <class F>
  void guarded(const char* action, int server, F&& f) {
    try {
      f();
    } catch (const CommError& e) {
      throw CommError("ps " + me_ + ": " + action + " " + cfg_.role_of(cfg_.server_rank(server)) +
                      " failed: " + e.what());
    }
  }

  // ---- worker_messages.cc: the handshake, a step's round trips

  void handshake(std::uint64_t hash);

  // One push and its reply with every server s where active[s]: pushes push_[s]
  // (push_len_[s] bytes, push_records_[s] records), receives the reply frame into
  // replies_[s] and its payload into reply_[s]. candidates[s] > 0: the reply must be
  // Sketched-SGD's candidates, that many records (one per sketched key); 0: the final
  // reply, one record per key.
  void round_trip(const std::vector<char>& active, const std::vector<std::size_t>& candidates,
                  std::uint64_t step, const StepContext& ctx);

  // ---- worker_step.cc: one step

  void check_buckets(std::span<const BucketRef> buckets) const;

  // True when key `id` goes as a sketch this step.
  bool sketched(const PsKey& k, std::span<const BucketRef> buckets) const;

  // One step: ps-sync with weights empty (the mean gradient replaces the buckets' grads),
  // ps-async with the weights to replace.
  void exchange(std::span<const BucketRef> buckets, std::span<const std::span<float>> weights,
                const StepContext& ctx);

  // Server s as error messages name it: "server 1 (rank 5)".
  std::string server_name(std::size_t s) const;

  PsConfig cfg_;
  Communicator& comm_;
  std::vector<BucketShape> shapes_;
  std::string me_;
  std::string describe_;
  bool compress_ = false;
  bool finished_ = false;
  std::vector<PsKey> keys_;
  std::vector<std::vector<std::uint32_t>> by_server_;
  std::vector<std::unique_ptr<Memory>> memories_;  // per key; null: sent as fp32
  std::shared_ptr<const Codec> codec_;             // null with sketched-sgd
  std::optional<ps::SketchPlan> sketch_;
  // Sketched-SGD, per key id (empty for keys that are never sketched).
  struct SketchState {
    std::vector<float> u, v;
    std::vector<std::uint32_t> cand;  // this step's candidates
  };
  std::vector<SketchState> sketch_state_;
  std::vector<float> table_;
  std::vector<std::uint32_t> sparse_idx_;
  std::vector<float> sparse_val_;
  std::vector<std::vector<std::byte>> push_;
  std::vector<std::size_t> push_len_;
  std::vector<std::uint32_t> push_records_;
  std::vector<Frame> replies_;
  std::vector<std::vector<std::byte>> reply_;
  std::vector<ps::FrameBytes> reply_frames_;
  std::vector<std::uint64_t> version_;  // async: the weights' version per server
  std::uint64_t clock_ = 0;             // pushes so far
  std::vector<float> scratch_;
  StalenessHistogram local_staleness_;
  StalenessHistogram staleness_;
  ReduceStats stats_;
};

// ps-async: the servers hold the weights and apply the optimizer, so the worker trades
// its gradient for the latest weights (exchange_weights) and refuses reduce().
class AsyncWorker final : public Worker, public WeightExchange {
 public:
  using Worker::Worker;

  void exchange_weights(std::span<const BucketRef> grads, std::span<const std::span<float>> weights,
                        const StepContext& ctx) override;
};

}  // namespace gradcomp::dist::ps
