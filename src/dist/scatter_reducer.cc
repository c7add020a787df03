// The scatter reducer: each rank owns 1/W of every bucket (slice r of rank r) and the
// average is built there, from compressed slices, then sent back compressed.
//
//   phase 1  every rank compresses slice j of each bucket (its own memory per slice) and
//            sends it to rank j; rank j decodes the W messages of its slice, in rank
//            order, into their mean;
//   phase 2  rank j compresses that mean (its owner memory) and sends the message to every
//            rank; every rank decodes slice j from it, rank j included, so that every
//            rank ends with the same bucket, bit for bit.
//
// Why: a linear codec's allreduce needs messages that sum while compressed (fp16 is the
// narrowest such codec here), and an allgather sends (W-1) whole messages per rank. This
// pattern sends 2(W-1)/W of one message per rank, like a ring allreduce, with any codec:
// 4-bit values cost a quarter of fp16's bytes. Both phases go point to point, every
// receive posted before the first send, so a round trip costs about three one-way
// latencies, not a ring's 2(W-1) (docs/algorithms/README.md, "Reducers").
//
// Error feedback at both ends (DoubleSqueeze, Tang et al. 2019): when the method keeps a
// residual (ef, efm, a bare biased codec), the owner keeps one too, for what its
// compressed mean left out; an unbiased codec (qsgd) or noef runs both phases without.
//
// Messages travel in fixed slots: a rank's message for slice j of bucket b sits in a slot
// of the codec's bound for that slice's length, so that both ends know every size before
// anything arrives (Gloo's point-to-point receives need the exact size). Fixed-rate codecs
// (fp16, int, qsgd, 1bit, signsgd, top-k, chunktopk) fill their slots; a codec whose
// message varies (2bit, threshold, atomo) pays its bound. Slots are zero-padded; what a
// slot holds past its message is not read.
//
// Uncompressed buckets (BucketRef::compressed == false) take the same two phases as raw
// fp32 slices: the owner sums them in rank order and sends back the mean. A ring allreduce
// beside the phases would cost 2(W-1) latency hops, more than the phases themselves on a
// distant link.
#include "scatter_reducer.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "gradcomp/dist/reducers.h"
#include "gradcomp/error.h"
#include "gradcomp/wire.h"
#include "step_recorder.h"

namespace gradcomp::dist {

namespace {

// The message at the start of a slot (header + payload), framing checked.
std::span<const std::byte> message_in_slot(std::span<const std::byte> slot, int from,
                                           std::uint32_t bucket) {
  const auto where = [&] {
    return "scatter reducer: rank " + std::to_string(from) + " bucket " + std::to_string(bucket);
  };
  if (slot.size() < kHeaderBytes) {
    throw CorruptMessage(where() + ": slot of " + std::to_string(slot.size()) + " bytes < header " +
                         std::to_string(kHeaderBytes));
  }
  const std::size_t payload = load_le<std::uint32_t>(slot.data() + 16);
  if (payload > slot.size() - kHeaderBytes) {
    throw CorruptMessage(where() + ": payload " + std::to_string(payload) + " bytes > slot's " +
                         std::to_string(slot.size() - kHeaderBytes));
  }
  return slot.first(kHeaderBytes + payload);
}

class ScatterReducer final : public Reducer {
 public:
  ScatterReducer(const Method& method, Communicator& comm, std::span<const BucketShape> shapes)
      : comm_(comm),
        world_(static_cast<std::size_t>(comm.world_size())),
        me_(static_cast<std::size_t>(comm.rank())),
        codec_(method.codec()),
        describe_(describe_reducer(method)) {
    // The owners keep error feedback when the workers' memory keeps a residual.
    const bool owner_feedback = !method.make_memory(1)->state().empty();
    for (const BucketShape& s : shapes) {
      Bucket b;
      b.id = s.id;
      b.n = s.numel;
      for (std::size_t j = 0; j < world_; ++j) {
        const std::size_t len = slice_length(b.n, j);
        b.slices.push_back(method.make_memory(len));
        b.slot_bytes.push_back(len == 0 ? 0 : b.slices.back()->max_encoded_bytes());
        b.slot_cap.push_back(std::max(b.slot_bytes.back(), 4 * len));
      }
      const std::size_t mine = slice_length(b.n, me_);
      b.owner =
          owner_feedback ? make_error_feedback(codec_, mine) : make_pass_through(codec_, mine);
      b.mean.resize(mine);
      buckets_.push_back(std::move(b));
    }
    std::size_t send_cap = 0;
    std::size_t own_slice_cap = 0;
    std::size_t recv_cap = 0;
    for (const Bucket& b : buckets_) {
      for (std::size_t j = 0; j < world_; ++j) send_cap += b.slot_cap[j];
      own_slice_cap += b.slot_cap[me_];
      recv_cap += b.slot_cap[me_] * world_;
    }
    slices_out_.resize(send_cap);
    slices_in_.resize(recv_cap);
    sums_out_.resize(own_slice_cap);
    sums_in_.resize(send_cap);
  }

