// The parameter server's server (server.h): construction, the handshake with every
// worker, checkpoints, the checks on push frames and records, replies to all; and
// run_ps_server, gradcomp/dist/ps.h's entry point.
#include "server.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "gradcomp/error.h"
#include "gradcomp/kernels/select.h"
#include "gradcomp/wire.h"
#include "protocol.h"
#include "sketch_plan.h"

namespace gradcomp::dist::ps {

Server::Server(const PsConfig& config, Communicator& comm, std::span<const BucketShape> buckets,
               std::span<const std::span<const float>> initial_weights,
               const CodecRegistry& registry, const PsServerCheckpoints& checkpoints)
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
  const Method method = cfg_.method(registry);
  sketch_ = ps::sketch_plan_for(method, keys_);
  if (sketch_) {
    canonical_ = sketch_->spec;
  } else {
    canonical_ = method.canonical();
    compress_ = !method.dense_only();  // the none codec sends the gradient itself
    codec_ = method.codec();
  }
  if (async && initial_weights.size() != shapes_.size()) {
    throw InvalidArgument("ps server: " + std::to_string(initial_weights.size()) +
                          " initial weight buckets, expected " + std::to_string(shapes_.size()));
  }
  optimizer_ = async_server_optimizer(cfg_);
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
    reply_cap +=
        ps::kRecordHeaderBytes +
        std::max({4 * k.numel, coded_reply ? codec_->max_encoded_bytes(k.numel) : 0, sketch_bytes});
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
    server_memories_.push_back(coded_reply ? method.make_memory(k.numel) : nullptr);
    if (async) {
      const std::span<const float> w0 = initial_weights[k.bucket];
      if (w0.size() != shapes_[k.bucket].numel) {
        throw InvalidArgument("ps server: initial weights of bucket " + std::to_string(k.bucket) +
                              " have " + std::to_string(w0.size()) + " elements, expected " +
                              std::to_string(shapes_[k.bucket].numel));
      }
      weights_.emplace_back(w0.begin() + static_cast<std::ptrdiff_t>(k.offset),
                            w0.begin() + static_cast<std::ptrdiff_t>(k.offset + k.numel));
      velocity_.emplace_back(optimizer_.momentum != 0.0 ? k.numel : 0, 0.0f);
    }
  }
  const auto w = static_cast<std::size_t>(cfg_.workers);
  push_.assign(w, std::vector<std::byte>(push_cap));
  frames_.resize(w);
  reply_.resize(reply_cap);
  hash_ = ps::config_hash(cfg_, canonical_, shapes_);
}

PsServerReport Server::run() {
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

void Server::handshake() {
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
    guarded("handshake with", w,
            [&] { ps::send_message(comm_, w, ps::kTagReplyFrame, ps::kTagReplyPayload, ack, {}); });
    if (!ok) {
      throw InvalidArgument("ps " + me_ + ": " + who +
                            " runs another configuration (compressor, model, topology, "
                            "--servers, --workers or seed differ)");
    }
  }
}

void Server::say_goodbye() {
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
std::vector<StateBuffer> Server::state_arrays() {
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

void Server::save_state(std::uint64_t step, std::span<const std::int64_t> counters) {
  if (!ckpt_.save || step == saved_step_) return;
  const std::vector<StateBuffer> arrays = state_arrays();
  if (arrays.empty() && counters.empty()) return;
  ckpt_.save(step, arrays, counters);
  saved_step_ = step;
}

// ps-sync: the workers resume at `step` > 0; the downlink's error feedback must
// resume there too, or the run would silently leave its trajectory.
void Server::restore_sync_state(std::uint64_t step) {
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
void Server::check_push(const Frame& f, int w, std::size_t records) const {
  if (f.records != records || f.payload_bytes > push_[static_cast<std::size_t>(w)].size()) {
    throw CorruptMessage("ps " + me_ + ": push from " + cfg_.role_of(w) + " announces " +
                         std::to_string(f.records) + " records and " +
                         std::to_string(f.payload_bytes) + " bytes; expected " +
                         std::to_string(records) + " records and at most " +
                         std::to_string(push_[static_cast<std::size_t>(w)].size()) + " bytes");
  }
}

// The j-th record of a push: must be key mine_[j], of a kind and size that fits it.
const PsKey& Server::check_record(const ps::Record& r, std::size_t j,
                                  const std::string& who) const {
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

void Server::recv_frames_in_order(bool* all_done) {
  const auto w_count = static_cast<std::size_t>(cfg_.workers);
  std::vector<P2PRequest> reqs;
  reqs.reserve(w_count);
  for (int w = 0; w < cfg_.workers; ++w) {
    guarded("waiting for", w, [&] {
      reqs.push_back(comm_.irecv_bytes(w, ps::kTagPushFrame, frames_[static_cast<std::size_t>(w)]));
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
      throw CorruptMessage("ps " + me_ + ": " + cfg_.role_of(w) + " sent " + ps::to_string(f.kind) +
                           " where a push was expected");
    }
  }
  if (done != 0 && done != cfg_.workers) {
    throw CorruptMessage("ps " + me_ + ": " + std::to_string(done) + " of " +
                         std::to_string(cfg_.workers) +
                         " workers finished while the others pushed another step");
  }
  *all_done = done == cfg_.workers;
}

// Every worker's push frame of one round: the same step, `records` records each.
void Server::check_round(std::uint64_t step, std::size_t records) const {
  for (int w = 0; w < cfg_.workers; ++w) {
    const Frame& f = decoded_[static_cast<std::size_t>(w)];
    if (f.step != step) {
      throw CorruptMessage("ps " + me_ + ": " + cfg_.role_of(w) + " pushed step " +
                           std::to_string(f.step) + " while " + cfg_.role_of(0) + " pushed step " +
                           std::to_string(step));
    }
    check_push(f, w, records);
  }
}

// The records `writer` wrote into reply_, as one `kind` frame and payload to every worker.
void Server::send_records_to_all(Kind kind, const ps::RecordWriter& writer, std::uint64_t step,
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

void Server::send_to_all(const Frame& reply) {
  const ps::FrameBytes fb = ps::encode_frame(reply);
  std::vector<P2PRequest> reqs;
  for (int w = 0; w < cfg_.workers; ++w) {
    guarded("reply to", w, [&] {
      reqs.push_back(comm_.isend_bytes(w, ps::kTagReplyFrame, fb));
      reqs.push_back(comm_.isend_bytes(
          w, ps::kTagReplyPayload, std::span<const std::byte>(reply_).first(reply.payload_bytes)));
    });
  }
  for (std::size_t i = 0; i < reqs.size(); ++i) {
    guarded("reply to", static_cast<int>(i / 2), [&] { comm_.wait(reqs[i]); });
  }
}

}  // namespace gradcomp::dist::ps

namespace gradcomp::dist {

PsServerReport run_ps_server(const PsConfig& config, Communicator& comm,
                             std::span<const BucketShape> buckets,
                             std::span<const std::span<const float>> initial_weights,
                             const CodecRegistry& registry,
                             const PsServerCheckpoints& checkpoints) {
  ps::Server server(config, comm, buckets, initial_weights, registry, checkpoints);
  return server.run();
}

}  // namespace gradcomp::dist
