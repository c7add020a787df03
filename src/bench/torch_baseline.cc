// The LibTorch reference for top-k selection: values and indices of the k largest
// |g|, as torch::topk returns them (int64 indices, values sorted descending). The
// timed call includes at::abs, which a LibTorch top-k sparsifier also pays.
#include "bench/torch_baseline.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "bench/timing.h"
#include "gradcomp/cpu.h"
#include "gradcomp/error.h"

namespace gradcomp::bench {

void set_torch_threads(int threads) {
  if (threads < 1 || threads > kMaxThreads) {
    throw InvalidArgument("threads: " + std::to_string(threads) + " is not in [1, " +
                          std::to_string(kMaxThreads) + "]");
  }
  at::set_num_threads(threads);
}

Baseline torch_topk_baseline(double ratio) {
  if (!(ratio > 0.0 && ratio <= 1.0)) {
    throw InvalidArgument("torch topk baseline: ratio " + std::to_string(ratio) +
                          " out of range (0, 1]");
  }
  char name[64];
  std::snprintf(name, sizeof name, "torch::topk(|g|):ratio=%g", ratio);
  Baseline b;
  b.name = name;
  for (const char* select : {"sampled", "exact"}) {
    char spec[64];
    std::snprintf(spec, sizeof spec, "topk:ratio=%g,select=%s", ratio, select);
    b.compare_with.emplace_back(spec);
  }
  b.run = [ratio](std::span<const float> input, const BenchOptions& options) {
    const std::size_t n = input.size();
    const auto k = static_cast<std::int64_t>(
        std::min<double>(static_cast<double>(n), std::ceil(ratio * static_cast<double>(n))));
    // A view of the harness's buffer: no copy. from_blob wants a non-const pointer;
    // the tensor is only read.
    const at::Tensor g =
        at::from_blob(const_cast<float*>(input.data()), {static_cast<std::int64_t>(n)}, at::kFloat);

    // Once, untimed: the k values are the largest magnitudes, in order and finite.
    {
      const auto [values, indices] = at::topk(at::abs(g), k);
      const float* v = values.data_ptr<float>();
      const std::int64_t* idx = indices.data_ptr<std::int64_t>();
      for (std::int64_t i = 0; i < k; ++i) {
        if (!std::isfinite(v[i]) || (i > 0 && v[i] > v[i - 1]) || idx[i] < 0 ||
            idx[i] >= static_cast<std::int64_t>(n) ||
            std::fabs(input[static_cast<std::size_t>(idx[i])]) != v[i]) {
          throw Error("torch topk baseline: unexpected output at position " + std::to_string(i));
        }
      }
    }

    const Timing t = time_calls(options.warmup, options.repeats, [&](int) {
      auto result = at::topk(at::abs(g), k);
      (void)result;
    });
    BenchRow row;
    row.n = n;
    // What a top-k message of k (u32 index, f32 value) pairs would hold, for the ratio.
    row.message_bytes = static_cast<std::size_t>(k) * 8;
    row.encode_ms = t.median_ms;
    row.encode_allocs_per_call = t.allocations_per_call;
    return row;
  };
  return b;
}

}  // namespace gradcomp::bench
