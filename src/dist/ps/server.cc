// The servers' side of the parameter server (gradcomp/dist/ps.h): run_ps_server.
//
// Sync: per step, the push frame of every worker (received from each rank in order,
// never from "any": the sum is then the same on every run), then every payload,
// decoded into the key's mean in worker order; one reply built once and sent to all.
// With Sketched-SGD the summed sketches first yield the candidates (a reply of their
// own), the workers' values at them come in as a second round of pushes, and the reply
// carries the top k of their sums (sketch_rounds).
// Async: receive-from-any of the next push frame, its payload from that rank, decode
// every record into scratch (nothing is applied before the whole push validated), SGD
// on the keys' weights with lr/W, reply with the weights unless the staleness bound
// holds the reply back.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "detail/select.h"
#include "gradcomp/error.h"
#include "gradcomp/wire.h"
#include "protocol.h"
#include "sketch_plan.h"

namespace gradcomp::dist {

namespace {

using ps::Frame;
using ps::Kind;
using ps::RecordKind;

class Server {
 public:
  Server(const PsConfig& config, Communicator& comm, std::span<const BucketShape> buckets,
         std::span<const std::span<const float>> initial_weights, const CodecRegistry& registry,
         const PsServerCheckpoints& checkpoints)
      : cfg_(config), comm_(comm), shapes_(buckets.begin(), buckets.end()), ckpt_(checkpoints) {
    if (cfg_.servers < 1 || cfg_.workers < 1 || comm_.world_size() != cfg_.servers + cfg_.workers ||
        !cfg_.is_server(comm_.rank())) {
      throw InvalidArgument("ps server: rank " + std::to_string(comm_.rank()) + " of " +
                            std::to_string(comm_.world_size()) + " is not one of " +
                            std::to_string(cfg_.servers) + " servers beside " +
                            std::to_string(cfg_.workers) + " workers");
    }
    me_ = cfg_.role_of(comm_.rank());
    index_ = comm_.rank() - cfg_.workers;
    keys_ = plan_keys(shapes_, cfg_.servers, cfg_.split_elements);
    const bool async = cfg_.topology == Topology::kPsAsync;
    sketch_ = ps::sketch_plan_for(cfg_, keys_);
    if (sketch_) {
      canonical_ = sketch_->spec;
    } else {
      const auto probe = registry.make_memory(cfg_.compressor, 0);
      canonical_ = probe->spec();
      compress_ = probe->codec().name() != "none";
      codec_ = registry.make_codec_of(cfg_.compressor);
    }
    if (async && initial_weights.size() != shapes_.size()) {
      throw InvalidArgument("ps server: " + std::to_string(initial_weights.size()) +
                            " initial weight buckets, expected " + std::to_string(shapes_.size()));
    }
    std::size_t push_cap = 0;
    std::size_t reply_cap = 0;
    for (const PsKey& k : keys_) {
      if (k.server != index_) continue;
      mine_.push_back(k.id);
      const bool coded = compress_ && k.compressible;
      const std::size_t sketch_bytes = sketch_ ? sketch_->max_record_bytes(k) : 0;
      push_cap +=
          ps::kRecordHeaderBytes +
          std::max({4 * k.numel, coded ? codec_->max_encoded_bytes(k.numel) : 0, sketch_bytes});
      const bool coded_reply = coded && !async && cfg_.downlink == Downlink::kCompressed;
      reply_cap += ps::kRecordHeaderBytes +
                   std::max({4 * k.numel, coded_reply ? codec_->max_encoded_bytes(k.numel) : 0,
                             sketch_bytes});
      SketchServerKey sk;
      if (sketch_ && sketch_->keys[k.id].on) {
        const ps::SketchKey& plan = sketch_->keys[k.id];
        sk.cand.resize(plan.kc);
        sk.sums.resize(plan.kc);
        sk.pos.resize(plan.k);
        estimates_.resize(std::max(estimates_.size(), k.numel));
      }
      sketch_keys_.push_back(std::move(sk));
      acc_.emplace_back(std::max(k.numel, sketch_ ? sketch_->cells(k.id) : 0), 0.0f);
      server_memories_.push_back(coded_reply ? registry.make_memory(cfg_.compressor, k.numel)
                                             : nullptr);
      if (async) {
        const std::span<const float> w0 = initial_weights[k.bucket];
        if (w0.size() != shapes_[k.bucket].numel) {
          throw InvalidArgument("ps server: initial weights of bucket " + std::to_string(k.bucket) +
                                " have " + std::to_string(w0.size()) + " elements, expected " +
                                std::to_string(shapes_[k.bucket].numel));
        }
        weights_.emplace_back(w0.begin() + static_cast<std::ptrdiff_t>(k.offset),
                              w0.begin() + static_cast<std::ptrdiff_t>(k.offset + k.numel));
        velocity_.emplace_back(cfg_.momentum != 0.0 ? k.numel : 0, 0.0f);
      }
    }
    const auto w = static_cast<std::size_t>(cfg_.workers);
    push_.assign(w, std::vector<std::byte>(push_cap));
    frames_.resize(w);
    reply_.resize(reply_cap);
    hash_ = ps::config_hash(cfg_, canonical_, shapes_);
  }