  void reduce(std::span<const BucketRef> refs, const StepContext& ctx) override {
    check_buckets(refs);
    StepRecorder rec(comm_, stats_);
    const float inv_w = 1.0f / static_cast<float>(world_);

    // ---- this step's frames: per destination j, a slot of slice j of every bucket
    layout(refs);

    // ---- receives first (both phases), so that every send finds its receive posted
    std::vector<P2PRequest> slices_in;
    std::vector<P2PRequest> sums_in;
    std::vector<P2PRequest> sent;
    for (std::size_t r = 0; r < world_; ++r) {
      if (r == me_) continue;
      if (frame_[me_] > 0) {
        slices_in.push_back(comm_.irecv_bytes(static_cast<int>(r), kTagScatterSlices, in_frame(r)));
      }
      if (frame_[r] > 0) {
        sums_in.push_back(comm_.irecv_bytes(static_cast<int>(r), kTagScatterSums, sums_frame(r)));
      }
    }

    // ---- encode every slice of every bucket (fp32 when uncompressed), then send slice j to
    // rank j
    for (std::size_t b = 0; b < refs.size(); ++b) {
      Bucket& bk = buckets_[b];
      for (std::size_t j = 0; j < world_; ++j) {
        const std::span<std::byte> slot = out_slot(b, j);
        if (slot.empty()) continue;
        if (!refs[b].compressed) {
          std::memcpy(slot.data(), slice_of(refs[b].grad, j).data(), slot.size());
          continue;
        }
        const std::size_t len =
            bk.slices[j]->compress(slice_of(refs[b].grad, j), slice_ctx(ctx, bk, j, false), slot);
        std::fill(slot.begin() + static_cast<std::ptrdiff_t>(len), slot.end(), std::byte{0});
      }
    }
    rec.encoded();
    for (std::size_t j = 0; j < world_; ++j) {
      if (j != me_ && frame_[j] > 0) {
        sent.push_back(comm_.isend_bytes(static_cast<int>(j), kTagScatterSlices, out_frame(j)));
      }
    }

    // ---- phase 1 arrives: the mean of my slice, compressed by its owner memory (or fp32)
    wait_all(slices_in);
    rec.communicated();
    for (std::size_t b = 0; b < refs.size(); ++b) {
      Bucket& bk = buckets_[b];
      if (bk.mean.empty()) continue;
      std::fill(bk.mean.begin(), bk.mean.end(), 0.0f);
      if (!refs[b].compressed) {
        sum_dense_slices(b, inv_w);
        continue;
      }
      for (std::size_t r = 0; r < world_; ++r) {
        const std::span<const std::byte> slot =
            r == me_ ? std::span<const std::byte>(out_slot(b, me_)) : in_slot(r, b);
        codec_->decode_add(message_in_slot(slot, static_cast<int>(r), bk.id), bk.mean, inv_w);
      }
      const std::span<std::byte> slot = own_sum_slot(b);
      const std::size_t len = bk.owner->compress(bk.mean, slice_ctx(ctx, bk, me_, true), slot);
      std::fill(slot.begin() + static_cast<std::ptrdiff_t>(len), slot.end(), std::byte{0});
    }
    rec.encoded();
    for (std::size_t j = 0; j < world_; ++j) {
      if (j != me_ && frame_[me_] > 0) {
        sent.push_back(comm_.isend_bytes(static_cast<int>(j), kTagScatterSums,
                                         std::span<const std::byte>(sums_out_).first(frame_[me_])));
      }
    }
    wait_all(sums_in);
    wait_all(sent);
    rec.communicated();

    // ---- phase 2 arrives: every slice from its owner's message (or fp32 mean)
    for (std::size_t b = 0; b < refs.size(); ++b) {
      const Bucket& bk = buckets_[b];
      for (std::size_t j = 0; j < world_; ++j) {
        const std::span<const std::byte> slot =
            j == me_ ? std::span<const std::byte>(own_sum_slot(b)) : sums_slot(j, b);
        if (slot.empty()) continue;
        const std::span<float> dst = slice_of(refs[b].grad, j);
        if (!refs[b].compressed) {
          std::memcpy(dst.data(), slot.data(), slot.size());
          continue;
        }
        std::fill(dst.begin(), dst.end(), 0.0f);
        codec_->decode_add(message_in_slot(slot, static_cast<int>(j), bk.id), dst, 1.0f);
      }
    }
    rec.decoded();
    rec.finish();
  }

