// The servers' side of the parameter server (gradcomp/dist/ps.h): run_ps_server.
//
// Sync: per step, the push frame of every worker (received from each rank in order,
// never from "any": the sum is then the same on every run), then every payload,
// decoded into the key's mean in worker order; one reply built once and sent to all.
// Async: receive-from-any of the next push frame, its payload from that rank, decode
// every record into scratch (nothing is applied before the whole push validated), SGD
// on the keys' weights with lr/W, reply with the weights unless the staleness bound
// holds the reply back.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "gradcomp/error.h"
#include "gradcomp/wire.h"
#include "protocol.h"

namespace gradcomp::dist {

namespace {

using ps::Frame;
using ps::Kind;
using ps::RecordKind;

class Server {
 public:
  Server(const PsConfig& config, Communicator& comm, std::span<const BucketShape> buckets,
         std::span<const std::span<const float>> initial_weights, const CodecRegistry& registry)
      : cfg_(config), comm_(comm), shapes_(buckets.begin(), buckets.end()) {
    if (cfg_.servers < 1 || cfg_.workers < 1 || comm_.world_size() != cfg_.servers + cfg_.workers ||
        !cfg_.is_server(comm_.rank())) {
      throw InvalidArgument("ps server: rank " + std::to_string(comm_.rank()) + " of " +
                            std::to_string(comm_.world_size()) + " is not one of " +
                            std::to_string(cfg_.servers) + " servers beside " +
                            std::to_string(cfg_.workers) + " workers");
    }
    me_ = cfg_.role_of(comm_.rank());
    index_ = comm_.rank() - cfg_.workers;
    const auto probe = registry.make_memory(cfg_.compressor, 0);
    canonical_ = probe->spec();
    compress_ = probe->codec().name() != "none";
    codec_ = registry.make_codec_of(cfg_.compressor);
    keys_ = plan_keys(shapes_, cfg_.servers, cfg_.split_elements);
    const bool async = cfg_.topology == Topology::kPsAsync;
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
      push_cap += ps::kRecordHeaderBytes +
                  std::max(4 * k.numel, coded ? codec_->max_encoded_bytes(k.numel) : 0);
      const bool coded_reply = coded && !async && cfg_.downlink == Downlink::kCompressed;
      reply_cap += ps::kRecordHeaderBytes +
                   std::max(4 * k.numel, coded_reply ? codec_->max_encoded_bytes(k.numel) : 0);
      acc_.emplace_back(k.numel, 0.0f);
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

  // Checks a push frame against this server's keys and buffers.
  void check_push(const Frame& f, int w) const {
    if (f.records != mine_.size() || f.payload_bytes > push_[static_cast<std::size_t>(w)].size()) {
      throw CorruptMessage("ps " + me_ + ": push from " + cfg_.role_of(w) + " announces " +
                           std::to_string(f.records) + " records and " +
                           std::to_string(f.payload_bytes) + " bytes; this server has " +
                           std::to_string(mine_.size()) + " keys and at most " +
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
    if (r.kind == RecordKind::kDense) {
      if (r.data.size() != 4 * k.numel) {
        throw CorruptMessage("ps " + me_ + ": push from " + who + ": key " + std::to_string(k.id) +
                             " has " + std::to_string(r.data.size()) + " bytes of fp32, expected " +
                             std::to_string(4 * k.numel));
      }
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

  void run_sync() {
    const auto w_count = static_cast<std::size_t>(cfg_.workers);
    const float inv_w = 1.0f / static_cast<float>(cfg_.workers);
    decoded_.resize(w_count);
    std::vector<RecordKind> kinds(mine_.size());
    bool first_step = true;
    std::uint64_t last_step = 0;
    for (;;) {
      bool all_done = false;
      recv_frames_in_order(&all_done);
      if (all_done) return;
      const std::uint64_t step = decoded_[0].step;
      if (!first_step && step <= last_step) {
        throw CorruptMessage("ps " + me_ + ": " + cfg_.role_of(0) + " pushed step " +
                             std::to_string(step) + " after step " + std::to_string(last_step));
      }
      for (int w = 0; w < cfg_.workers; ++w) {
        const Frame& f = decoded_[static_cast<std::size_t>(w)];
        if (f.step != step) {
          throw CorruptMessage("ps " + me_ + ": " + cfg_.role_of(w) + " pushed step " +
                               std::to_string(f.step) + " while " + cfg_.role_of(0) +
                               " pushed step " + std::to_string(step));
        }
        check_push(f, w);
      }
      first_step = false;
      last_step = step;

      // Payloads: all posted, consumed in worker order.
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
        const std::string who = cfg_.role_of(w);
        ps::RecordReader reader(
            std::span<const std::byte>(push_[wi].data(), decoded_[wi].payload_bytes), who);
        for (std::size_t j = 0; j < mine_.size(); ++j) {
          const ps::Record r = reader.next();
          const PsKey& k = check_record(r, j, who);
          if (w == 0) {
            kinds[j] = r.kind;
          } else if (kinds[j] != r.kind) {
            throw CorruptMessage("ps " + me_ + ": " + who + " sent key " + std::to_string(k.id) +
                                 (r.kind == RecordKind::kDense ? " dense" : " compressed") +
                                 " while " + cfg_.role_of(0) + " did not");
          }
          std::vector<float>& acc = acc_[j];
          if (r.kind == RecordKind::kDense) {
            // Summed in worker order, scaled once at the end (as the dense allreduce).
            const float* g = reinterpret_cast<const float*>(r.data.data());
            if (w == 0) {
              if (k.numel > 0) std::memcpy(acc.data(), r.data.data(), 4 * k.numel);
            } else {
              for (std::size_t i = 0; i < k.numel; ++i) {
                float v;
                std::memcpy(&v, g + i, 4);
                acc[i] += v;
              }
            }
          } else {
            // decode_add validates the whole message before writing into acc.
            if (w == 0) std::fill(acc.begin(), acc.end(), 0.0f);
            codec_->decode_add(r.data, acc, inv_w);
          }
        }
        if (!reader.done()) {
          throw CorruptMessage("ps " + me_ + ": push from " + who +
                               " has trailing bytes after its last key");
        }
      }

      // The reply, once for everybody.
      ps::RecordWriter writer(reply_);
      for (std::size_t j = 0; j < mine_.size(); ++j) {
        const PsKey& k = keys_[mine_[j]];
        std::vector<float>& acc = acc_[j];
        if (kinds[j] == RecordKind::kDense) {
          for (float& v : acc) v *= inv_w;
        }
        Memory* m = server_memories_[j].get();
        if (kinds[j] == RecordKind::kCodec && m != nullptr) {
          StepContext c;
          c.seed = cfg_.seed;
          c.step = step;
          c.rank = static_cast<std::uint32_t>(comm_.rank());  // not a worker's stream
          c.world = static_cast<std::uint32_t>(cfg_.workers);
          c.bucket = k.context_bucket();
          c.rows = k.rows;
          c.lr = decoded_[0].lr;
          c.steps_per_epoch = decoded_[0].aux64;
          const auto out = writer.begin(k.id, RecordKind::kCodec, m->max_encoded_bytes());
          writer.end(m->compress(acc, c, out));
        } else {
          const auto out = writer.begin(k.id, RecordKind::kDense, 4 * k.numel);
          if (k.numel > 0) std::memcpy(out.data(), acc.data(), 4 * k.numel);
          writer.end(4 * k.numel);
        }
      }
      Frame reply;
      reply.kind = Kind::kReply;
      reply.sender = static_cast<std::uint32_t>(comm_.rank());
      reply.records = writer.records();
      reply.step = step;
      reply.payload_bytes = writer.size();
      reply.aux64 = step + 1;
      send_to_all(reply);
      ++report_.steps;
    }
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
      if (f.step != clock[w] || f.aux64 > version || !std::isfinite(f.lr) || f.lr < 0.0f) {
        throw CorruptMessage("ps " + me_ + ": push from " + who + " has clock " +
                             std::to_string(f.step) + " (expected " + std::to_string(clock[w]) +
                             "), weights version " + std::to_string(f.aux64) + " (current " +
                             std::to_string(version) + "), lr " + std::to_string(f.lr));
      }
      check_push(f, src);
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
      const std::uint64_t staleness = version - f.aux64;
      ++report_.staleness[staleness];
      ++version;
      ++clock[w];
      ++report_.steps;
      if (releasable(w)) {
        reply_to(w, staleness);
      } else {
        held[w] = 1;
        held_staleness[w] = staleness;
      }
      release_held();
    }
  }

  PsConfig cfg_;
  Communicator& comm_;
  std::vector<BucketShape> shapes_;
  std::string me_;
  int index_ = 0;
  std::string canonical_;
  bool compress_ = false;
  std::shared_ptr<const Codec> codec_;
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
};

}  // namespace

PsServerReport run_ps_server(const PsConfig& config, Communicator& comm,
                             std::span<const BucketShape> buckets,
                             std::span<const std::span<const float>> initial_weights,
                             const CodecRegistry& registry) {
  Server server(config, comm, buckets, initial_weights, registry);
  return server.run();
}

}  // namespace gradcomp::dist