  PsServerReport run() {
    handshake();
    if (cfg_.topology == Topology::kPsSync) {
      run_sync();
    } else {
      run_async();
    }
    say_goodbye();
    const CommCounters c = comm_.counters();
    report_.bytes_received = c.bytes_received;
    report_.bytes_sent = c.bytes_sent;
    return report_;
  }

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

  void handshake() {
    for (int w = 0; w < cfg_.workers; ++w) {
      const std::string who = cfg_.role_of(w);
      ps::FrameBytes fb{};
      guarded("handshake with", w, [&] { comm_.recv_bytes(w, ps::kTagPushFrame, fb); });
      const Frame f = ps::decode_frame(fb, w, who);
      if (f.kind != Kind::kHello) {
        throw CorruptMessage("ps " + me_ + ": " + who + " sent " + ps::to_string(f.kind) +
                             " before its hello");
      }
      const bool ok = f.aux64 == hash_ && f.aux == static_cast<std::uint32_t>(cfg_.workers);
      Frame ack;
      ack.kind = Kind::kHello;
      ack.sender = static_cast<std::uint32_t>(comm_.rank());
      ack.aux = ok ? 1 : 0;
      ack.aux64 = hash_;
      guarded("handshake with", w, [&] {
        ps::send_message(comm_, w, ps::kTagReplyFrame, ps::kTagReplyPayload, ack, {});
      });
      if (!ok) {
        throw InvalidArgument("ps " + me_ + ": " + who +
                              " runs another configuration (compressor, model, topology, "
                              "--servers, --workers or seed differ)");
      }
    }
  }

  void say_goodbye() {
    std::vector<std::byte> payload(16 * report_.staleness.size());
    std::size_t i = 0;
    for (const auto& [s, n] : report_.staleness) {
      store_le<std::uint64_t>(payload.data() + i, s);
      store_le<std::uint64_t>(payload.data() + i + 8, n);
      i += 16;
    }
    Frame f;
    f.kind = Kind::kStats;
    f.sender = static_cast<std::uint32_t>(comm_.rank());
    f.payload_bytes = payload.size();
    guarded("statistics to", 0, [&] {
      ps::send_message(comm_, 0, ps::kTagReplyFrame, ps::kTagReplyPayload, f, payload);
    });
  }

  // What this server checkpoints (names in ps.h): empty for a stateless server.
  std::vector<StateBuffer> state_arrays() {
    std::vector<StateBuffer> out;
    for (std::size_t j = 0; j < mine_.size(); ++j) {
      const std::string key = "key" + std::to_string(mine_[j]) + "/";
      if (Memory* m = server_memories_[j].get()) {
        for (const StateBuffer& b : m->state()) out.push_back({key + b.name, b.data});
      }
      if (cfg_.topology == Topology::kPsAsync) {
        out.push_back({key + "weights", weights_[j]});
        if (!velocity_[j].empty()) out.push_back({key + "velocity", velocity_[j]});
      }
    }
    return out;
  }

