// PowerSGD's per-step compute on the MLP 784-1536-1536-10 (3.58 M parameters), the
// model PyTorch's PowerSGD DDP hook is compared on (rank 2: ~65 ms of CPU work per
// step there).
//   kernel/<op>/<rows>x<cols>/r   one kernel on one weight matrix
//   step_kernels/r                every kernel of one step on the three weight
//                                 matrices (the compute PowerSGD adds to a step)
//   reducer_step/r                the whole reducer at world size 1 (Gloo group of one:
//                                 no bytes move), biases in the dense bucket
// bytes_per_second counts 4 bytes per gradient element per iteration.
#include <benchmark/benchmark.h>

#include <memory>
#include <string>
#include <vector>

#include "bench/harness.h"
#include "gradcomp/dist/communicator.h"
#include "gradcomp/dist/reducers.h"
#include "gradcomp/kernels/low_rank.h"

namespace gradcomp {
namespace {

using kernels::LowRankShape;

// The MLP's weights (rows = out features, cols = in features).
const std::vector<std::pair<std::size_t, std::size_t>> kMatrices = {
    {1536, 784}, {1536, 1536}, {10, 1536}};

struct MatrixBuffers {
  LowRankShape s;
  std::vector<float> g, e, p, q, out;
  MatrixBuffers(std::size_t rows, std::size_t cols, std::size_t r)
      : s{rows, cols, r},
        g(bench::bench_input(rows * cols, 1)),
        e(bench::bench_input(rows * cols, 2)),
        p(rows * r),
        q(bench::bench_input(cols * r, 3)),
        out(rows * cols) {
    for (float& v : e) v *= 0.1f;
  }
  std::size_t elements() const { return s.m_size(); }
};

void set_bytes(benchmark::State& state, std::size_t elements) {
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) *
                          static_cast<std::int64_t>(4 * elements));
}

void bm_project_accumulate(benchmark::State& state, std::size_t rows, std::size_t cols) {
  MatrixBuffers b(rows, cols, static_cast<std::size_t>(state.range(0)));
  for (auto _ : state) {
    kernels::lr_project_accumulate(b.s, b.g, b.e, b.q, b.p);
    benchmark::DoNotOptimize(b.p.data());
    // Keep e bounded: subtract g back (one more pass, not timed).
    state.PauseTiming();
    for (std::size_t i = 0; i < b.e.size(); ++i) b.e[i] -= b.g[i];
    state.ResumeTiming();
  }
  set_bytes(state, b.elements());
}

void bm_back_project(benchmark::State& state, std::size_t rows, std::size_t cols) {
  MatrixBuffers b(rows, cols, static_cast<std::size_t>(state.range(0)));
  kernels::lr_project(b.s, b.g, b.q, b.p);
  kernels::lr_orthonormalize(b.p, rows, b.s.rank);
  for (auto _ : state) {
    kernels::lr_back_project(b.s, b.g, b.p, b.q);
    benchmark::DoNotOptimize(b.q.data());
  }
  set_bytes(state, b.elements());
}

void bm_reconstruct_residual(benchmark::State& state, std::size_t rows, std::size_t cols) {
  MatrixBuffers b(rows, cols, static_cast<std::size_t>(state.range(0)));
  kernels::lr_project(b.s, b.g, b.q, b.p);
  kernels::lr_orthonormalize(b.p, rows, b.s.rank);
  kernels::lr_back_project(b.s, b.g, b.p, b.q);
  for (auto _ : state) {
    // e <- e - P Q^T each time: e drifts linearly, harmless for timing.
    kernels::lr_reconstruct_residual(b.s, b.p, b.q, b.e, b.out);
    benchmark::DoNotOptimize(b.out.data());
  }
  set_bytes(state, b.elements());
}

void bm_orthonormalize(benchmark::State& state, std::size_t rows, std::size_t cols) {
  MatrixBuffers b(rows, cols, static_cast<std::size_t>(state.range(0)));
  kernels::lr_project(b.s, b.g, b.q, b.p);
  const std::vector<float> p0 = b.p;
  for (auto _ : state) {
    b.p = p0;
    kernels::lr_orthonormalize(b.p, rows, b.s.rank);
    benchmark::DoNotOptimize(b.p.data());
  }
}

