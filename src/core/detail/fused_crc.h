// The checksum fused into a codec's payload pass (Codec::encode_payload_crc): the
// payload is written in chunks and each chunk is checksummed right after it is written,
// while it is still in L1/L2, instead of in a second pass over the whole message from
// L3 or memory. For codecs whose payload is as large as their input (none, fp16).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>

#include "gradcomp/crc32c.h"

namespace gradcomp::detail {

// Elements per chunk: 16 KiB of fp32 output, 8 KiB of fp16 (half an L1 data cache).
inline constexpr std::size_t kFusedCrcChunk = 4096;

// Calls write(first, count) over [0, n) in chunks, each writing out_width * count bytes
// at out + out_width * first; returns the CRC-32C (from 0) of out[0, out_width * n).
template <class Write>
std::uint32_t write_with_crc(std::size_t n, std::size_t out_width, const std::byte* out,
                             Write&& write) {
  std::uint32_t crc = 0;
  for (std::size_t i = 0; i < n; i += kFusedCrcChunk) {
    const std::size_t m = std::min(kFusedCrcChunk, n - i);
    write(i, m);
    crc = crc32c(std::span<const std::byte>(out + out_width * i, out_width * m), crc);
  }
  return crc;
}

}  // namespace gradcomp::detail