  void save_state(std::uint64_t step, std::span<const std::int64_t> counters) {
    if (!ckpt_.save || step == saved_step_) return;
    const std::vector<StateBuffer> arrays = state_arrays();
    if (arrays.empty() && counters.empty()) return;
    ckpt_.save(step, arrays, counters);
    saved_step_ = step;
  }

  // ps-sync: the workers resume at `step` > 0; the downlink's error feedback must
  // resume there too, or the run would silently leave its trajectory.
  void restore_sync_state(std::uint64_t step) {
    const std::vector<StateBuffer> arrays = state_arrays();
    if (arrays.empty()) return;  // nothing kept between rounds
    if (!ckpt_.load || !ckpt_.load(step, arrays, {})) {
      throw InvalidArgument("ps " + me_ + ": the workers resume at step " + std::to_string(step) +
                            " but this server has no checkpoint of that step (its downlink "
                            "error feedback); resume from a checkpoint written with it");
    }
    saved_step_ = step;
  }

  // Checks a push frame against this server's buffers and the records expected (every
  // key of this server, or Sketched-SGD's second round: the sketched keys).
  void check_push(const Frame& f, int w, std::size_t records) const {
    if (f.records != records || f.payload_bytes > push_[static_cast<std::size_t>(w)].size()) {
      throw CorruptMessage("ps " + me_ + ": push from " + cfg_.role_of(w) + " announces " +
                           std::to_string(f.records) + " records and " +
                           std::to_string(f.payload_bytes) + " bytes; expected " +
                           std::to_string(records) + " records and at most " +
                           std::to_string(push_[static_cast<std::size_t>(w)].size()) + " bytes");
    }
  }

  // The j-th record of a push: must be key mine_[j], of a kind and size that fits it.
  const PsKey& check_record(const ps::Record& r, std::size_t j, const std::string& who) const {
    const std::uint32_t expected = mine_[j];
    if (r.key != expected) {
      const bool known = r.key < keys_.size();
      throw CorruptMessage(
          "ps " + me_ + ": push from " + who + " has key " + std::to_string(r.key) +
          (known ? " (served by " + cfg_.role_of(cfg_.server_rank(keys_[r.key].server)) + ")"
                 : " (unknown: " + std::to_string(keys_.size()) + " keys)") +
          " where key " + std::to_string(expected) + " was expected");
    }
    const PsKey& k = keys_[expected];
    if (r.kind == RecordKind::kSketch) {
      if (!sketch_ || !sketch_->keys[k.id].on || r.data.size() != 4 * sketch_->cells(k.id)) {
        throw CorruptMessage(
            "ps " + me_ + ": push from " + who + ": key " + std::to_string(k.id) +
            " came as a sketch of " + std::to_string(r.data.size()) + " bytes; it is " +
            (sketch_ && sketch_->keys[k.id].on ? std::to_string(4 * sketch_->cells(k.id)) + " bytes"
                                               : std::string("never sketched")));
      }
    } else if (r.kind == RecordKind::kDense) {
      if (r.data.size() != 4 * k.numel) {
        throw CorruptMessage("ps " + me_ + ": push from " + who + ": key " + std::to_string(k.id) +
                             " has " + std::to_string(r.data.size()) + " bytes of fp32, expected " +
                             std::to_string(4 * k.numel));
      }
    } else if (r.kind != RecordKind::kCodec) {
      throw CorruptMessage("ps " + me_ + ": push from " + who + ": key " + std::to_string(k.id) +
                           " came as record kind " + std::to_string(static_cast<int>(r.kind)) +
                           ", which no push carries");
    } else if (!(compress_ && k.compressible)) {
      throw CorruptMessage("ps " + me_ + ": push from " + who + ": key " + std::to_string(k.id) +
                           " is never compressed, yet came as a codec message");
    }
    return k;
  }

