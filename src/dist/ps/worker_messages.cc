// The frames the parameter server's worker (worker.h) exchanges with the servers: the
// handshake (a server built for another configuration refuses), the round trip of a
// step's pushes and replies, and the goodbye (worker 0 then collects every server's
// staleness statistics). A CommError is rethrown naming this worker and the server.
#include "worker.h"

#include <algorithm>
#include <string>
#include <vector>

#include "gradcomp/error.h"
#include "gradcomp/wire.h"
#include "protocol.h"

namespace gradcomp::dist::ps {

void Worker::handshake(std::uint64_t hash) {
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

void Worker::round_trip(const std::vector<char>& active, const std::vector<std::size_t>& candidates,
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
    f.aux = async
                ? static_cast<std::uint32_t>(ctx.steps_per_epoch > 0 &&
                                             (ctx.step + 1) % ctx.steps_per_epoch == 0)
                : static_cast<std::uint32_t>(std::min<std::uint64_t>(ctx.total_steps, 0xFFFFFFFFu));
    frames[s] = ps::encode_frame(f);
  }
  for (std::size_t s = 0; s < s_count; ++s) {
    if (!active[s]) continue;
    const int dst = cfg_.server_rank(static_cast<int>(s));
    guarded("push to", static_cast<int>(s), [&] {
      reqs.push_back(comm_.isend_bytes(dst, ps::kTagPushFrame, frames[s]));
      reqs.push_back(comm_.isend_bytes(dst, ps::kTagPushPayload,
                                       std::span<const std::byte>(push_[s].data(), push_len_[s])));
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
        payload_reqs[s] = comm_.irecv_bytes(src, ps::kTagReplyPayload,
                                            std::span<std::byte>(reply_[s]).first(f.payload_bytes));
      });
    }
  }
  for (std::size_t s = 0; s < s_count; ++s) {
    if (!active[s]) continue;
    guarded("pull from", static_cast<int>(s), [&] { comm_.wait(payload_reqs[s]); });
  }
}

void Worker::finish() {
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

}  // namespace gradcomp::dist::ps
