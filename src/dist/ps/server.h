// The server of the parameter server (gradcomp/dist/ps.h: run_ps_server), private to
// src/dist/ps. One class, its work in three files:
//   server.cc        construction, the handshake, checkpoints, push frames and records
//                    (checked before anything is applied), replies to every worker;
//   server_sync.cc   ps-sync: every worker's push in worker order, the mean, one reply
//                    (and Sketched-SGD's second round);
//   server_async.cc  ps-async: a push from any worker, SGD on the keys' weights, the
//                    weights back unless the staleness bound holds the reply.
#pragma once

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
#include "protocol.h"
#include "sketch_plan.h"

namespace gradcomp::dist::ps {

class Server {
 public:
  Server(const PsConfig& config, Communicator& comm, std::span<const BucketShape> buckets,
         std::span<const std::span<const float>> initial_weights, const CodecRegistry& registry,
         const PsServerCheckpoints& checkpoints);

  PsServerReport run();

 private:
  // Runs f; a CommError becomes one naming this server, the action and the worker.
  template <class F>
  void guarded(const char* action, int worker, F&& f) {
    try {
      f();
    } catch (const CommError& e) {
      throw CommError("ps " + me_ + ": " + action + " " + cfg_.role_of(worker) +
                      " failed: " + e.what());
    }
  }

  // ---- server.cc: the handshake, checkpoints, push frames, replies

  void handshake();

  void say_goodbye();

  // What this server checkpoints (names in ps.h): empty for a stateless server.
  std::vector<StateBuffer> state_arrays();

  void save_state(std::uint64_t step, std::span<const std::int64_t> counters);

  // ps-sync: the workers resume at `step` > 0; the downlink's error feedback must
  // resume there too, or the run would silently leave its trajectory.
  void restore_sync_state(std::uint64_t step);

  // Checks a push frame against this server's buffers and the records expected (every
  // key of this server, or Sketched-SGD's second round: the sketched keys).
  void check_push(const Frame& f, int w, std::size_t records) const;

  // The j-th record of a push: must be key mine_[j], of a kind and size that fits it.
  const PsKey& check_record(const ps::Record& r, std::size_t j, const std::string& who) const;

  void recv_frames_in_order(bool* all_done);

  // Posts every worker's push payload (sizes from decoded_), then reads them in worker
  // order: `records` records each, handed to per_record(worker, position, record).
  template <class F>
  void receive_payloads(std::size_t records, F&& per_record) {
    const auto w_count = static_cast<std::size_t>(cfg_.workers);
    std::vector<P2PRequest> reqs;
    reqs.reserve(w_count);
    for (int w = 0; w < cfg_.workers; ++w) {
      const auto wi = static_cast<std::size_t>(w);

      guarded("push from", w, [&] {
        reqs.push_back(
            comm_.irecv_bytes(w, ps::kTagPushPayload,
                              std::span<std::byte>(push_[wi]).first(decoded_[wi].payload_bytes)));
      });
    }
    for (int w = 0; w < cfg_.workers; ++w) {
      const auto wi = static_cast<std::size_t>(w);

      guarded("push from", w, [&] { comm_.wait(reqs[wi]); });

      ps::RecordReader reader(
          std::span<const std::byte>(push_[wi].data(), decoded_[wi].payload_bytes),
          cfg_.role_of(w));

      for (std::size_t j = 0; j < records; ++j) per_record(w, j, reader.next());

      if (!reader.done()) {
        throw CorruptMessage("ps " + me_ + ": push from " + cfg_.role_of(w) +
                             " has trailing bytes after its last key");
      }
    }
  }

  // Every worker's push frame of one round: the same step, `records` records each.
  void check_round(std::uint64_t step, std::size_t records) const;

  // The records `writer` wrote into reply_, as one `kind` frame and payload to every worker.
  void send_records_to_all(Kind kind, const ps::RecordWriter& writer, std::uint64_t step,
                           std::uint64_t aux64);

  void send_to_all(const Frame& reply);

  // ---- server_sync.cc

  void run_sync();

  // acc = data (first) or acc += data, data being fp32 little-endian.
  static void add_floats(std::span<const std::byte> data, std::span<float> acc, bool first);

  // Sketched-SGD's rounds (sketch_plan.h) once the sketches of this step are summed in
  // acc_: the candidates out, the workers' values at them in, the top k of their sums
  // into sketch_keys_[j].update_*.
  void sketch_rounds(std::uint64_t step, std::span<const RecordKind> kinds);

  // ---- server_async.cc

  std::string still_running(const std::vector<char>& done) const;

  void run_async();

  PsConfig cfg_;
  Communicator& comm_;
  std::vector<BucketShape> shapes_;
  std::string me_;
  int index_ = 0;
  std::string canonical_;
  bool compress_ = false;
  std::shared_ptr<const Codec> codec_;  // null with sketched-sgd
  std::optional<ps::SketchPlan> sketch_;

  // Sketched-SGD, per key of mine: this step's candidates, their summed values, the
  // top k's positions and the update sent back.
  struct SketchServerKey {
    std::vector<std::uint32_t> cand;
    std::vector<float> sums;
    std::vector<std::uint32_t> pos;
    std::size_t m = 0;
    std::vector<std::uint32_t> update_idx;
    std::vector<float> update_val;
  };

  std::vector<SketchServerKey> sketch_keys_;
  std::vector<float> estimates_;
  std::vector<PsKey> keys_;
  std::vector<std::uint32_t> mine_;
  std::vector<std::vector<float>> acc_;  // per key of mine: the sum (sync) / gradient (async)
  std::vector<std::unique_ptr<Memory>> server_memories_;  // compressed downlink
  std::vector<std::vector<float>> weights_;               // async
  std::vector<std::vector<float>> velocity_;              // async, with momentum
  AsyncServerOptimizer optimizer_;                        // async: what each push gets
  std::vector<std::vector<std::byte>> push_;              // per worker
  std::vector<ps::FrameBytes> frames_;
  std::vector<Frame> decoded_;
  std::vector<std::byte> reply_;
  std::uint64_t hash_ = 0;
  PsServerReport report_;
  PsServerCheckpoints ckpt_;
  std::optional<std::uint64_t> saved_step_;  // the last step save_state() wrote
};

}  // namespace gradcomp::dist::ps
