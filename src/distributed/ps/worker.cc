// The workers' side of the parameter server (gradcomp/dist/ps.h): a Reducer that pushes
// each key's message to the server owning it and pulls the reply -- the mean gradient
// (ps-sync, reduce()) or the latest weights (ps-async, exchange_weights()).
//
// One step, per server and all servers at once: post the push frame, the push payload
// and the reply frame receive; wait for them; post the reply payload receive (its size
// is in the reply frame); wait; validate and apply every record. A CommError is
// rethrown naming this worker and the server (rank and role). Sketched-SGD
// (sketch_plan.h) makes that two round trips with the servers that own a sketched key:
// the sketches out and the candidates back, then the values at the candidates out and
// the top k back.
#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "../step_recorder.h"
#include "gradcomp/error.h"
#include "gradcomp/wire.h"
#include "protocol.h"
#include "sketch_plan.h"

namespace gradcomp::dist {

namespace {

using ps::Frame;
using ps::Kind;
using ps::RecordKind;

class PsWorkerImpl final : public PsWorker {
 public:
  PsWorkerImpl(const PsConfig& config, Communicator& comm, std::span<const BucketShape> buckets,
               const CodecRegistry& registry)
      : cfg_(config), comm_(comm), shapes_(buckets.begin(), buckets.end()) {
    if (cfg_.topology == Topology::kAllreduce) {
      throw InvalidArgument("ps worker: topology allreduce is not a parameter server");
    }
    if (cfg_.servers < 1 || cfg_.workers < 1 || comm_.world_size() != cfg_.servers + cfg_.workers ||
        comm_.rank() >= cfg_.workers) {
      throw InvalidArgument("ps worker: rank " + std::to_string(comm_.rank()) + " of " +
                            std::to_string(comm_.world_size()) + " is not one of " +
                            std::to_string(cfg_.workers) + " workers beside " +
                            std::to_string(cfg_.servers) + " servers");
    }
    me_ = cfg_.role_of(comm_.rank());
    keys_ = plan_keys(shapes_, cfg_.servers, cfg_.split_elements);
    sketch_ = ps::sketch_plan_for(cfg_, keys_);
    std::string canonical;
    if (sketch_) {
      canonical = sketch_->spec;
    } else {
      const auto probe = registry.make_memory(cfg_.compressor, 0);
      compress_ = probe->codec().name() != "none";
      canonical = probe->spec();
      codec_ = registry.make_codec_of(cfg_.compressor);
    }
    describe_ = std::string(to_string(cfg_.topology)) + "(" + std::to_string(cfg_.servers) +
                " server" + (cfg_.servers > 1 ? "s" : "") + ", " + canonical +
                (cfg_.topology == Topology::kPsSync
                     ? std::string(", downlink ") + to_string(cfg_.downlink)
                     : std::string(cfg_.max_staleness >= 0
                                       ? ", max staleness " + std::to_string(cfg_.max_staleness)
                                       : ", unbounded staleness")) +
                ")";
    const auto s_count = static_cast<std::size_t>(cfg_.servers);
    by_server_.resize(s_count);
    std::vector<std::size_t> push_cap(s_count, 0), reply_cap(s_count, 0);
    sketch_state_.resize(keys_.size());
    for (const PsKey& k : keys_) {
      const auto s = static_cast<std::size_t>(k.server);
      by_server_[s].push_back(k.id);
      std::size_t max_msg = 4 * k.numel;
      std::size_t reply_msg = 4 * k.numel;
      if (sketch_) {
        max_msg = reply_msg = sketch_->max_record_bytes(k);
        if (sketch_->keys[k.id].on) {
          sketch_state_[k.id].u.assign(k.numel, 0.0f);
          sketch_state_[k.id].v.assign(k.numel, 0.0f);
        }
      }
      if (compress_ && k.compressible) {
        memories_.push_back(registry.make_memory(cfg_.compressor, k.numel));
        max_msg = std::max(max_msg, memories_.back()->max_encoded_bytes());
      } else {
        memories_.push_back(nullptr);
      }
      push_cap[s] += ps::kRecordHeaderBytes + max_msg;
      if (compress_ && k.compressible && cfg_.topology == Topology::kPsSync &&
          cfg_.downlink == Downlink::kCompressed) {
        reply_msg = std::max(reply_msg, codec_->max_encoded_bytes(k.numel));
      }
      reply_cap[s] += ps::kRecordHeaderBytes + reply_msg;
    }
    for (std::size_t s = 0; s < s_count; ++s) {
      push_.emplace_back(push_cap[s]);
      reply_.emplace_back(reply_cap[s]);
    }
    push_len_.resize(s_count);
    push_records_.resize(s_count);
    reply_frames_.resize(s_count);
    replies_.resize(s_count);
    version_.assign(s_count, 0);
    handshake(ps::config_hash(cfg_, canonical, shapes_));
  }

