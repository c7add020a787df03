#include "scatter_frames.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "gradcomp/error.h"
#include "gradcomp/wire.h"

namespace gradcomp::dist {

StepContext scatter_slice_context(const StepContext& ctx, std::uint32_t bucket, std::size_t j,
                                  bool owner, std::size_t me, std::size_t world) {
  StepContext c = ctx;
  c.rank = static_cast<std::uint32_t>(me);
  c.world = static_cast<std::uint32_t>(world);
  c.bucket = scatter_slice_stream(bucket, j, owner);
  c.rows = 0;  // a slice is a flat run of the bucket, not its matrix
  return c;
}

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

ScatterFrames::ScatterFrames(Communicator& comm, std::span<const BucketShape> shapes,
                             const Codec& codec)
    : comm_(comm),
      world_(static_cast<std::size_t>(comm.world_size())),
      me_(static_cast<std::size_t>(comm.rank())) {
  for (const BucketShape& s : shapes) n_.push_back(s.numel);
  std::size_t send_cap = 0;
  std::size_t own_slice_cap = 0;
  for (std::size_t b = 0; b < n_.size(); ++b) {
    for (std::size_t j = 0; j < world_; ++j) {
      const std::size_t len = slice_length(b, j);
      slot_bytes_.push_back(len == 0 ? 0 : codec.max_encoded_bytes(len));
      // A slot holds the message or the fp32 slice, whichever the step sends.
      const std::size_t cap = std::max(slot_bytes_.back(), 4 * len);
      send_cap += cap;
      if (j == me_) own_slice_cap += cap;
    }
  }
  slices_out_.resize(send_cap);
  slices_in_.resize(own_slice_cap * world_);
  sums_out_.resize(own_slice_cap);
  sums_in_.resize(send_cap);
}

std::size_t ScatterFrames::slice_length(std::size_t b, std::size_t j) const {
  return n_[b] / world_ + (j < n_[b] % world_ ? 1 : 0);
}

std::size_t ScatterFrames::slice_begin(std::size_t b, std::size_t j) const {
  return j * (n_[b] / world_) + std::min(j, n_[b] % world_);
}

void ScatterFrames::layout(std::span<const bool> compressed) {
  frame_.assign(world_, 0);
  slot_offset_.assign(n_.size() * world_, 0);
  slot_size_.assign(n_.size() * world_, 0);
  for (std::size_t j = 0; j < world_; ++j) {
    for (std::size_t b = 0; b < n_.size(); ++b) {
      const std::size_t size = compressed[b] ? slot_bytes_[b * world_ + j] : 4 * slice_length(b, j);
      slot_offset_[b * world_ + j] = frame_[j];
      slot_size_[b * world_ + j] = size;
      frame_[j] += size;
    }
  }
  out_frame_offset_.assign(world_ + 1, 0);
  for (std::size_t j = 0; j < world_; ++j) {
    out_frame_offset_[j + 1] = out_frame_offset_[j] + frame_[j];
  }
}

std::span<std::byte> ScatterFrames::out_frame(std::size_t j) {
  return {slices_out_.data() + out_frame_offset_[j], frame_[j]};
}

std::span<std::byte> ScatterFrames::out_slot(std::size_t b, std::size_t j) {
  return out_frame(j).subspan(slot_offset_[b * world_ + j], slot_size_[b * world_ + j]);
}

std::span<std::byte> ScatterFrames::in_frame(std::size_t r) {
  return {slices_in_.data() + r * frame_[me_], frame_[me_]};
}

std::span<const std::byte> ScatterFrames::in_slot(std::size_t r, std::size_t b) {
  if (r == me_) return out_slot(b, me_);
  return in_frame(r).subspan(slot_offset_[b * world_ + me_], slot_size_[b * world_ + me_]);
}

std::span<std::byte> ScatterFrames::own_sum_slot(std::size_t b) {
  return std::span<std::byte>(sums_out_).subspan(slot_offset_[b * world_ + me_],
                                                 slot_size_[b * world_ + me_]);
}

std::span<std::byte> ScatterFrames::sums_frame(std::size_t j) {
  return {sums_in_.data() + out_frame_offset_[j], frame_[j]};
}

std::span<const std::byte> ScatterFrames::sums_slot(std::size_t j, std::size_t b) {
  if (j == me_) return own_sum_slot(b);
  return sums_frame(j).subspan(slot_offset_[b * world_ + j], slot_size_[b * world_ + j]);
}

void ScatterFrames::post_receives() {
  slices_pending_.clear();
  sums_pending_.clear();
  sent_.clear();
  for (std::size_t r = 0; r < world_; ++r) {
    if (r == me_) continue;
    if (frame_[me_] > 0) {
      slices_pending_.push_back(
          comm_.irecv_bytes(static_cast<int>(r), kTagScatterSlices, in_frame(r)));
    }
    if (frame_[r] > 0) {
      sums_pending_.push_back(
          comm_.irecv_bytes(static_cast<int>(r), kTagScatterSums, sums_frame(r)));
    }
  }
}

void ScatterFrames::send_slices() {
  for (std::size_t j = 0; j < world_; ++j) {
    if (j != me_ && frame_[j] > 0) {
      sent_.push_back(comm_.isend_bytes(static_cast<int>(j), kTagScatterSlices, out_frame(j)));
    }
  }
}

void ScatterFrames::wait_slices() { wait_all(slices_pending_); }

void ScatterFrames::send_sums() {
  for (std::size_t j = 0; j < world_; ++j) {
    if (j != me_ && frame_[me_] > 0) {
      sent_.push_back(comm_.isend_bytes(static_cast<int>(j), kTagScatterSums,
                                        std::span<const std::byte>(sums_out_).first(frame_[me_])));
    }
  }
}

void ScatterFrames::wait_sums() {
  wait_all(sums_pending_);
  wait_all(sent_);
}

void ScatterFrames::sum_dense_slices(std::size_t b, float inv_w, std::span<float> mean) {
  if (mean.empty()) return;
  std::fill(mean.begin(), mean.end(), 0.0f);
  for (std::size_t r = 0; r < world_; ++r) {
    const std::byte* src = in_slot(r, b).data();
    for (std::size_t i = 0; i < mean.size(); ++i) mean[i] += load_le<float>(src + 4 * i);
  }
  for (float& x : mean) x *= inv_w;
  std::memcpy(own_sum_slot(b).data(), mean.data(), 4 * mean.size());
}

void ScatterFrames::wait_all(std::vector<P2PRequest>& reqs) {
  for (P2PRequest& r : reqs) {
    if (r.pending()) comm_.wait(r);
  }
}

}  // namespace gradcomp::dist