  ReduceStats take_stats() override { return std::exchange(stats_, {}); }

  // "bucket<id>.slice<j>.<name>" for this rank's memory of each slice, then
  // "bucket<id>.owner.<name>" for the slice it owns: the slices depend on the world size.
  std::vector<StateBuffer> state() override {
    std::vector<StateBuffer> out;
    for (Bucket& b : buckets_) {
      const std::string prefix = "bucket" + std::to_string(b.id) + ".";
      for (std::size_t j = 0; j < world_; ++j) {
        for (auto& s : b.slices[j]->state()) {
          out.push_back({prefix + "slice" + std::to_string(j) + "." + s.name, s.data});
        }
      }
      for (auto& s : b.owner->state()) out.push_back({prefix + "owner." + s.name, s.data});
    }
    return out;
  }

  std::string describe() const override { return describe_; }

  bool momentum_in_memory() const override {
    return !buckets_.empty() && buckets_.front().slices.front()->carries_momentum();
  }

 private:
  struct Bucket {
    std::uint32_t id = 0;
    std::size_t n = 0;
    std::vector<std::unique_ptr<Memory>> slices;  // this rank's memory of each slice
    std::vector<std::size_t> slot_bytes;          // per slice: its message's bound (0: empty)
    std::vector<std::size_t> slot_cap;            // ... or its fp32 bytes, whichever is more
    std::unique_ptr<Memory> owner;                // the owned slice's mean
    std::vector<float> mean;                      // the owned slice's mean, this step
  };

  std::size_t slice_length(std::size_t n, std::size_t j) const {
    return n / world_ + (j < n % world_ ? 1 : 0);
  }
  std::size_t slice_begin(std::size_t n, std::size_t j) const {
    return j * (n / world_) + std::min(j, n % world_);
  }
  std::span<float> slice_of(std::span<float> grad, std::size_t j) const {
    return grad.subspan(slice_begin(grad.size(), j), slice_length(grad.size(), j));
  }

  StepContext slice_ctx(const StepContext& ctx, const Bucket& b, std::size_t j, bool owner) const {
    StepContext c = ctx;
    c.rank = static_cast<std::uint32_t>(me_);
    c.world = static_cast<std::uint32_t>(world_);
    c.bucket = scatter_slice_stream(b.id, j, owner);
    c.rows = 0;  // a slice is a flat run of the bucket, not its matrix
    return c;
  }

  // Frame sizes and slot offsets for this step: a compressed slice's slot holds a message
  // of its codec's bound, an uncompressed one its fp32 values.
  void layout(std::span<const BucketRef> refs) {
    frame_.assign(world_, 0);
    slot_offset_.assign(refs.size() * world_, 0);
    slot_size_.assign(refs.size() * world_, 0);
    own_slot_offset_.assign(refs.size(), 0);
    for (std::size_t j = 0; j < world_; ++j) {
      for (std::size_t b = 0; b < refs.size(); ++b) {
        const std::size_t size =
            refs[b].compressed ? buckets_[b].slot_bytes[j] : 4 * slice_length(buckets_[b].n, j);
        slot_offset_[b * world_ + j] = frame_[j];
        slot_size_[b * world_ + j] = size;
        frame_[j] += size;
      }
    }
    out_frame_offset_.assign(world_ + 1, 0);
    for (std::size_t j = 0; j < world_; ++j) {
      out_frame_offset_[j + 1] = out_frame_offset_[j] + frame_[j];
    }
    for (std::size_t b = 0; b < refs.size(); ++b)
      own_slot_offset_[b] = slot_offset_[b * world_ + me_];
  }

