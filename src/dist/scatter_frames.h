// The scatter reducer's slices, slots, frames and point-to-point traffic (scatter_reducer.cc
// says why the reducer works so), shared by the host reducer (scatter_reducer.cc) and the
// device one (src/device/scatter.cc), which differ only in where they encode and decode.
//
// Rank j owns slice j of every bucket: n / W values, one more for the first n % W slices.
// A step's frame for rank j holds a slot for slice j of every bucket, in bucket order: a
// compressed bucket's slot is its codec's bound for that slice (the message at its start,
// zero-padded), an uncompressed one's the slice's fp32 values. Phase 1 sends frame j to
// rank j (every rank's messages of slice j); phase 2 sends the owner's frame of its means
// to every rank, in the same layout. Every receive is posted before the first send.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "gradcomp/codec.h"
#include "gradcomp/dist/communicator.h"
#include "gradcomp/reducer.h"

namespace gradcomp::dist {

// Point-to-point tags of the two phases (the parameter server uses 11 to 14).
inline constexpr int kTagScatterSlices = 21;
inline constexpr int kTagScatterSums = 22;

// The RNG key (StepContext::bucket) of a slice's message: a stochastic codec must not draw
// the same numbers for the W slices of a bucket, nor the owner for its mean as for its own
// slice. A 64-bit mix of (bucket, owner, slice), cut to 32 bits.
inline std::uint32_t scatter_slice_stream(std::uint32_t bucket, std::size_t slice, bool owner) {
  std::uint64_t k = (std::uint64_t{bucket} << 32) | (std::uint64_t{owner} << 31) | slice;
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  return static_cast<std::uint32_t>(k);
}

// The step context of slice j's message of bucket `bucket` (the owner's mean: owner true).
StepContext scatter_slice_context(const StepContext& ctx, std::uint32_t bucket, std::size_t j,
                                  bool owner, std::size_t me, std::size_t world);

// The message at the start of a slot (header + payload), its framing checked: CorruptMessage
// naming the rank and bucket for a payload longer than the slot.
std::span<const std::byte> message_in_slot(std::span<const std::byte> slot, int from,
                                           std::uint32_t bucket);

class ScatterFrames {
 public:
  // Buckets of the given shapes; a compressed slice's slot holds codec's bound for its
  // values (Codec::max_encoded_bytes, every memory's bound too).
  ScatterFrames(Communicator& comm, std::span<const BucketShape> shapes, const Codec& codec);

  std::size_t world() const { return world_; }
  std::size_t me() const { return me_; }
  std::size_t buckets() const { return n_.size(); }
  std::size_t size(std::size_t b) const { return n_[b]; }
  std::size_t slice_length(std::size_t b, std::size_t j) const;
  std::size_t slice_begin(std::size_t b, std::size_t j) const;
  std::size_t mine(std::size_t b) const { return slice_length(b, me_); }

  // This step's layout: compressed[b] false sends bucket b's slices as fp32.
  void layout(std::span<const bool> compressed);

  // Phase 1: my slot of slice j of bucket b (sent to rank j; j == me stays here), and rank
  // r's slot of my slice of bucket b once received (r == me: my own slot).
  std::span<std::byte> out_slot(std::size_t b, std::size_t j);
  std::span<const std::byte> in_slot(std::size_t r, std::size_t b);
  // Phase 2: my slot of my slice's mean of bucket b, and owner j's (j == me: mine).
  std::span<std::byte> own_sum_slot(std::size_t b);
  std::span<const std::byte> sums_slot(std::size_t j, std::size_t b);

  // Posts every receive of both phases.
  void post_receives();
  // Sends phase 1's frames (after every out_slot is written), then waits for the frames of
  // my slices.
  void send_slices();
  void wait_slices();
  // Sends my frame of means to every rank (after every own_sum_slot is written), then
  // waits for the other owners' frames and for every send.
  void send_sums();
  void wait_sums();

  // My slice of an uncompressed bucket: every rank's fp32 values summed in rank order, times
  // 1/W (as every reducer's dense mean: the reciprocal, not a division), into `mean` and my
  // phase-2 slot.
  void sum_dense_slices(std::size_t b, float inv_w, std::span<float> mean);

 private:
  std::span<std::byte> out_frame(std::size_t j);
  std::span<std::byte> in_frame(std::size_t r);
  std::span<std::byte> sums_frame(std::size_t j);
  // A peer that fails throws CommError from wait(); the requests still pending are then
  // aborted (with the communicator, which a failure leaves broken).
  void wait_all(std::vector<P2PRequest>& reqs);

  Communicator& comm_;
  std::size_t world_;
  std::size_t me_;
  std::vector<std::size_t> n_;
  std::vector<std::size_t> slot_bytes_;        // [b * W + j]: slice j's message bound (0: empty)
  std::vector<std::size_t> frame_;             // per rank j: bytes of one frame of slice j
  std::vector<std::size_t> slot_offset_;       // [b * W + j]: bucket b's slot in frame j
  std::vector<std::size_t> slot_size_;         // [b * W + j]: its bytes this step
  std::vector<std::size_t> out_frame_offset_;  // frame j's start in slices_out_
  std::vector<std::byte> slices_out_;          // phase 1, sent: my messages of every slice
  std::vector<std::byte> slices_in_;           // phase 1, received: every rank's frame of my slice
  std::vector<std::byte> sums_out_;            // phase 2, sent: my slice's mean, compressed
  std::vector<std::byte> sums_in_;             // phase 2, received: every owner's frame
  std::vector<P2PRequest> slices_pending_;
  std::vector<P2PRequest> sums_pending_;
  std::vector<P2PRequest> sent_;
};

}  // namespace gradcomp::dist
