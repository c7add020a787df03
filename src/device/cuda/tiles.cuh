// What the kernels share: each warp takes a tile of kChunks chunks of 32 consecutive
// values (lane l reads value 32 j + l of chunk j: coalesced), loads all of them before
// using any (several loads in flight per thread: the kernels are bandwidth-bound), and
// works on a chunk with warp votes (a chunk's 32 values make one 32-bit word of 1-bit codes
// or two of 2-bit codes).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels.h"

namespace gradcomp::device::cuda {

constexpr int kChunks = 4;
constexpr int kWarp = 32;
constexpr int kTile = kChunks * kWarp;
constexpr int kThreads = 256;
constexpr unsigned kFullMask = 0xffffffffu;

// Blocks of kThreads that give every tile of n values one warp.
inline unsigned tile_blocks(std::int64_t n) {
  const std::int64_t tiles = (n + kTile - 1) / kTile;
  return static_cast<unsigned>((tiles + kThreads / kWarp - 1) / (kThreads / kWarp));
}

__device__ inline std::int64_t warp_tile_start() {
  const std::int64_t warp =
      (static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  return warp * kTile;
}

__device__ inline int lane_id() { return static_cast<int>(threadIdx.x % kWarp); }

// A warp's tile: its first index, and x_i at chunk j's lane (v[j], 0 past n; valid[j]
// says whether it is a value).
struct Tile {
  std::int64_t start;
  float v[kChunks];
  bool valid[kChunks];
};

// Loads the calling warp's tile; false, for the whole warp alike, where it starts past n.
__device__ inline bool load_warp_tile(const Values& x, Tile& t) {
  t.start = warp_tile_start();
  if (t.start >= x.n) return false;
  const int lane = lane_id();
#pragma unroll
  for (int j = 0; j < kChunks; ++j) {
    const std::int64_t i = t.start + j * kWarp + lane;
    t.valid[j] = i < x.n;
    t.v[j] = 0.0f;
    if (t.valid[j]) t.v[j] = x.b != nullptr ? x.a[i] + x.b[i] : x.a[i];
  }
  return true;
}

inline const char* launched() {
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

}  // namespace gradcomp::device::cuda
