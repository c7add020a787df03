// ps-sync on the server (server.h): per step, the push frame of every worker (received
// from each rank in order, never from "any": the sum is then the same on every run),
// then every payload, decoded into the key's mean in worker order; one reply built
// once and sent to all. With Sketched-SGD the summed sketches first yield the
// candidates (a reply of their own), the workers' values at them come in as a second
// round of pushes, and the reply carries the top k of their sums (sketch_rounds).
#include "server.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "../dense_packing.h"
#include "gradcomp/error.h"
#include "gradcomp/kernels/select.h"
#include "gradcomp/wire.h"
#include "protocol.h"
#include "sketch_plan.h"

namespace gradcomp::dist::ps {

void Server::run_sync() {
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
          sum_to_mean(std::span<float>(acc).first(k.numel), inv_w);
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
void Server::add_floats(std::span<const std::byte> data, std::span<float> acc, bool first) {
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
void Server::sketch_rounds(std::uint64_t step, std::span<const RecordKind> kinds) {
  const float inv_w = 1.0f / static_cast<float>(cfg_.workers);
  ps::RecordWriter writer(reply_);
  std::vector<std::size_t> sketched;  // positions j in mine_
  for (std::size_t j = 0; j < mine_.size(); ++j) {
    if (kinds[j] != RecordKind::kSketch) continue;
    sketched.push_back(j);
    const PsKey& k = keys_[mine_[j]];
    SketchServerKey& sk = sketch_keys_[j];
    const kernels::SketchHash h = sketch_->hash(k, cfg_.seed, step);
    const std::span<const float> table(acc_[j].data(), h.cells());
    const std::size_t m =
        kernels::sketch_top_k(h, table, std::span<float>(estimates_).first(k.numel),
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
        kernels::select_topk_exact(sums, sketch_->keys[k.id].k, sk.pos, "ps sketched-sgd");
    sk.update_idx.resize(kk);
    sk.update_val.resize(kk);
    for (std::size_t t = 0; t < kk; ++t) {
      sk.update_idx[t] = sk.cand[sk.pos[t]];
      sk.update_val[t] = sums[sk.pos[t]] * inv_w;
    }
  }
}

}  // namespace gradcomp::dist::ps