  void recv_frames_in_order(bool* all_done) {
    const auto w_count = static_cast<std::size_t>(cfg_.workers);
    std::vector<P2PRequest> reqs;
    reqs.reserve(w_count);
    for (int w = 0; w < cfg_.workers; ++w) {
      guarded("waiting for", w, [&] {
        reqs.push_back(
            comm_.irecv_bytes(w, ps::kTagPushFrame, frames_[static_cast<std::size_t>(w)]));
      });
    }
    int done = 0;
    for (int w = 0; w < cfg_.workers; ++w) {
      guarded("waiting for", w, [&] { comm_.wait(reqs[static_cast<std::size_t>(w)]); });
      const Frame f = ps::decode_frame(frames_[static_cast<std::size_t>(w)], w, cfg_.role_of(w));
      decoded_[static_cast<std::size_t>(w)] = f;
      if (f.kind == Kind::kDone) {
        ++done;
      } else if (f.kind != Kind::kPush) {
        throw CorruptMessage("ps " + me_ + ": " + cfg_.role_of(w) + " sent " +
                             ps::to_string(f.kind) + " where a push was expected");
      }
    }
    if (done != 0 && done != cfg_.workers) {
      throw CorruptMessage("ps " + me_ + ": " + std::to_string(done) + " of " +
                           std::to_string(cfg_.workers) +
                           " workers finished while the others pushed another step");
    }
    *all_done = done == cfg_.workers;
  }

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
  void check_round(std::uint64_t step, std::size_t records) const {
    for (int w = 0; w < cfg_.workers; ++w) {
      const Frame& f = decoded_[static_cast<std::size_t>(w)];
      if (f.step != step) {
        throw CorruptMessage("ps " + me_ + ": " + cfg_.role_of(w) + " pushed step " +
                             std::to_string(f.step) + " while " + cfg_.role_of(0) +
                             " pushed step " + std::to_string(step));
      }
      check_push(f, w, records);
    }
  }

  void run_sync() {
    const float inv_w = 1.0f / static_cast<float>(cfg_.workers);
    decoded_.resize(static_cast<std::size_t>(cfg_.workers));
    std::vector<RecordKind> kinds(mine_.size());
    bool first_step = true;
    std::uint64_t last_step = 0;
    for (;;) {
      bool all_done = false;
      recv_frames_in_order(&all_done);
      if (all_done) {
        if (!first_step) save_state(last_step + 1, {});
        return;
      }
      const std::uint64_t step = decoded_[0].step;
      if (!first_step && step <= last_step) {
        throw CorruptMessage("ps " + me_ + ": " + cfg_.role_of(0) + " pushed step " +
                             std::to_string(step) + " after step " + std::to_string(last_step));
      }
      check_round(step, mine_.size());
      if (first_step && step > 0) restore_sync_state(step);
      first_step = false;
      last_step = step;

      // Payloads, consumed in worker order: each key's sum (scaled once at the end, as
      // the dense allreduce does) or its mean (codec messages).
      receive_payloads(mine_.size(), [&](int w, std::size_t j, const ps::Record& r) {
        const std::string who = cfg_.role_of(w);
        const PsKey& k = check_record(r, j, who);
        if (w == 0) {
          kinds[j] = r.kind;
        } else if (kinds[j] != r.kind) {
          throw CorruptMessage("ps " + me_ + ": " + who + " sent key " + std::to_string(k.id) +
                               " as record kind " + std::to_string(static_cast<int>(r.kind)) +
                               " while " + cfg_.role_of(0) + " sent kind " +
                               std::to_string(static_cast<int>(kinds[j])));
        }
        std::vector<float>& acc = acc_[j];
        if (r.kind == RecordKind::kCodec) {
          // decode_add validates the whole message before writing into acc.
          if (w == 0) std::fill(acc.begin(), acc.end(), 0.0f);
          codec_->decode_add(r.data, acc, inv_w);
        } else {
          add_floats(r.data, std::span<float>(acc).first(r.data.size() / 4), w == 0);
        }
      });
      if (std::find(kinds.begin(), kinds.end(), RecordKind::kSketch) != kinds.end()) {
        sketch_rounds(step, kinds);
      }

      // The reply, once for everybody.
      ps::RecordWriter writer(reply_);
      for (std::size_t j = 0; j < mine_.size(); ++j) {
        const PsKey& k = keys_[mine_[j]];
        std::vector<float>& acc = acc_[j];
        Memory* m = server_memories_[j].get();
        if (kinds[j] == RecordKind::kSketch) {
          const SketchServerKey& sk = sketch_keys_[j];
          const auto out = writer.begin(k.id, RecordKind::kSparse, 4 + 8 * sk.update_idx.size());
          writer.end(ps::write_sparse(sk.update_idx, sk.update_val, out));
        } else if (kinds[j] == RecordKind::kCodec && m != nullptr) {
          StepContext c;
          c.seed = cfg_.seed;
          c.step = step;
          c.rank = static_cast<std::uint32_t>(comm_.rank());  // not a worker's stream
          c.world = static_cast<std::uint32_t>(cfg_.workers);
          c.bucket = k.context_bucket();
          c.rows = k.rows;
          c.lr = decoded_[0].lr;
          c.steps_per_epoch = decoded_[0].aux64;
          c.total_steps = decoded_[0].aux;
          const auto out = writer.begin(k.id, RecordKind::kCodec, m->max_encoded_bytes());
          writer.end(m->compress(acc, c, out));
        } else {
          if (kinds[j] == RecordKind::kDense) {
            for (std::size_t i = 0; i < k.numel; ++i) acc[i] *= inv_w;
          }
          const auto out = writer.begin(k.id, RecordKind::kDense, 4 * k.numel);
          if (k.numel > 0) std::memcpy(out.data(), acc.data(), 4 * k.numel);
          writer.end(4 * k.numel);
        }
      }
      // An epoch ends: the state goes to disk before the reply that lets the workers
      // finish the step and write theirs.
      const std::uint64_t steps_per_epoch = decoded_[0].aux64;
      if (steps_per_epoch > 0 && (step + 1) % steps_per_epoch == 0) save_state(step + 1, {});
      send_records_to_all(Kind::kReply, writer, step, step + 1);
      ++report_.steps;
    }
  }