  ~PsWorkerImpl() override = default;

  void reduce(std::span<const BucketRef> buckets, const StepContext& ctx) override {
    if (cfg_.topology != Topology::kPsSync) {
      throw InvalidArgument("ps worker: reduce() on " + describe_ + " (use exchange_weights)");
    }
    exchange(buckets, {}, ctx);
  }

  bool owns_weights() const override { return cfg_.topology == Topology::kPsAsync; }

  void exchange_weights(std::span<const BucketRef> grads, std::span<const std::span<float>> weights,
                        const StepContext& ctx) override {
    if (cfg_.topology != Topology::kPsAsync) {
      throw InvalidArgument("ps worker: exchange_weights() on " + describe_);
    }
    if (weights.size() != shapes_.size()) {
      throw InvalidArgument("ps worker: " + std::to_string(weights.size()) +
                            " weight buckets, built for " + std::to_string(shapes_.size()));
    }
    for (std::size_t b = 0; b < weights.size(); ++b) {
      if (weights[b].size() != shapes_[b].numel) {
        throw InvalidArgument("ps worker: weight bucket " + std::to_string(b) + " has " +
                              std::to_string(weights[b].size()) + " elements, expected " +
                              std::to_string(shapes_[b].numel));
      }
    }
    exchange(grads, weights, ctx);
  }

  ReduceStats take_stats() override { return std::exchange(stats_, {}); }

  std::vector<StateBuffer> state() override {
    std::vector<StateBuffer> out;
    for (auto& m : memories_) {
      if (!m) continue;
      for (auto& s : m->state()) out.push_back(std::move(s));
    }
    for (const PsKey& k : keys_) {
      SketchState& st = sketch_state_[k.id];
      if (st.u.empty()) continue;
      out.push_back({"key" + std::to_string(k.id) + ".momentum", st.u});
      out.push_back({"key" + std::to_string(k.id) + ".error", st.v});
    }
    return out;
  }

  std::string describe() const override { return describe_; }

  bool momentum_in_memory() const override {
    if (sketch_) return true;
    for (const auto& m : memories_) {
      if (m) return m->carries_momentum();
    }
    return false;
  }

  void finish() override {
    if (finished_) return;
    finished_ = true;
    Frame done;
    done.kind = Kind::kDone;
    done.sender = static_cast<std::uint32_t>(comm_.rank());
    done.step = clock_;
    for (int s = 0; s < cfg_.servers; ++s) {
      guarded("done to", s, [&] {
        ps::send_message(comm_, cfg_.server_rank(s), ps::kTagPushFrame, ps::kTagPushPayload, done,
                         {});
      });
    }
    if (comm_.rank() != 0) return;
    // Worker 0 waits for every server's goodbye: the staleness histogram of all pushes.
    for (int s = 0; s < cfg_.servers; ++s) {
      guarded("statistics from", s, [&] {
        const int src = cfg_.server_rank(s);
        ps::FrameBytes fb{};
        comm_.recv_bytes(src, ps::kTagReplyFrame, fb);
        const Frame f = ps::decode_frame(fb, src, cfg_.role_of(src));
        if (f.kind != Kind::kStats || f.payload_bytes % 16 != 0 || f.payload_bytes > (1u << 20)) {
          throw CorruptMessage("ps statistics from " + cfg_.role_of(src) + ": kind " +
                               ps::to_string(f.kind) + ", " + std::to_string(f.payload_bytes) +
                               " bytes");
        }
        std::vector<std::byte> buf(f.payload_bytes);
        comm_.recv_bytes(src, ps::kTagReplyPayload, buf);
        for (std::size_t i = 0; i < buf.size(); i += 16) {
          staleness_[load_le<std::uint64_t>(buf.data() + i)] +=
              load_le<std::uint64_t>(buf.data() + i + 8);
        }
      });
    }
  }

