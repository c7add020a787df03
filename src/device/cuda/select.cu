// Top-k's candidates above a device-side threshold and its sample's positions, and the
// error-feedback sum with the finiteness check.
#include "gradcomp/rng.h"  // constexpr, called in device code (--expt-relaxed-constexpr)
#include "tiles.cuh"

namespace gradcomp::device::cuda {

namespace {

__global__ void select_at_least_kernel(Values x, const std::int32_t* thr, float* out,
                                       std::int64_t* idx, std::int64_t cap,
                                       unsigned long long* count) {
  Tile t;
  if (!load_warp_tile(x, t)) return;  // the whole warp
  const int lane = lane_id();
  const std::int32_t threshold = *thr;
#pragma unroll
  for (int j = 0; j < kChunks; ++j) {
    const std::int64_t i = t.start + j * kWarp + lane;
    if (out != nullptr && t.valid[j]) out[i] = t.v[j];
    // |x|'s pattern: the sign bit cleared (as ATen's abs), compared as int32.
    const std::int32_t u = __float_as_int(t.v[j]) & 0x7fffffff;
    const bool take = t.valid[j] && u >= threshold;
    const unsigned ballot = __ballot_sync(kFullMask, take);
    if (ballot == 0) continue;
    // One atomic per chunk: the first taker reserves the chunk's slots.
    const int leader = __ffs(ballot) - 1;
    unsigned long long first = 0;
    if (lane == leader) first = atomicAdd(count, static_cast<unsigned long long>(__popc(ballot)));
    first = __shfl_sync(kFullMask, first, leader);
    if (take) {
      const unsigned long long slot = first + __popc(ballot & ((1u << lane) - 1u));
      if (slot < static_cast<unsigned long long>(cap)) idx[slot] = i;
    }
  }
}

__global__ void accumulate_kernel(Values x, float* out, std::int32_t* non_finite) {
  Tile t;
  if (!load_warp_tile(x, t)) return;  // the whole warp
  bool bad = false;
#pragma unroll
  for (int j = 0; j < kChunks; ++j) {
    if (!t.valid[j]) continue;
    if (out != nullptr) out[t.start + j * kWarp + lane_id()] = t.v[j];
    bad |= !isfinite(t.v[j]);
  }
  if (__any_sync(kFullMask, bad) && lane_id() == 0) atomicOr(non_finite, 1);
}

__global__ void sample_line_starts_kernel(std::uint64_t key, std::int64_t lines,
                                          std::int64_t lines_total, std::int64_t line,
                                          std::int64_t* starts) {
  const std::int64_t j = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= lines) return;
  const std::int64_t begin = j * lines_total / lines;
  const std::int64_t end = (j + 1) * lines_total / lines;
  const CounterRng rng(key);
  starts[j] = line * (begin + rng.below(static_cast<std::uint32_t>(j),
                                        static_cast<std::uint32_t>(end - begin)));
}

}  // namespace

const char* sample_line_starts(std::uint64_t key, std::int64_t lines, std::int64_t lines_total,
                               std::int64_t line, std::int64_t* starts, void* stream) {
  if (lines == 0) return nullptr;
  const auto blocks = static_cast<unsigned>((lines + kThreads - 1) / kThreads);
  sample_line_starts_kernel<<<blocks, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      key, lines, lines_total, line, starts);
  return launched();
}

const char* select_at_least(Values x, const std::int32_t* thr, float* out, std::int64_t* idx,
                            std::int64_t cap, unsigned long long* count, void* stream) {
  if (x.n == 0) return nullptr;
  select_at_least_kernel<<<tile_blocks(x.n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      x, thr, out, idx, cap, count);
  return launched();
}

const char* accumulate(Values x, float* out, std::int32_t* non_finite, void* stream) {
  if (x.n == 0) return nullptr;
  accumulate_kernel<<<tile_blocks(x.n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      x, out, non_finite);
  return launched();
}

}  // namespace gradcomp::device::cuda
