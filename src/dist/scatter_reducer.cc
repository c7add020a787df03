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
// Messages travel in fixed slots (scatter_frames.h, shared with the device reducer,
// src/device/scatter.cc): a rank's message for slice j of bucket b sits in a slot of the
// codec's bound for that slice's length, so that both ends know every size before
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
#include "step_recorder.h"

namespace gradcomp::dist {

namespace {

class ScatterReducer final : public Reducer {
 public:
  ScatterReducer(const Method& method, Communicator& comm, std::span<const BucketShape> shapes)
      : comm_(comm),
        codec_(method.codec()),
        describe_(describe_reducer(method)),
        frames_(comm, shapes, *codec_) {
    const std::size_t world = frames_.world();
    // The owners keep error feedback when the workers' memory keeps a residual.
    const bool owner_feedback = !method.make_memory(1)->state().empty();
    for (std::size_t b = 0; b < shapes.size(); ++b) {
      Bucket bk;
      bk.id = shapes[b].id;
      for (std::size_t j = 0; j < world; ++j) {
        bk.slices.push_back(method.make_memory(frames_.slice_length(b, j)));
      }
      const std::size_t mine = frames_.mine(b);
      bk.owner =
          owner_feedback ? make_error_feedback(codec_, mine) : make_pass_through(codec_, mine);
      bk.mean.resize(mine);
      buckets_.push_back(std::move(bk));
    }
    compressed_ = std::make_unique<bool[]>(shapes.size());
  }

  void reduce(std::span<const BucketRef> refs, const StepContext& ctx) override {
    check_buckets(refs);
    StepRecorder rec(comm_, stats_);
    const std::size_t world = frames_.world();
    const std::size_t me = frames_.me();
    const float inv_w = 1.0f / static_cast<float>(world);
    for (std::size_t b = 0; b < refs.size(); ++b) compressed_[b] = refs[b].compressed;
    frames_.layout({compressed_.get(), refs.size()});
    frames_.post_receives();

    // ---- encode every slice of every bucket (fp32 when uncompressed), then send slice j to
    // rank j
    for (std::size_t b = 0; b < refs.size(); ++b) {
      Bucket& bk = buckets_[b];
      for (std::size_t j = 0; j < world; ++j) {
        const std::span<std::byte> slot = frames_.out_slot(b, j);
        if (slot.empty()) continue;
        const std::span<float> slice = slice_of(refs[b].grad, b, j);
        if (!refs[b].compressed) {
          std::memcpy(slot.data(), slice.data(), slot.size());
          continue;
        }
        const std::size_t len = bk.slices[j]->compress(
            slice, scatter_slice_context(ctx, bk.id, j, false, me, world), slot);
        std::fill(slot.begin() + static_cast<std::ptrdiff_t>(len), slot.end(), std::byte{0});
      }
    }
    rec.encoded();
    frames_.send_slices();

    // ---- phase 1 arrives: the mean of my slice, compressed by its owner memory (or fp32)
    frames_.wait_slices();
    rec.communicated();
    for (std::size_t b = 0; b < refs.size(); ++b) {
      Bucket& bk = buckets_[b];
      if (bk.mean.empty()) continue;
      if (!refs[b].compressed) {
        frames_.sum_dense_slices(b, inv_w, bk.mean);
        continue;
      }
      std::fill(bk.mean.begin(), bk.mean.end(), 0.0f);
      for (std::size_t r = 0; r < world; ++r) {
        codec_->decode_add(message_in_slot(frames_.in_slot(r, b), static_cast<int>(r), bk.id),
                           bk.mean, inv_w);
      }
      const std::span<std::byte> slot = frames_.own_sum_slot(b);
      const std::size_t len =
          bk.owner->compress(bk.mean, scatter_slice_context(ctx, bk.id, me, true, me, world), slot);
      std::fill(slot.begin() + static_cast<std::ptrdiff_t>(len), slot.end(), std::byte{0});
    }
    rec.encoded();
    frames_.send_sums();
    frames_.wait_sums();
    rec.communicated();

    // ---- phase 2 arrives: every slice from its owner's message (or fp32 mean)
    for (std::size_t b = 0; b < refs.size(); ++b) {
      const Bucket& bk = buckets_[b];
      for (std::size_t j = 0; j < world; ++j) {
        const std::span<const std::byte> slot = frames_.sums_slot(j, b);
        if (slot.empty()) continue;
        const std::span<float> dst = slice_of(refs[b].grad, b, j);
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
      for (std::size_t j = 0; j < b.slices.size(); ++j) {
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
    std::vector<std::unique_ptr<Memory>> slices;  // this rank's memory of each slice
    std::unique_ptr<Memory> owner;                // the owned slice's mean
    std::vector<float> mean;                      // the owned slice's mean, this step
  };

  std::span<float> slice_of(std::span<float> grad, std::size_t b, std::size_t j) const {
    return grad.subspan(frames_.slice_begin(b, j), frames_.slice_length(b, j));
  }

  void check_buckets(std::span<const BucketRef> refs) const {
    if (refs.size() != buckets_.size()) {
      throw InvalidArgument("reduce: " + std::to_string(refs.size()) +
                            " buckets, reducer built for " + std::to_string(buckets_.size()));
    }
    for (std::size_t b = 0; b < refs.size(); ++b) {
      if (refs[b].grad.size() != frames_.size(b)) {
        throw InvalidArgument("reduce: bucket " + std::to_string(b) + " has " +
                              std::to_string(refs[b].grad.size()) + " elements, expected " +
                              std::to_string(frames_.size(b)));
      }
    }
  }

  Communicator& comm_;
  std::shared_ptr<const Codec> codec_;
  std::string describe_;
  ScatterFrames frames_;
  std::vector<Bucket> buckets_;
  std::unique_ptr<bool[]> compressed_;  // this step's BucketRef::compressed
  ReduceStats stats_;
};

}  // namespace

std::unique_ptr<Reducer> make_scatter_reducer(const Method& method, Communicator& comm,
                                              std::span<const BucketShape> shapes) {
  return std::make_unique<ScatterReducer>(method, comm, shapes);
}

}  // namespace gradcomp::dist