  // acc = data (first) or acc += data, data being fp32 little-endian.
  static void add_floats(std::span<const std::byte> data, std::span<float> acc, bool first) {
    if (first) {
      if (!acc.empty()) std::memcpy(acc.data(), data.data(), 4 * acc.size());
      return;
    }
    for (std::size_t i = 0; i < acc.size(); ++i) {
      float v;
      std::memcpy(&v, data.data() + 4 * i, 4);
      acc[i] += v;
    }
  }

  // Sketched-SGD's rounds (sketch_plan.h) once the sketches of this step are summed in
  // acc_: the candidates out, the workers' values at them in, the top k of their sums
  // into sketch_keys_[j].update_*.
  void sketch_rounds(std::uint64_t step, std::span<const RecordKind> kinds) {
    const float inv_w = 1.0f / static_cast<float>(cfg_.workers);
    ps::RecordWriter writer(reply_);
    std::vector<std::size_t> sketched;  // positions j in mine_
    for (std::size_t j = 0; j < mine_.size(); ++j) {
      if (kinds[j] != RecordKind::kSketch) continue;
      sketched.push_back(j);
      const PsKey& k = keys_[mine_[j]];
      SketchServerKey& sk = sketch_keys_[j];
      const detail::SketchHash h = sketch_->hash(k, cfg_.seed, step);
      const std::span<const float> table(acc_[j].data(), h.cells());
      const std::size_t m =
          detail::sketch_top_k(h, table, std::span<float>(estimates_).first(k.numel),
                               sketch_->keys[k.id].kc, sk.cand, "ps sketched-sgd candidates");
      const auto out = writer.begin(k.id, RecordKind::kIndices, 4 * m);
      writer.end(ps::write_indices(std::span<const std::uint32_t>(sk.cand).first(m), out));
      sk.m = m;
    }
    send_records_to_all(Kind::kCandidates, writer, step, 0);

    bool all_done = false;
    recv_frames_in_order(&all_done);
    if (all_done) {
      throw CorruptMessage("ps " + me_ + ": the workers finished between the two rounds of step " +
                           std::to_string(step));
    }
    check_round(step, sketched.size());
    receive_payloads(sketched.size(), [&](int w, std::size_t t, const ps::Record& r) {
      const std::size_t j = sketched[t];
      const PsKey& k = keys_[mine_[j]];
      SketchServerKey& sk = sketch_keys_[j];
      if (r.key != k.id || r.kind != RecordKind::kDense || r.data.size() != 4 * sk.m) {
        throw CorruptMessage(
            "ps " + me_ + ": values from " + cfg_.role_of(w) + ": key " + std::to_string(r.key) +
            ", kind " + std::to_string(static_cast<int>(r.kind)) + ", " +
            std::to_string(r.data.size()) + " bytes where key " + std::to_string(k.id) + " and " +
            std::to_string(4 * sk.m) + " bytes of fp32 were expected");
      }
      add_floats(r.data, std::span<float>(sk.sums).first(sk.m), w == 0);
    });
    for (const std::size_t j : sketched) {
      const PsKey& k = keys_[mine_[j]];
      SketchServerKey& sk = sketch_keys_[j];
      const std::span<const float> sums(sk.sums.data(), sk.m);
      // Positions in the candidates, ascending; ties: lower index first.
      const std::size_t kk =
          detail::select_topk_exact(sums, sketch_->keys[k.id].k, sk.pos, "ps sketched-sgd");
      sk.update_idx.resize(kk);
      sk.update_val.resize(kk);
      for (std::size_t t = 0; t < kk; ++t) {
        sk.update_idx[t] = sk.cand[sk.pos[t]];
        sk.update_val[t] = sums[sk.pos[t]] * inv_w;
      }
    }
  }

