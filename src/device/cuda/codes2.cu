// 2-bit codes (2bit, fixed or adaptive threshold): encode with the residual's update in one
// pass, check a received payload, decode.
#include "tiles.cuh"

namespace gradcomp::device::cuda {

namespace {

__global__ void encode_codes2_kernel(Values x, float tau, float* out, float neg_tau,
                                     std::uint8_t* codes, std::int64_t bytes,
                                     std::int32_t* non_finite) {
  Tile t;
  if (!load_warp_tile(x, t)) return;  // the whole warp
  const int lane = lane_id();
  bool bad = false;
#pragma unroll
  for (int j = 0; j < kChunks; ++j) {
    const std::int64_t chunk = t.start + j * kWarp;
    if (chunk >= x.n) break;  // warp-uniform
    bad |= t.valid[j] && !isfinite(t.v[j]);
    const bool hi = t.valid[j] && t.v[j] >= tau;
    const bool lo = t.valid[j] && t.v[j] <= -tau;
    if (out != nullptr && t.valid[j]) {
      const float s = hi ? 1.0f : (lo ? -1.0f : 0.0f);
      out[chunk + lane] = t.v[j] + neg_tau * s;
    }
    // Lane l's code in its byte's place (first value in the top bits), OR-ed over each
    // group of four lanes; the group's first lane writes the byte.
    unsigned code = hi ? 3u : (lo ? 2u : 0u);
    code <<= 6 - 2 * (lane % 4);
    code |= __shfl_xor_sync(kFullMask, code, 1);
    code |= __shfl_xor_sync(kFullMask, code, 2);
    const std::int64_t byte = (chunk + lane) / 4;
    if (lane % 4 == 0 && byte < bytes) codes[byte] = static_cast<std::uint8_t>(code);
  }
  if (non_finite != nullptr && __any_sync(kFullMask, bad) && lane == 0) atomicOr(non_finite, 1);
}

// A grid-stride loop over the bytes: one atomic per flag per block at most.
__global__ void check_codes2_kernel(const std::uint8_t* codes, std::int64_t n, std::int64_t bytes,
                                    std::int32_t* flags) {
  bool padding = false, code01 = false, nonzero = false;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t b = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; b < bytes;
       b += stride) {
    const unsigned byte = codes[b];
#pragma unroll
    for (int m = 0; m < 4; ++m) {
      const unsigned c = (byte >> (6 - 2 * m)) & 3u;
      if (4 * b + m < n) {
        code01 |= c == 1u;
        nonzero |= c != 0u;
      } else {
        padding |= c != 0u;
      }
    }
  }
  padding = __syncthreads_or(padding);
  code01 = __syncthreads_or(code01);
  nonzero = __syncthreads_or(nonzero);
  if (threadIdx.x == 0) {
    if (padding) atomicOr(&flags[0], 1);
    if (code01) atomicOr(&flags[1], 1);
    if (nonzero) atomicOr(&flags[2], 1);
  }
}

__global__ void add_codes2_kernel(const std::uint8_t* codes, std::int64_t n, Lut4 lut, float* out) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const unsigned c = (codes[i / 4] >> (6 - 2 * (i % 4))) & 3u;
  out[i] = out[i] + lut.value[c];
}

}  // namespace

const char* encode_codes2(Values x, float tau, float* out, float neg_tau, std::uint8_t* codes,
                          std::int64_t bytes, std::int32_t* non_finite, void* stream) {
  if (x.n == 0) return nullptr;
  encode_codes2_kernel<<<tile_blocks(x.n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      x, tau, out, neg_tau, codes, bytes, non_finite);
  return launched();
}

const char* check_codes2(const std::uint8_t* codes, std::int64_t n, std::int64_t bytes,
                         std::int32_t* flags, void* stream) {
  if (bytes == 0) return nullptr;
  // Enough blocks to fill a large GPU, few enough that the atomics do not matter.
  const std::int64_t wanted = (bytes + kThreads - 1) / kThreads;
  const auto blocks = static_cast<unsigned>(wanted < 1024 ? wanted : 1024);
  check_codes2_kernel<<<blocks, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(codes, n, bytes,
                                                                                  flags);
  return launched();
}

const char* add_codes2(const std::uint8_t* codes, std::int64_t n, Lut4 lut, float* out,
                       void* stream) {
  if (n == 0) return nullptr;
  const auto blocks = static_cast<unsigned>((n + kThreads - 1) / kThreads);
  add_codes2_kernel<<<blocks, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(codes, n, lut, out);
  return launched();
}

}  // namespace gradcomp::device::cuda
