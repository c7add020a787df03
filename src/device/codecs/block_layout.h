// Where int's blocks fall in a batch of segments (src/device/codecs/intq.cc): each segment
// padded with zeros to whole blocks of d values, the blocks of all segments back to back,
// and each segment's bit stream of b-bit codes (detail/bitstream.h: whole 32-bit words).
// Host arithmetic only. Internal to gradcomp_device.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "detail/bitstream.h"

namespace gradcomp::device {

class BlockLayout {
 public:
  struct Segment {
    std::int64_t offset = 0;   // its first value in the batch
    std::int64_t n = 0;        // its values
    std::int64_t block = 0;    // its first block
    std::int64_t blocks = 0;   // ceil(n / d)
    std::int64_t padding = 0;  // zeros after its values: blocks * d - n
    std::int64_t stream_bytes = 0;
  };

  BlockLayout(std::span<const std::int64_t> sizes, std::int64_t d, std::int64_t bits) {
    for (const std::int64_t n : sizes) {
      Segment g;
      g.offset = values_;
      g.n = n;
      g.block = blocks_;
      g.blocks = (n + d - 1) / d;
      g.padding = g.blocks * d - n;
      g.stream_bytes = static_cast<std::int64_t>(
          detail::packed_bytes(static_cast<std::size_t>(n), static_cast<unsigned>(bits)));
      segments_.push_back(g);
      values_ += n;
      blocks_ += g.blocks;
      padding_ += g.padding;
      max_padding_ = std::max(max_padding_, g.padding);
      max_stream_padding_bits_ = std::max(max_stream_padding_bits_, 8 * g.stream_bytes - n * bits);
    }
  }

  const std::vector<Segment>& segments() const { return segments_; }
  std::int64_t values() const { return values_; }
  std::int64_t blocks() const { return blocks_; }
  std::int64_t padding() const { return padding_; }
  std::int64_t max_padding() const { return max_padding_; }
  std::int64_t max_stream_padding_bits() const { return max_stream_padding_bits_; }

 private:
  std::vector<Segment> segments_;
  std::int64_t values_ = 0;
  std::int64_t blocks_ = 0;
  std::int64_t padding_ = 0;
  std::int64_t max_padding_ = 0;
  std::int64_t max_stream_padding_bits_ = 0;
};

}  // namespace gradcomp::device