  StalenessHistogram staleness() const override { return staleness_; }

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

  void handshake(std::uint64_t hash) {
    for (int s = 0; s < cfg_.servers; ++s) {
      guarded("handshake with", s, [&] {
        Frame hello;
        hello.kind = Kind::kHello;
        hello.sender = static_cast<std::uint32_t>(comm_.rank());
        hello.aux = static_cast<std::uint32_t>(cfg_.workers);
        hello.aux64 = hash;
        const int dst = cfg_.server_rank(s);
        const ps::FrameBytes out = ps::encode_frame(hello);
        ps::FrameBytes in{};
        P2PRequest a = comm_.isend_bytes(dst, ps::kTagPushFrame, out);
        P2PRequest b = comm_.irecv_bytes(dst, ps::kTagReplyFrame, in);
        comm_.wait(a);
        comm_.wait(b);
        const Frame ack = ps::decode_frame(in, dst, cfg_.role_of(dst));
        if (ack.kind != Kind::kHello) {
          throw CorruptMessage("ps handshake: " + cfg_.role_of(dst) + " answered " +
                               ps::to_string(ack.kind));
        }
        if (ack.aux != 1) {
          throw InvalidArgument("ps " + me_ + ": " + cfg_.role_of(dst) +
                                " runs another configuration (compressor, model, topology, "
                                "--servers, --workers or seed differ)");
        }
      });
    }
  }

  void check_buckets(std::span<const BucketRef> buckets) const {
    if (buckets.size() != shapes_.size()) {
      throw InvalidArgument("ps worker: " + std::to_string(buckets.size()) +
                            " buckets, built for " + std::to_string(shapes_.size()));
    }
    for (std::size_t b = 0; b < buckets.size(); ++b) {
      if (buckets[b].grad.size() != shapes_[b].numel || buckets[b].id != shapes_[b].id) {
        throw InvalidArgument("ps worker: bucket " + std::to_string(b) + " (id " +
                              std::to_string(buckets[b].id) + ", " +
                              std::to_string(buckets[b].grad.size()) +
                              " elements) does not match the layout it was built for");
      }
    }
  }

  // True when key `id` goes as a sketch this step.
  bool sketched(const PsKey& k, std::span<const BucketRef> buckets) const {
    return sketch_ && sketch_->keys[k.id].on && buckets[k.bucket].compressed;
  }

