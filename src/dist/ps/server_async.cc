// ps-async on the server (server.h): receive-from-any of the next push frame, its
// payload from that rank, decode every record into scratch (nothing is applied before
// the whole push validated), SGD on the keys' weights with lr/W, reply with the
// weights unless the staleness bound holds the reply back.
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

std::string Server::still_running(const std::vector<char>& done) const {
  std::string s;
  for (int w = 0; w < cfg_.workers; ++w) {
    if (!done[static_cast<std::size_t>(w)]) s += (s.empty() ? "" : ", ") + cfg_.role_of(w);
  }
  return s;
}

void Server::run_async() {
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
  // Each worker's reply has bytes of its own and is sent without waiting: a worker that
  // stops reading (stalled, swapped out, stopped) holds up only its own next reply, not
  // every worker. With one shared buffer the server waited for each send, and a stopped
  // worker with a reply in flight stalled the run until the timeout (the resume soak's
  // forced drift found it). The previous send to w is waited for before w's next reply;
  // w pushes again only after reading it, so that wait is over by then.
  struct Outgoing {
    std::vector<std::byte> payload;
    ps::FrameBytes frame{};
    P2PRequest frame_sent, payload_sent;
    bool in_flight = false;
  };
  std::vector<Outgoing> outgoing(w_count);
  auto finish_send = [&](std::size_t w) {
    Outgoing& o = outgoing[w];
    if (!o.in_flight) return;
    o.in_flight = false;
    guarded("reply to", static_cast<int>(w), [&] {
      comm_.wait(o.frame_sent);
      comm_.wait(o.payload_sent);
    });
  };
  auto reply_to = [&](std::size_t w, std::uint64_t staleness) {
    finish_send(w);
    Outgoing& o = outgoing[w];
    if (o.payload.size() != reply_.size()) o.payload.resize(reply_.size());
    ps::RecordWriter writer(o.payload);
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
    o.frame = ps::encode_frame(reply);
    const int wr = static_cast<int>(w);
    guarded("reply to", wr, [&] {
      o.frame_sent = comm_.isend_bytes(wr, ps::kTagReplyFrame, o.frame);
      o.payload_sent =
          comm_.isend_bytes(wr, ps::kTagReplyPayload,
                            std::span<const std::byte>(o.payload).first(reply.payload_bytes));
    });
    o.in_flight = true;
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
  std::vector<std::uint64_t> epochs_ended(w_count, 0);
  std::uint64_t epochs_saved = 0;
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
    for (std::size_t w = 0; w < w_count; ++w) counters[1 + w] = static_cast<std::int64_t>(clock[w]);
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
    // SGD on every key with lr / W, momentum and lr by the async momentum rule (ps.h).
    const float lr = f.lr * static_cast<float>(optimizer_.lr_scale) * inv_w;
    const auto m = static_cast<float>(optimizer_.momentum);
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
    // A checkpoint whenever a worker is the first to end its e-th epoch (since the start
    // or the restart): saved before the reply, so every worker's checkpoint has a
    // server checkpoint at least as new beside it however far the workers drift apart
    // (keyed to worker 0 alone, a run whose worker 0 lagged had none to resume from).
    if (f.aux == 1 && ++epochs_ended[w] > epochs_saved) {
      epochs_saved = epochs_ended[w];
      save_async();
    }
    if (releasable(w)) {
      reply_to(w, staleness);
    } else {
      held[w] = 1;
      held_staleness[w] = staleness;
    }
    release_held();
  }
  save_async();
  for (std::size_t w = 0; w < w_count; ++w) finish_send(w);
}

}  // namespace gradcomp::dist::ps
