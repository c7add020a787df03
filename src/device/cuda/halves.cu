// fp16 / bf16 (the fp16 codec): saturate, round to nearest even, write the 16-bit patterns
// and the residual's update in one pass.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "tiles.cuh"

namespace gradcomp::device::cuda {

namespace {

template <bool kBf16>
__global__ void encode_halves_kernel(Values x, float max_finite, float* out, std::uint16_t* halves,
                                     std::int32_t* non_finite) {
  Tile t;
  if (!load_warp_tile(x, t)) return;  // the whole warp
  bool bad = false;
#pragma unroll
  for (int j = 0; j < kChunks; ++j) {
    if (!t.valid[j]) continue;
    const std::int64_t i = t.start + j * kWarp + lane_id();
    bad |= !isfinite(t.v[j]);
    const float c = fminf(fmaxf(t.v[j], -max_finite), max_finite);
    float sent = 0.0f;
    if constexpr (kBf16) {
      const __nv_bfloat16 h = __float2bfloat16_rn(c);
      halves[i] = __bfloat16_as_ushort(h);
      sent = __bfloat162float(h);
    } else {
      const __half h = __float2half_rn(c);
      halves[i] = __half_as_ushort(h);
      sent = __half2float(h);
    }
    if (out != nullptr) out[i] = t.v[j] - sent;
  }
  if (__any_sync(kFullMask, bad) && lane_id() == 0) atomicOr(non_finite, 1);
}

}  // namespace

const char* encode_halves(Values x, bool bf16, float max_finite, float* out, std::uint16_t* halves,
                          std::int32_t* non_finite, void* stream) {
  if (x.n == 0) return nullptr;
  const auto s = static_cast<cudaStream_t>(stream);
  if (bf16) {
    encode_halves_kernel<true>
        <<<tile_blocks(x.n), kThreads, 0, s>>>(x, max_finite, out, halves, non_finite);
  } else {
    encode_halves_kernel<false>
        <<<tile_blocks(x.n), kThreads, 0, s>>>(x, max_finite, out, halves, non_finite);
  }
  return launched();
}

}  // namespace gradcomp::device::cuda
