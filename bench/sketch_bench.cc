// Count sketch kernels with Google Benchmark (docs/algorithms/sketches.md): building a 5-row sketch
// of a 25,000,000-element gradient and recovering its heavy hitters (estimate every coordinate,
// then the exact top-k of |estimate|), fast kernels and scalar references.
//   build/<cols>            sketch_accumulate      (table zeroed outside the timing)
//   build_ref/<cols>        sketch_accumulate_ref
//   heavy/<cols>/<k>        sketch_top_k           (estimates + radix top-k)
//   estimate/<cols>         sketch_estimate_all
//   estimate_ref/<cols>     sketch_estimate_all_ref
// Single thread: run with OMP_NUM_THREADS=1 (the kernels use OpenMP for large inputs).
// cols = 125000 is the default table of the sketch codec and sketched-sgd (r*c = n/40).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "gradcomp/kernels/count_sketch.h"
#include "gradcomp/rng.h"

namespace gradcomp {
namespace {

constexpr std::size_t kN = 25'000'000;
constexpr std::uint32_t kRows = 5;

const std::vector<float>& input() {
  static const std::vector<float> x = [] {
    std::vector<float> v(kN);
    const CounterRng rng(7);
    for (std::size_t i = 0; i < kN; ++i) {
      const auto u = static_cast<std::uint32_t>(i);
      // Sum of two uniforms: a bell-ish gradient, plus a few large coordinates.
      v[i] = rng.uniform(2 * u) + rng.uniform(2 * u + 1) - 1.0f;
      if (rng.bits(u) % 10007 == 0) v[i] *= 100.0f;
    }
    return v;
  }();
  return x;
}

kernels::SketchHash hash_for(benchmark::State& state) {
  return kernels::SketchHash(42, kRows, static_cast<std::uint32_t>(state.range(0)));
}

void set_bytes(benchmark::State& state) {
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) *
                          static_cast<std::int64_t>(4 * kN));
}

template <bool kRef>
void BM_build(benchmark::State& state) {
  const auto& x = input();
  const auto h = hash_for(state);
  std::vector<float> table(h.cells());
  for (auto _ : state) {
    state.PauseTiming();
    std::fill(table.begin(), table.end(), 0.0f);
    state.ResumeTiming();
    if constexpr (kRef) {
      kernels::sketch_accumulate_ref(h, x, 1.0f, table);
    } else {
      kernels::sketch_accumulate(h, x, 1.0f, table);
    }
    benchmark::DoNotOptimize(table.data());
    benchmark::ClobberMemory();
  }
  set_bytes(state);
}

template <bool kRef>
void BM_estimate(benchmark::State& state) {
  const auto& x = input();
  const auto h = hash_for(state);
  std::vector<float> table(h.cells(), 0.0f), est(kN);
  kernels::sketch_accumulate(h, x, 1.0f, table);
  for (auto _ : state) {
    if constexpr (kRef) {
      kernels::sketch_estimate_all_ref(h, table, est);
    } else {
      kernels::sketch_estimate_all(h, table, est);
    }
    benchmark::DoNotOptimize(est.data());
    benchmark::ClobberMemory();
  }
  set_bytes(state);
}

void BM_heavy(benchmark::State& state) {
  const auto& x = input();
  const auto h = hash_for(state);
  const auto k = static_cast<std::size_t>(state.range(1));
  std::vector<float> table(h.cells(), 0.0f), est(kN);
  std::vector<std::uint32_t> idx(k);
  kernels::sketch_accumulate(h, x, 1.0f, table);
  std::size_t got = 0;
  for (auto _ : state) {
    got = kernels::sketch_top_k(h, table, est, k, idx, "bench");
    benchmark::DoNotOptimize(idx.data());
    benchmark::ClobberMemory();
  }
  if (got != std::min(k, kN)) state.SkipWithError("top-k returned the wrong count");
  set_bytes(state);
}

constexpr std::int64_t kCols[] = {125000, 25000};

void register_all() {
  for (std::int64_t c : kCols) {
    benchmark::RegisterBenchmark("build", BM_build<false>)->Arg(c)->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark("build_ref", BM_build<true>)
        ->Arg(c)
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark("estimate", BM_estimate<false>)
        ->Arg(c)
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark("estimate_ref", BM_estimate<true>)
        ->Arg(c)
        ->Unit(benchmark::kMillisecond);
    for (std::int64_t k : {std::int64_t{250000}, std::int64_t{25000}}) {
      benchmark::RegisterBenchmark("heavy", BM_heavy)->Args({c, k})->Unit(benchmark::kMillisecond);
    }
  }
}

}  // namespace
}  // namespace gradcomp

int main(int argc, char** argv) {
  gradcomp::register_all();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