  std::span<std::byte> out_frame(std::size_t j) {
    return {slices_out_.data() + out_frame_offset_[j], frame_[j]};
  }
  std::span<std::byte> out_slot(std::size_t b, std::size_t j) {
    return out_frame(j).subspan(slot_offset_[b * world_ + j], slot_size_[b * world_ + j]);
  }
  // Rank r's frame of my slices (phase 1).
  std::span<std::byte> in_frame(std::size_t r) {
    return {slices_in_.data() + r * frame_[me_], frame_[me_]};
  }
  std::span<const std::byte> in_slot(std::size_t r, std::size_t b) {
    return in_frame(r).subspan(slot_offset_[b * world_ + me_], slot_size_[b * world_ + me_]);
  }
  // My slice's compressed mean in my phase-2 frame.
  std::span<std::byte> own_sum_slot(std::size_t b) {
    return std::span<std::byte>(sums_out_).subspan(own_slot_offset_[b],
                                                   slot_size_[b * world_ + me_]);
  }
  // Owner j's frame of its means (phase 2).
  std::span<std::byte> sums_frame(std::size_t j) {
    return {sums_in_.data() + out_frame_offset_[j], frame_[j]};
  }
  std::span<const std::byte> sums_slot(std::size_t j, std::size_t b) {
    return sums_frame(j).subspan(slot_offset_[b * world_ + j], slot_size_[b * world_ + j]);
  }

  // My slice of an uncompressed bucket: every rank's fp32 values summed in rank order, times
  // 1/W (as every reducer's dense mean: the reciprocal, not a division), into my phase-2 slot.
  void sum_dense_slices(std::size_t b, float inv_w) {
    std::vector<float>& mean = buckets_[b].mean;
    for (std::size_t r = 0; r < world_; ++r) {
      const std::byte* src = r == me_ ? out_slot(b, me_).data() : in_slot(r, b).data();
      for (std::size_t i = 0; i < mean.size(); ++i) mean[i] += load_le<float>(src + 4 * i);
    }
    for (float& x : mean) x *= inv_w;
    std::memcpy(own_sum_slot(b).data(), mean.data(), 4 * mean.size());
  }

  // A peer that fails throws CommError from wait(); the requests still pending are then
  // aborted (with the communicator, which a failure leaves broken).
  void wait_all(std::vector<P2PRequest>& reqs) {
    for (P2PRequest& r : reqs) {
      if (r.pending()) comm_.wait(r);
    }
  }

  void check_buckets(std::span<const BucketRef> refs) const {
    if (refs.size() != buckets_.size()) {
      throw InvalidArgument("reduce: " + std::to_string(refs.size()) +
                            " buckets, reducer built for " + std::to_string(buckets_.size()));
    }
    for (std::size_t b = 0; b < refs.size(); ++b) {
      if (refs[b].grad.size() != buckets_[b].n) {
        throw InvalidArgument("reduce: bucket " + std::to_string(b) + " has " +
                              std::to_string(refs[b].grad.size()) + " elements, expected " +
                              std::to_string(buckets_[b].n));
      }
    }
  }

  Communicator& comm_;
  std::size_t world_;
  std::size_t me_;
  std::shared_ptr<const Codec> codec_;
  std::string describe_;
  std::vector<Bucket> buckets_;
  std::vector<std::size_t> frame_;             // per rank j: bytes of one frame of slice j
  std::vector<std::size_t> slot_offset_;       // [b * W + j]: bucket b's slot in frame j
  std::vector<std::size_t> slot_size_;         // [b * W + j]: its bytes this step
  std::vector<std::size_t> own_slot_offset_;   // per bucket: its slot in my frame
  std::vector<std::size_t> out_frame_offset_;  // frame j's start in slices_out_
  std::vector<std::byte> slices_out_;          // phase 1, sent: my messages of every slice
  std::vector<std::byte> slices_in_;           // phase 1, received: every rank's frame of my slice
  std::vector<std::byte> sums_out_;            // phase 2, sent: my slice's mean, compressed
  std::vector<std::byte> sums_in_;             // phase 2, received: every owner's frame
  ReduceStats stats_;
};

}  // namespace

std::unique_ptr<Reducer> make_scatter_reducer(const Method& method, Communicator& comm,
                                              std::span<const BucketShape> shapes) {
  return std::make_unique<ScatterReducer>(method, comm, shapes);
}

}  // namespace gradcomp::dist
