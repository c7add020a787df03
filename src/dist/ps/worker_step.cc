// One step of the parameter server's worker (worker.h), sync and async alike: every key
// encoded into one push per server (a codec message, fp32, or a Sketched-SGD sketch),
// the round trip, Sketched-SGD's second round (the values at the candidates out, the
// top k back), then every reply validated and applied -- the mean gradient (sync) or
// the weights (async).
#include "worker.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "../step_recorder.h"
#include "gradcomp/error.h"
#include "gradcomp/wire.h"
#include "protocol.h"
#include "sketch_plan.h"

namespace gradcomp::dist::ps {

void Worker::check_buckets(std::span<const BucketRef> buckets) const {
  if (buckets.size() != shapes_.size()) {
    throw InvalidArgument("ps worker: " + std::to_string(buckets.size()) + " buckets, built for " +
                          std::to_string(shapes_.size()));
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

bool Worker::sketched(const PsKey& k, std::span<const BucketRef> buckets) const {
  return sketch_ && sketch_->keys[k.id].on && buckets[k.bucket].compressed;
}

void Worker::exchange(std::span<const BucketRef> buckets, std::span<const std::span<float>> weights,
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
        const kernels::SketchHash h = sketch_->hash(k, cfg_.seed, step);
        table_.assign(h.cells(), 0.0f);
        kernels::sketch_accumulate(h, st.v, 1.0f, table_);
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
    ps::RecordReader reader(std::span<const std::byte>(reply_[s].data(), replies_[s].payload_bytes),
                            who);
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
        ps::read_sparse(r.data, st.cand, sketch_->keys[id].k, id, "reply from " + who, sparse_idx_,
                        sparse_val_);
        std::fill(out.begin(), out.end(), 0.0f);
        for (std::size_t t = 0; t < sparse_idx_.size(); ++t) {
          const std::uint32_t i = sparse_idx_[t];
          out[i] = sparse_val_[t];
          if (sketch_->mask) st.u[i] = 0.0f;  // momentum factor masking
          st.v[i] = 0.0f;
        }
      } else {
        if (r.kind != RecordKind::kCodec || !weights.empty() || memories_[id] == nullptr ||
            cfg_.downlink != Downlink::kCompressed || !buckets[k.bucket].compressed) {
          throw CorruptMessage("ps reply from " + who + ": key " + std::to_string(id) +
                               " came as record kind " + std::to_string(static_cast<int>(r.kind)) +
                               ", not the one this step expects");
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

std::string Worker::server_name(std::size_t s) const {
  return cfg_.role_of(cfg_.server_rank(static_cast<int>(s)));
}

}  // namespace gradcomp::dist::ps