// One step's kernels on every weight matrix, in the order the reducer runs them.
void bm_step_kernels(benchmark::State& state) {
  const auto r = static_cast<std::size_t>(state.range(0));
  std::vector<std::unique_ptr<MatrixBuffers>> ms;
  std::size_t elements = 0;
  for (auto [rows, cols] : kMatrices) {
    ms.push_back(std::make_unique<MatrixBuffers>(rows, cols, r));
    elements += rows * cols;
  }
  for (auto _ : state) {
    for (auto& b : ms) kernels::lr_project_accumulate(b->s, b->g, b->e, b->q, b->p);
    for (auto& b : ms) {
      kernels::lr_orthonormalize(b->p, b->s.rows, r);
      kernels::lr_back_project(b->s, b->e, b->p, b->q);
    }
    for (auto& b : ms) kernels::lr_reconstruct_residual(b->s, b->p, b->q, b->e, b->g);
    benchmark::ClobberMemory();
  }
  set_bytes(state, elements);
}

// The reducer over a one-rank Gloo group: three weight buckets and the bias bucket.
void bm_reducer_step(benchmark::State& state) {
  const auto r = state.range(0);
  dist::RendezvousConfig cfg;
  cfg.world_size = 1;
  dist::Communicator comm(dist::Store::in_process(), cfg);
  std::vector<BucketShape> shapes;
  std::size_t elements = 0;
  for (std::size_t b = 0; b < kMatrices.size(); ++b) {
    const auto [rows, cols] = kMatrices[b];
    shapes.push_back({static_cast<std::uint32_t>(b), rows * cols, true, rows});
    elements += rows * cols;
  }
  shapes.push_back({3, 1536 + 1536 + 10, false, 0});
  elements += shapes.back().numel;
  const auto reducer = dist::make_reducer("powersgd:rank=" + std::to_string(r),
                                          dist::ReducerKind::kAuto, comm, shapes);
  std::vector<std::vector<float>> grads;
  std::vector<BucketRef> refs;
  for (const BucketShape& s : shapes) grads.push_back(bench::bench_input(s.numel, 10 + s.id));
  for (std::size_t b = 0; b < shapes.size(); ++b) {
    refs.push_back({shapes[b].id, grads[b], shapes[b].compressible});
  }
  StepContext ctx;
  ctx.seed = 1;
  for (auto _ : state) {
    reducer->reduce(refs, ctx);
    ++ctx.step;
  }
  const ReduceStats st = reducer->take_stats();
  const double steps = static_cast<double>(st.steps);
  state.counters["encode_ms"] = 1e3 * st.encode_seconds / steps;
  state.counters["decode_ms"] = 1e3 * st.decode_seconds / steps;
  state.counters["comm_ms"] = 1e3 * st.comm_seconds / steps;
  set_bytes(state, elements);
}

void register_all() {
  for (auto [rows, cols] : kMatrices) {
    const std::string shape = std::to_string(rows) + "x" + std::to_string(cols);
    auto reg = [&](const char* op, void (*f)(benchmark::State&, std::size_t, std::size_t)) {
      benchmark::RegisterBenchmark(
          ("kernel/" + std::string(op) + "/" + shape).c_str(),
          [f, rows = rows, cols = cols](benchmark::State& st) { f(st, rows, cols); })
          ->Arg(2)
          ->Unit(benchmark::kMillisecond);
    };
    reg("project_accumulate", bm_project_accumulate);
    reg("back_project", bm_back_project);
    reg("reconstruct_residual", bm_reconstruct_residual);
    reg("orthonormalize", bm_orthonormalize);
  }
  benchmark::RegisterBenchmark("step_kernels", bm_step_kernels)
      ->Arg(1)
      ->Arg(2)
      ->Arg(4)
      ->Arg(8)
      ->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("reducer_step", bm_reducer_step)
      ->Arg(1)
      ->Arg(2)
      ->Arg(4)
      ->Arg(8)
      ->Unit(benchmark::kMillisecond);
}

}  // namespace
}  // namespace gradcomp

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  gradcomp::register_all();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
