// ATOMO's per-step cost: the thin SVD of each gradient matrix (randomized range finder
// with its residual check, against Eigen's full BDCSVD), and the whole codec (SVD,
// probabilities, sampling, message) on the default MLP's gradient shapes.
//
//   gradcomp_atomo_bench --benchmark_filter=Svd   (ms per decomposition)
//
// Inputs: rank-limited matrices M = A * B with A (rows x rank), B (rank x cols) of
// Gaussian-ish entries, as a fully connected layer's gradient at batch `rank` is a sum of
// `rank` outer products; rank = min(rows, cols) gives a full-rank matrix.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "detail/thin_svd.h"
#include "gradcomp/registry.h"
#include "gradcomp/rng.h"

namespace gradcomp {
namespace {

std::vector<float> gaussianish(std::size_t n, std::uint64_t seed) {
  const CounterRng rng(seed);
  std::vector<float> x(n);
  for (std::size_t i = 0; i < n; ++i) {
    const auto c = static_cast<std::uint32_t>(4 * i);
    x[i] = rng.uniform(c) + rng.uniform(c + 1) + rng.uniform(c + 2) + rng.uniform(c + 3) - 2.0f;
  }
  return x;
}

// rows x cols, row-major, rank <= rank.
std::vector<float> low_rank(std::size_t rows, std::size_t cols, std::size_t rank,
                            std::uint64_t seed) {
  const auto a = gaussianish(rows * rank, seed);
  const auto b = gaussianish(rank * cols, seed + 1);
  std::vector<float> m(rows * cols, 0.0f);
  for (std::size_t i = 0; i < rows; ++i) {
    for (std::size_t l = 0; l < rank; ++l) {
      const float ail = a[i * rank + l] * 1e-3f;
      for (std::size_t j = 0; j < cols; ++j) m[i * cols + j] += ail * b[l * cols + j];
    }
  }
  return m;
}

// Args: rows, cols, rank, method (0 auto, 1 randomized, 2 full).
void BM_Svd(benchmark::State& state) {
  const auto rows = static_cast<std::size_t>(state.range(0));
  const auto cols = static_cast<std::size_t>(state.range(1));
  const auto rank = static_cast<std::size_t>(state.range(2));
  const auto method = static_cast<detail::SvdMethod>(state.range(3));
  const auto m = low_rank(rows, cols, rank, 17);
  detail::ThinSvd svd;
  detail::SvdOptions opt;
  opt.method = method;
  if (method == detail::SvdMethod::kRandomized) opt.max_basis_fraction = 1.0;
  detail::thin_svd(m, rows, cols, svd, opt);  // warm-up and check
  for (auto _ : state) {
    detail::thin_svd(m, rows, cols, svd, opt);
    benchmark::DoNotOptimize(svd.sigma.data());
  }
  state.counters["basis"] = static_cast<double>(svd.basis);
  state.counters["triplets"] = static_cast<double>(svd.rank);
  state.counters["residual"] = svd.residual;
  state.counters["full"] = svd.method == detail::SvdMethod::kFull ? 1 : 0;
}

void svd_args(benchmark::internal::Benchmark* b) {
  for (int method : {0, 1, 2}) {
    b->Args({1536, 1536, 64, method});
    b->Args({1536, 784, 64, method});
    b->Args({10, 1536, 10, method});
  }
  for (int method : {0, 2}) b->Args({1536, 1536, 1536, method});
  b->Args({1536, 784, 784, 0});
  b->Args({1536, 1536, 128, 0});
  b->Unit(benchmark::kMillisecond);
}
BENCHMARK(BM_Svd)->Apply(svd_args);

// One training step's encode of the default MLP (784-1536-1536-10) weight gradients,
// each of rank 64 (batch 64), with an atomo spec. Arg: 0 spectral, 1 entry.
void BM_MlpStep(benchmark::State& state) {
  struct Layer {
    std::size_t rows, cols;
    std::vector<float> g;
  };
  std::vector<Layer> layers;
  for (auto [r, c] : {std::pair<std::size_t, std::size_t>{1536, 784}, {1536, 1536}, {10, 1536}}) {
    layers.push_back({r, c, low_rank(r, c, std::min<std::size_t>(64, std::min(r, c)), r + c)});
  }
  const char* spec = state.range(0) == 0 ? "atomo:budget=3" : "atomo:atoms=entry,budget=3";
  auto codec = builtin_registry().make_codec(spec);
  std::vector<std::vector<std::byte>> msgs;
  std::size_t dense = 0;
  for (const Layer& l : layers) {
    msgs.emplace_back(codec->max_encoded_bytes(l.g.size()));
    dense += 4 * l.g.size();
  }
  std::uint64_t step = 0;
  std::size_t sent = 0;
  for (auto _ : state) {
    sent = 0;
    for (std::size_t b = 0; b < layers.size(); ++b) {
      const StepContext ctx{.seed = 1,
                            .step = step,
                            .bucket = static_cast<std::uint32_t>(b),
                            .rows = static_cast<std::uint32_t>(layers[b].rows)};
      sent += codec->encode(layers[b].g, ctx, msgs[b]);
    }
    ++step;
  }
  state.counters["bytes"] = static_cast<double>(sent);
  state.counters["ratio"] = static_cast<double>(dense) / static_cast<double>(sent);
}
BENCHMARK(BM_MlpStep)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace gradcomp

BENCHMARK_MAIN();
