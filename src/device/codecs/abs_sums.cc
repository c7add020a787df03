// The scales' sums of |x| on the device, the same doubles as the CPU codecs' (src/core/
// detail/reductions.h, abs_sample.h). The CPU sums in a fixed order: blocks of kSumBlock
// values; in a block, lane l (0..15) adds the values at offsets = l (mod 16) one after
// another in double; combine16 adds the lanes; the blocks are added one after another.
// Rounding makes that order part of the result, and ATen's sum reduces in a tree (a
// different double on CUDA), so the lanes here are a cumsum in double along a dimension
// that is not the innermost: ATen's scan along an outer dimension is a sequential loop
// per column on both the CPU and CUDA (the innermost and 1-D scans are parallel: avoided).
// Zero padding is exact (a sum of |x| is never -0, and s + 0 = s).
//
// The sampled sum (65,536 values) goes to the host instead: its lanes are 4,096 values
// long, and a sequential scan of that length on the GPU is ~1 ms of memory latency,
// whereas the copy is 512 KB (as doubles, in the one transfer that brings the adaptive
// 2-bit's exact sums too); the host adds them as abs_sample.cc does.
#include <cmath>

#include "codecs.h"
#include "detail/abs_sample.h"
#include "detail/reductions.h"

namespace gradcomp::device {

namespace {

constexpr std::int64_t kBlock = static_cast<std::int64_t>(detail::kSumBlock);

std::int64_t round_up(std::int64_t n, std::int64_t m) { return (n + m - 1) / m * m; }

// combine16 over the last dimension (16 lanes): ((l[k] + l[k+8]) + (l[k+4] + l[k+12]))
// for k < 4, then (s0 + s2) + (s1 + s3); elementwise double adds round as on the CPU.
at::Tensor combine16(const at::Tensor& lanes) {
  const at::Tensor q = lanes.unflatten(-1, {2, 2, 4});  // l[8a + 4b + k] = q[a][b][k]
  const at::Tensor a = q.select(-3, 0);
  const at::Tensor b = q.select(-3, 1);
  const at::Tensor s = (a.select(-2, 0) + b.select(-2, 0)) + (a.select(-2, 1) + b.select(-2, 1));
  return (s.select(-1, 0) + s.select(-1, 2)) + (s.select(-1, 1) + s.select(-1, 3));
}

// Sequential sums along dim 0 of a [rows, cols] double tensor (the last row of a scan
// along an outer dimension; a second column keeps the scan off the 1-D path).
at::Tensor sequential_sum_rows(const at::Tensor& t) {
  at::Tensor x = t;
  if (x.size(1) == 1) x = at::constant_pad_nd(x, {0, 1});
  return x.cumsum(0).select(0, x.size(0) - 1).narrow(0, 0, t.size(1));
}

}  // namespace

at::Tensor segment_abs_sums(const at::Tensor& x, std::int64_t segment) {
  const std::int64_t n = x.numel();
  const std::int64_t segments = (n + segment - 1) / segment;
  // Each segment is summed from its own start, as abs_sum(x + begin, len) is: padded to
  // whole lanes (<= one block) or to whole blocks.
  const std::int64_t padded = segment <= kBlock ? round_up(segment, 16) : round_up(segment, kBlock);
  const std::int64_t blocks = padded / std::min(padded, kBlock);
  const std::int64_t lane_len = std::min(padded, kBlock) / 16;
  at::Tensor a = x.to(at::kDouble).abs_();
  if (segments * segment != n) a = at::constant_pad_nd(a, {0, segments * segment - n});
  a = a.view({segments, segment});
  if (padded != segment) a = at::constant_pad_nd(a, {0, padded - segment});
  const at::Tensor lanes = a.view({segments, blocks, lane_len, 16})
                               .cumsum(2)
                               .select(2, lane_len - 1);  // [segments, blocks, 16]
  const at::Tensor per_block = combine16(lanes);          // [segments, blocks]
  if (blocks == 1) return per_block.select(1, 0);
  return sequential_sum_rows(per_block.t().contiguous());
}

at::Tensor abs_sample_index(std::int64_t n) {
  const auto un = static_cast<std::size_t>(n);
  at::Tensor index = at::empty({static_cast<std::int64_t>(detail::kAbsSampleCount)},
                               at::TensorOptions().dtype(at::kLong));
  std::int64_t* out = index.data_ptr<std::int64_t>();
  for (std::size_t j = 0; j < detail::kAbsStrata; ++j) {
    const std::size_t b = detail::abs_sample_start(un, j);
    for (std::size_t l = 0; l < detail::kAbsRun; ++l) {
      *out++ = static_cast<std::int64_t>(b + l);
    }
  }
  return index;
}

double sampled_abs_sum(const float* sample) {
  double lanes[16] = {};
  for (std::size_t i = 0; i < detail::kAbsSampleCount; ++i) {
    lanes[i % 16] += static_cast<double>(std::fabs(sample[i]));
  }
  return detail::combine16(lanes);
}

}  // namespace gradcomp::device
