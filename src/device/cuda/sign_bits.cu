// 1-bit codes (1bit, signsgd): encode with the residual's update in one pass, and decode.
#include "tiles.cuh"

namespace gradcomp::device::cuda {

namespace {

__global__ void encode_sign_bits_kernel(Values x, float tau, bool at_least, float* out,
                                        float if_set, float if_clear, std::uint32_t* words) {
  Tile t;
  if (!load_warp_tile(x, t)) return;  // the whole warp
  const int lane = lane_id();
#pragma unroll
  for (int j = 0; j < kChunks; ++j) {
    const std::int64_t chunk = t.start + j * kWarp;
    if (chunk >= x.n) break;  // warp-uniform
    const bool bit = t.valid[j] && (at_least ? t.v[j] >= tau : t.v[j] > tau);
    if (out != nullptr && t.valid[j]) out[chunk + lane] = t.v[j] + (bit ? if_set : if_clear);
    // The ballot has lane l's bit at bit l; the word's byte 0 holds lanes 0-7 with lane 0 in
    // its MSB: reverse all 32 bits (lane 0 to bit 31), then the bytes.
    const unsigned ballot = __ballot_sync(kFullMask, bit);
    if (lane == 0) words[chunk / kWarp] = __byte_perm(__brev(ballot), 0, 0x0123);
  }
}

__global__ void add_sign_bits_kernel(const std::uint8_t* bytes, std::int64_t n, float one,
                                     float zero, float* out) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const bool bit = (bytes[i / 8] >> (7 - i % 8)) & 1;
  out[i] = out[i] + (bit ? one : zero);
}

}  // namespace

const char* encode_sign_bits(Values x, float tau, bool at_least, float* out, float if_set,
                             float if_clear, std::uint8_t* bytes, void* stream) {
  if (x.n == 0) return nullptr;
  encode_sign_bits_kernel<<<tile_blocks(x.n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      x, tau, at_least, out, if_set, if_clear, reinterpret_cast<std::uint32_t*>(bytes));
  return launched();
}

const char* add_sign_bits(const std::uint8_t* bytes, std::int64_t n, float one, float zero,
                          float* out, void* stream) {
  if (n == 0) return nullptr;
  const auto blocks = static_cast<unsigned>((n + kThreads - 1) / kThreads);
  add_sign_bits_kernel<<<blocks, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(bytes, n, one,
                                                                                   zero, out);
  return launched();
}

}  // namespace gradcomp::device::cuda