  void exchange(std::span<const BucketRef> buckets, std::span<const std::span<float>> weights,
                const StepContext& ctx) {
    check_buckets(buckets);
    if (finished_) throw InvalidArgument("ps worker: exchange after finish()");
    StepRecorder rec(comm_, stats_);
    const auto s_count = static_cast<std::size_t>(cfg_.servers);
    const bool async = cfg_.topology == Topology::kPsAsync;
    const std::uint64_t step = async ? clock_ : ctx.step;

    // ---- encode one push per server
    std::vector<char> two_rounds(s_count, 0);  // servers owning a sketched key this step
    std::vector<std::size_t> sketched_keys(s_count, 0);
    for (std::size_t s = 0; s < s_count; ++s) {
      ps::RecordWriter w(push_[s]);
      for (std::uint32_t id : by_server_[s]) {
        const PsKey& k = keys_[id];
        const BucketRef& bk = buckets[k.bucket];
        const std::span<const float> g = bk.grad.subspan(k.offset, k.numel);
        Memory* m = memories_[id].get();
        if (sketched(k, buckets)) {
          two_rounds[s] = 1;
          ++sketched_keys[s];
          SketchState& st = sketch_state_[id];
          sketch_scheme::accumulate_momentum(st.u, st.v, g, sketch_->momentum);
          const detail::SketchHash h = sketch_->hash(k, cfg_.seed, step);
          table_.assign(h.cells(), 0.0f);
          detail::sketch_accumulate(h, st.v, 1.0f, table_);
          const auto out = w.begin(k.id, RecordKind::kSketch, 4 * h.cells());
          std::memcpy(out.data(), table_.data(), 4 * h.cells());
          w.end(4 * h.cells());
        } else if (m != nullptr && bk.compressed) {
          StepContext c = ctx;
          c.rank = static_cast<std::uint32_t>(comm_.rank());
          c.world = static_cast<std::uint32_t>(cfg_.workers);
          c.bucket = k.context_bucket();
          c.rows = k.rows;
          const auto out = w.begin(k.id, RecordKind::kCodec, m->max_encoded_bytes());
          w.end(m->compress(g, c, out));
        } else {
          const auto out = w.begin(k.id, RecordKind::kDense, 4 * k.numel);
          if (k.numel > 0) std::memcpy(out.data(), g.data(), 4 * k.numel);
          w.end(4 * k.numel);
        }
      }
      push_len_[s] = w.size();
      push_records_[s] = w.records();
    }
    rec.encoded();

    // ---- push, then pull (the candidates, for servers owning a sketched key)
    const std::vector<char> all(s_count, 1);
    round_trip(all, sketched_keys, step, ctx);
    rec.communicated();

    // ---- Sketched-SGD's second round: v at the candidates, then the top k
    if (std::find(two_rounds.begin(), two_rounds.end(), 1) != two_rounds.end()) {
      for (std::size_t s = 0; s < s_count; ++s) {
        if (!two_rounds[s]) continue;
        const std::string who = "reply from " + server_name(s);
        ps::RecordReader reader(
            std::span<const std::byte>(reply_[s].data(), replies_[s].payload_bytes), who);
        ps::RecordWriter w(push_[s]);
        for (std::uint32_t id : by_server_[s]) {
          const PsKey& k = keys_[id];
          if (!sketched(k, buckets)) continue;
          const ps::Record r = reader.next();
          if (r.key != id || r.kind != RecordKind::kIndices) {
            throw CorruptMessage("ps " + who + ": record for key " + std::to_string(r.key) +
                                 " where the candidates of key " + std::to_string(id) +
                                 " were expected");
          }
          SketchState& st = sketch_state_[id];
          ps::read_indices(r.data, k.numel, sketch_->keys[id].kc, id, who, st.cand);
          const auto out = w.begin(id, RecordKind::kDense, 4 * st.cand.size());
          for (std::size_t t = 0; t < st.cand.size(); ++t) {
            store_le<float>(out.data() + 4 * t, st.v[st.cand[t]]);
          }
          w.end(4 * st.cand.size());
        }
        if (!reader.done()) {
          throw CorruptMessage("ps " + who + ": trailing bytes after the last candidates");
        }
        push_len_[s] = w.size();
        push_records_[s] = w.records();
      }
      rec.decoded();
      const std::vector<std::size_t> final_reply(s_count, 0);
      round_trip(two_rounds, final_reply, step, ctx);
      rec.communicated();
    }

    // ---- apply: the mean gradient (sync) or the weights (async)
    for (std::size_t s = 0; s < s_count; ++s) {
      const std::string who = server_name(s);
      ps::RecordReader reader(
          std::span<const std::byte>(reply_[s].data(), replies_[s].payload_bytes), who);
      for (std::uint32_t id : by_server_[s]) {
        const PsKey& k = keys_[id];
        const ps::Record r = reader.next();
        if (r.key != id) {
          throw CorruptMessage("ps reply from " + who + ": key " + std::to_string(r.key) +
                               " where key " + std::to_string(id) + " was expected");
        }
        const std::span<float> out = weights.empty()
                                         ? buckets[k.bucket].grad.subspan(k.offset, k.numel)
                                         : weights[k.bucket].subspan(k.offset, k.numel);
        if (r.kind == RecordKind::kDense) {
          if (r.data.size() != 4 * k.numel) {
            throw CorruptMessage("ps reply from " + who + ": key " + std::to_string(id) + " has " +
                                 std::to_string(r.data.size()) + " bytes, expected " +
                                 std::to_string(4 * k.numel));
          }
          if (k.numel > 0) std::memcpy(out.data(), r.data.data(), 4 * k.numel);
        } else if (r.kind == RecordKind::kSparse && sketched(k, buckets)) {
          // Validated whole before anything is written.
          SketchState& st = sketch_state_[id];
          ps::read_sparse(r.data, st.cand, sketch_->keys[id].k, id, "reply from " + who,
                          sparse_idx_, sparse_val_);
          std::fill(out.begin(), out.end(), 0.0f);
          for (std::size_t t = 0; t < sparse_idx_.size(); ++t) {
            const std::uint32_t i = sparse_idx_[t];
            out[i] = sparse_val_[t];
            st.u[i] = 0.0f;  // momentum factor masking
            st.v[i] = 0.0f;
          }
        } else {
          if (r.kind != RecordKind::kCodec || !weights.empty() || memories_[id] == nullptr ||
              cfg_.downlink != Downlink::kCompressed || !buckets[k.bucket].compressed) {
            throw CorruptMessage(
                "ps reply from " + who + ": key " + std::to_string(id) + " came as record kind " +
                std::to_string(static_cast<int>(r.kind)) + ", not the one this step expects");
          }
          // The message is validated before out is written: zero it only afterwards.
          scratch_.assign(k.numel, 0.0f);
          codec_->decode_add(r.data, scratch_, 1.0f);
          if (k.numel > 0) std::memcpy(out.data(), scratch_.data(), 4 * k.numel);
        }
      }
      if (!reader.done()) {
        throw CorruptMessage("ps reply from " + who + ": trailing bytes after the last key");
      }
      version_[s] = replies_[s].aux64;
      if (async) ++local_staleness_[replies_[s].aux];
    }
    ++clock_;
    rec.decoded();

    rec.finish();
  }