  // The records `writer` wrote into reply_, as one `kind` frame and payload to every worker.
  void send_records_to_all(Kind kind, const ps::RecordWriter& writer, std::uint64_t step,
                           std::uint64_t aux64) {
    Frame f;
    f.kind = kind;
    f.sender = static_cast<std::uint32_t>(comm_.rank());
    f.records = writer.records();
    f.step = step;
    f.payload_bytes = writer.size();
    f.aux64 = aux64;
    send_to_all(f);
  }

  void send_to_all(const Frame& reply) {
    const ps::FrameBytes fb = ps::encode_frame(reply);
    std::vector<P2PRequest> reqs;
    for (int w = 0; w < cfg_.workers; ++w) {
      guarded("reply to", w, [&] {
        reqs.push_back(comm_.isend_bytes(w, ps::kTagReplyFrame, fb));
        reqs.push_back(
            comm_.isend_bytes(w, ps::kTagReplyPayload,
                              std::span<const std::byte>(reply_).first(reply.payload_bytes)));
      });
    }
    for (std::size_t i = 0; i < reqs.size(); ++i) {
      guarded("reply to", static_cast<int>(i / 2), [&] { comm_.wait(reqs[i]); });
    }
  }

  // ---- async

  std::string still_running(const std::vector<char>& done) const {
    std::string s;
    for (int w = 0; w < cfg_.workers; ++w) {
      if (!done[static_cast<std::size_t>(w)]) s += (s.empty() ? "" : ", ") + cfg_.role_of(w);
    }
    return s;
  }

  void run_async() {
    const auto w_count = static_cast<std::size_t>(cfg_.workers);
    std::vector<std::uint64_t> clock(w_count, 0);
    std::vector<char> done(w_count, 0);
    std::vector<char> held(w_count, 0);
    std::vector<std::uint64_t> held_staleness(w_count, 0);
    std::uint64_t version = 0;
    int finished = 0;
    const auto max_u64 = std::numeric_limits<std::uint64_t>::max();
    auto slowest = [&] {
      std::uint64_t m = max_u64;
      for (std::size_t w = 0; w < w_count; ++w) {
        if (!done[w]) m = std::min(m, clock[w]);
      }
      return m;
    };
    auto releasable = [&](std::size_t w) {
      if (cfg_.max_staleness < 0) return true;
      const std::uint64_t need = clock[w] > static_cast<std::uint64_t>(cfg_.max_staleness)
                                     ? clock[w] - static_cast<std::uint64_t>(cfg_.max_staleness)
                                     : 0;
      return slowest() >= need;
    };
    auto reply_to = [&](std::size_t w, std::uint64_t staleness) {
      ps::RecordWriter writer(reply_);
      for (std::size_t j = 0; j < mine_.size(); ++j) {
        const PsKey& k = keys_[mine_[j]];
        const auto out = writer.begin(k.id, RecordKind::kDense, 4 * k.numel);
        if (k.numel > 0) std::memcpy(out.data(), weights_[j].data(), 4 * k.numel);
        writer.end(4 * k.numel);
      }
      Frame reply;
      reply.kind = Kind::kReply;
      reply.sender = static_cast<std::uint32_t>(comm_.rank());
      reply.records = writer.records();
      reply.step = clock[w] - 1;
      reply.payload_bytes = writer.size();
      reply.aux = static_cast<std::uint32_t>(std::min<std::uint64_t>(staleness, 0xFFFFFFFFu));
      reply.aux64 = version;
      const int wr = static_cast<int>(w);
      guarded("reply to", wr, [&] {
        ps::send_message(comm_, wr, ps::kTagReplyFrame, ps::kTagReplyPayload, reply, reply_);
      });
    };
    auto release_held = [&] {
      for (std::size_t w = 0; w < w_count; ++w) {
        if (held[w] && releasable(w)) {
          held[w] = 0;
          reply_to(w, held_staleness[w]);
        }
      }
    };

    // Resumed: weights, velocity, version and clocks from the newest checkpoint; each
    // worker's first push then sets its clock (it resumes from its own checkpoint).
    std::vector<std::int64_t> counters(1 + w_count);
    std::vector<char> rejoining(w_count, 0);
    if (ckpt_.load && ckpt_.load(std::nullopt, state_arrays(), counters)) {
      version = static_cast<std::uint64_t>(counters[0]);
      for (std::size_t w = 0; w < w_count; ++w) {
        clock[w] = static_cast<std::uint64_t>(counters[1 + w]);
        rejoining[w] = 1;
      }
    }
    // Files are numbered by the weights version: it keeps growing across restarts.
    auto save_async = [&] {
      counters[0] = static_cast<std::int64_t>(version);
      for (std::size_t w = 0; w < w_count; ++w)
        counters[1 + w] = static_cast<std::int64_t>(clock[w]);
      save_state(version, counters);
    };

    const float inv_w = 1.0f / static_cast<float>(cfg_.workers);
    ps::FrameBytes fb{};
    while (finished < cfg_.workers) {
      int src = -1;
      try {
        src = comm_.recv_bytes_any(ps::kTagPushFrame, fb);
      } catch (const CommError& e) {
        throw CommError("ps " + me_ + ": waiting for a push from " + still_running(done) +
                        " failed: " + e.what());
      }
      if (src < 0 || src >= cfg_.workers) {
        throw CorruptMessage("ps " + me_ + ": message from " + cfg_.role_of(src) +
                             ", which is not a worker");
      }
      const auto w = static_cast<std::size_t>(src);
      const std::string who = cfg_.role_of(src);
      const Frame f = ps::decode_frame(fb, src, who);
      if (done[w]) {
        throw CorruptMessage("ps " + me_ + ": " + who + " sent " + ps::to_string(f.kind) +
                             " after it finished");
      }
      if (f.kind == Kind::kDone) {
        done[w] = 1;
        ++finished;
        release_held();
        continue;
      }
      if (f.kind != Kind::kPush) {
        throw CorruptMessage("ps " + me_ + ": " + who + " sent " + ps::to_string(f.kind) +
                             " where a push was expected");
      }
      if (held[w]) {
        throw CorruptMessage("ps " + me_ + ": " + who + " pushed before its last pull");
      }
      if ((f.step != clock[w] && !rejoining[w]) || f.aux64 > version || !std::isfinite(f.lr) ||
          f.lr < 0.0f) {
        throw CorruptMessage("ps " + me_ + ": push from " + who + " has clock " +
                             std::to_string(f.step) + " (expected " + std::to_string(clock[w]) +
                             "), weights version " + std::to_string(f.aux64) + " (current " +
                             std::to_string(version) + "), lr " + std::to_string(f.lr));
      }
      check_push(f, src, mine_.size());
      guarded("push from", src, [&] {
        comm_.recv_bytes(src, ps::kTagPushPayload,
                         std::span<std::byte>(push_[w]).first(f.payload_bytes));
      });
      // Decode every record into acc_ first: a bad record rejects the whole push.
      ps::RecordReader reader(std::span<const std::byte>(push_[w].data(), f.payload_bytes), who);
      for (std::size_t j = 0; j < mine_.size(); ++j) {
        const ps::Record r = reader.next();
        const PsKey& k = check_record(r, j, who);
        std::vector<float>& g = acc_[j];
        if (r.kind == RecordKind::kDense) {
          if (k.numel > 0) std::memcpy(g.data(), r.data.data(), 4 * k.numel);
          for (float v : g) {
            if (!std::isfinite(v)) {
              throw CorruptMessage("ps " + me_ + ": push from " + who + ": key " +
                                   std::to_string(k.id) + " holds a non-finite value");
            }
          }
        } else {
          std::fill(g.begin(), g.end(), 0.0f);
          codec_->decode_add(r.data, g, 1.0f);
        }
      }
      if (!reader.done()) {
        throw CorruptMessage("ps " + me_ + ": push from " + who +
                             " has trailing bytes after its last key");
      }
      // SGD on every key with lr / W (see ps.h).
      const float lr = f.lr * inv_w;
      const auto m = static_cast<float>(cfg_.momentum);
      const auto wd = static_cast<float>(cfg_.weight_decay);
      for (std::size_t j = 0; j < mine_.size(); ++j) {
        float* wt = weights_[j].data();
        const float* g = acc_[j].data();
        float* v = velocity_[j].data();
        const std::size_t n = acc_[j].size();
        if (m != 0.0f) {
          for (std::size_t i = 0; i < n; ++i) {
            float d = g[i] + wd * wt[i];
            v[i] = m * v[i] + d;
            d = cfg_.nesterov ? d + m * v[i] : v[i];
            wt[i] -= lr * d;
          }
        } else {
          for (std::size_t i = 0; i < n; ++i) wt[i] -= lr * (g[i] + wd * wt[i]);
        }
      }
      // A rejoining worker's version counts from its restart: its first push has no
      // staleness to report.
      const std::uint64_t staleness = rejoining[w] ? 0 : version - f.aux64;
      if (!rejoining[w]) ++report_.staleness[staleness];
      if (rejoining[w]) clock[w] = f.step;
      rejoining[w] = 0;
      ++version;
      ++clock[w];
      ++report_.steps;
      if (w == 0 && f.aux == 1) save_async();  // worker 0 ended an epoch
      if (releasable(w)) {
        reply_to(w, staleness);
      } else {
        held[w] = 1;
        held_staleness[w] = staleness;
      }
      release_held();
    }
    save_async();
  }

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
  std::vector<std::vector<std::byte>> push_;              // per worker
  std::vector<ps::FrameBytes> frames_;
  std::vector<Frame> decoded_;
  std::vector<std::byte> reply_;
  std::uint64_t hash_ = 0;
  PsServerReport report_;
  PsServerCheckpoints ckpt_;
  std::optional<std::uint64_t> saved_step_;  // the last step save_state() wrote
};

}  // namespace

PsServerReport run_ps_server(const PsConfig& config, Communicator& comm,
                             std::span<const BucketShape> buckets,
                             std::span<const std::span<const float>> initial_weights,
                             const CodecRegistry& registry,
                             const PsServerCheckpoints& checkpoints) {
  Server server(config, comm, buckets, initial_weights, registry, checkpoints);
  return server.run();
}

}  // namespace gradcomp::dist