  std::string server_name(std::size_t s) const {
    return cfg_.role_of(cfg_.server_rank(static_cast<int>(s)));
  }

  // One push and its reply with every server s where active[s]: pushes push_[s]
  // (push_len_[s] bytes, push_records_[s] records), receives the reply frame into
  // replies_[s] and its payload into reply_[s]. candidates[s] > 0: the reply must be
  // Sketched-SGD's candidates, that many records (one per sketched key); 0: the final
  // reply, one record per key.
  void round_trip(const std::vector<char>& active, const std::vector<std::size_t>& candidates,
                  std::uint64_t step, const StepContext& ctx) {
    const auto s_count = static_cast<std::size_t>(cfg_.servers);
    const bool async = cfg_.topology == Topology::kPsAsync;
    std::vector<ps::FrameBytes> frames(s_count);
    std::vector<P2PRequest> reqs;
    reqs.reserve(3 * s_count);
    std::vector<int> req_server;
    std::vector<P2PRequest> payload_reqs(s_count);
    for (std::size_t s = 0; s < s_count; ++s) {
      if (!active[s]) continue;
      Frame f;
      f.kind = Kind::kPush;
      f.sender = static_cast<std::uint32_t>(comm_.rank());
      f.records = push_records_[s];
      f.step = step;
      f.payload_bytes = push_len_[s];
      f.lr = ctx.lr;
      f.aux64 = async ? version_[s] : ctx.steps_per_epoch;
      // Async: 1 when this push ends the worker's epoch (worker 0's epoch ends are when
      // the servers save their state).
      // Sync: the run's total steps (0 = unknown; saturated at 2^32 - 1), for schedules the
      // servers' memories bound by the run's length (DGC's warm-up).
      f.aux =
          async ? static_cast<std::uint32_t>(ctx.steps_per_epoch > 0 &&
                                             (ctx.step + 1) % ctx.steps_per_epoch == 0)
                : static_cast<std::uint32_t>(std::min<std::uint64_t>(ctx.total_steps, 0xFFFFFFFFu));
      frames[s] = ps::encode_frame(f);
    }
    for (std::size_t s = 0; s < s_count; ++s) {
      if (!active[s]) continue;
      const int dst = cfg_.server_rank(static_cast<int>(s));
      guarded("push to", static_cast<int>(s), [&] {
        reqs.push_back(comm_.isend_bytes(dst, ps::kTagPushFrame, frames[s]));
        reqs.push_back(comm_.isend_bytes(
            dst, ps::kTagPushPayload, std::span<const std::byte>(push_[s].data(), push_len_[s])));
        reqs.push_back(comm_.irecv_bytes(dst, ps::kTagReplyFrame, reply_frames_[s]));
        req_server.insert(req_server.end(), 3, static_cast<int>(s));
        // Async replies have a fixed size (every key's weights): the payload receive is
        // posted now, so a server's reply never waits for this worker to finish pushing
        // to the other servers (which, with S > 1, could wait for that server in turn).
        if (async) payload_reqs[s] = comm_.irecv_bytes(dst, ps::kTagReplyPayload, reply_[s]);
      });
    }
    for (std::size_t i = 0; i < reqs.size(); ++i) {
      guarded(i % 3 == 2 ? "pull from" : "push to", req_server[i], [&] { comm_.wait(reqs[i]); });
    }
    for (std::size_t s = 0; s < s_count; ++s) {
      if (!active[s]) continue;
      const int src = cfg_.server_rank(static_cast<int>(s));
      const std::string who = cfg_.role_of(src);
      replies_[s] = ps::decode_frame(reply_frames_[s], src, who);
      const Frame& f = replies_[s];
      const Kind kind = candidates[s] > 0 ? Kind::kCandidates : Kind::kReply;
      const std::size_t records = candidates[s] > 0 ? candidates[s] : by_server_[s].size();
      if (f.kind != kind || f.step != step || f.records != records ||
          f.payload_bytes > reply_[s].size() || (async && f.payload_bytes != reply_[s].size())) {
        throw CorruptMessage("ps reply from " + who + ": kind " + ps::to_string(f.kind) +
                             " (expected " + ps::to_string(kind) + "), step " +
                             std::to_string(f.step) + " (expected " + std::to_string(step) + "), " +
                             std::to_string(f.records) + " records (expected " +
                             std::to_string(records) + "), " + std::to_string(f.payload_bytes) +
                             " bytes (at most " + std::to_string(reply_[s].size()) + ")");
      }
      if (!async) {
        guarded("pull from", static_cast<int>(s), [&] {
          payload_reqs[s] = comm_.irecv_bytes(
              src, ps::kTagReplyPayload, std::span<std::byte>(reply_[s]).first(f.payload_bytes));
        });
      }
    }
    for (std::size_t s = 0; s < s_count; ++s) {
      if (!active[s]) continue;
      guarded("pull from", static_cast<int>(s), [&] { comm_.wait(payload_reqs[s]); });
    }
  }

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

}  // namespace

std::unique_ptr<PsWorker> make_ps_worker(const PsConfig& config, Communicator& comm,
                                         std::span<const BucketShape> buckets,
                                         const CodecRegistry& registry) {
  return std::make_unique<PsWorkerImpl>(config, comm, buckets, registry);
}

}  // namespace gradcomp::dist
