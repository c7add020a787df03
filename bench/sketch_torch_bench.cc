// Count-sketch build against LibTorch's CPU operators, side by side in one process
// (docs/measurements/codec-speed.md). The same sketch as kernels::sketch_accumulate: the
// multiply-add-shift hash of count_sketch.h computed with int64 tensor ops, then one
// index_add_ per row (a PyTorch count sketch computing its hashes on the fly); the count
// sketch of Sketched-SGD's and FetchSGD's published code (CSVec with precomputed hashes:
// per row, table[r] += bincount(buckets[r], weights = signs[r] * vec, minlength = c),
// buckets and signs computed outside the timing); the same with index_add_ in place of
// bincount (the fastest LibTorch formulation that can run: signs * vec is timed, since it
// depends on the input); and a lower bound that no implementation reaches: index_add_
// alone, with every row's columns and signed values computed outside the timing.
// The tables are compared with gradcomp's (they must be equal bit for bit: every cell
// receives its additions in ascending i in both).
//
//   OMP_NUM_THREADS=1 build/bin/gradcomp_sketch_torch_bench [repeats] [n] [rows] [cols]
//
// One thread (at::set_num_threads(1); OMP_NUM_THREADS=1 for gradcomp's OpenMP kernels).
// The three timings alternate call by call, so load on a shared machine hits them alike;
// each row is the median of the wall-clock and of the thread's CPU time (on a shared
// machine the CPU time is the steadier of the two).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "gradcomp/kernels/count_sketch.h"
#include "gradcomp/rng.h"

namespace {

using gradcomp::kernels::SketchHash;

double now_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// CPU time of this thread: with one thread everywhere the work runs here, and unlike the
// wall clock it does not count the time other processes take the core away.
double cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Columns and signs of row j for i = 0..n-1 with int64 tensor ops (wrap-around multiply).
void torch_hash(const SketchHash::Row& r, std::int64_t cols, const at::Tensor& i, at::Tensor* col,
                at::Tensor* sign) {
  const auto mask32 = static_cast<std::int64_t>(0xFFFFFFFFu);
  // (a_lo * i + b) mod 2^64, its high 32 bits (>> is arithmetic on int64: mask after).
  const at::Tensor t = i * static_cast<std::int64_t>(r.a_lo) + static_cast<std::int64_t>(r.b);
  const at::Tensor h =
      (at::bitwise_and(t.__rshift__(32), mask32) + i * static_cast<std::int64_t>(r.a_hi))
          .bitwise_and_(mask32);
  *col = (h * cols).__rshift__(32);
  *sign = 1.0f - 2.0f * h.bitwise_and(1).to(at::kFloat);
}

}  // namespace

int main(int argc, char** argv) {
  const int repeats = argc > 1 ? std::atoi(argv[1]) : 5;
  const std::size_t n = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 25'000'000;
  const auto rows = static_cast<std::uint32_t>(argc > 3 ? std::atoi(argv[3]) : 5);
  const auto cols = static_cast<std::uint32_t>(argc > 4 ? std::atoi(argv[4]) : 125'000);
  at::set_num_threads(1);

  std::vector<float> x(n);
  const gradcomp::CounterRng rng(7);
  for (std::size_t i = 0; i < n; ++i) {  // the input of gradcomp_sketch_bench
    const auto u = static_cast<std::uint32_t>(i);
    x[i] = rng.uniform(2 * u) + rng.uniform(2 * u + 1) - 1.0f;
    if (rng.bits(u) % 10007 == 0) x[i] *= 100.0f;
  }
  const SketchHash h(42, rows, cols);
  const at::Tensor xt = at::from_blob(x.data(), {static_cast<std::int64_t>(n)}, at::kFloat);
  const at::Tensor idx = at::arange(static_cast<std::int64_t>(n), at::kLong);

  // index_add_ alone: columns and signed values precomputed per row (outside the timing).
  // CSVec: columns and signs precomputed (its precomputeHashes), signs * vec timed.
  std::vector<at::Tensor> pre_col(rows), pre_sign(rows), pre_val(rows);
  for (std::uint32_t j = 0; j < rows; ++j) {
    torch_hash(h.row(j), cols, idx, &pre_col[j], &pre_sign[j]);
    pre_val[j] = xt * pre_sign[j];
  }

  std::vector<float> table(h.cells());
  at::Tensor full = at::zeros({rows, static_cast<std::int64_t>(cols)}, at::kFloat);
  at::Tensor scatter_only = at::zeros_like(full);
  at::Tensor csvec = at::zeros_like(full);
  at::Tensor signed_add = at::zeros_like(full);
  constexpr int kImpls = 5;
  // Wall and thread-CPU milliseconds of each implementation, call by call.
  std::vector<double> wall[kImpls], cpu[kImpls];
  const auto timed = [&](int which, int rep, const auto& f) {
    const double w0 = now_ms(), c0 = cpu_ms();
    f();
    if (rep > 0) {
      wall[which].push_back(now_ms() - w0);
      cpu[which].push_back(cpu_ms() - c0);
    }
  };
  for (int rep = 0; rep < repeats + 1; ++rep) {  // the first round is a warm-up
    std::fill(table.begin(), table.end(), 0.0f);
    timed(0, rep, [&] { gradcomp::kernels::sketch_accumulate(h, x, 1.0f, table); });
    full.zero_();
    timed(1, rep, [&] {
      for (std::uint32_t j = 0; j < rows; ++j) {
        at::Tensor col, sign;
        torch_hash(h.row(j), cols, idx, &col, &sign);
        full[j].index_add_(0, col, xt * sign);
      }
    });
    scatter_only.zero_();
    timed(2, rep, [&] {
      for (std::uint32_t j = 0; j < rows; ++j) {
        scatter_only[j].index_add_(0, pre_col[j], pre_val[j]);
      }
    });
    csvec.zero_();
    timed(3, rep, [&] {
      for (std::uint32_t j = 0; j < rows; ++j) {
        csvec[j] += at::bincount(pre_col[j], pre_sign[j] * xt, static_cast<std::int64_t>(cols));
      }
    });
    signed_add.zero_();
    timed(4, rep, [&] {
      for (std::uint32_t j = 0; j < rows; ++j) {
        signed_add[j].index_add_(0, pre_col[j], pre_sign[j] * xt);
      }
    });
  }
  const bool same_full = std::memcmp(full.data_ptr<float>(), table.data(), 4 * table.size()) == 0;
  const bool same_scatter =
      std::memcmp(scatter_only.data_ptr<float>(), table.data(), 4 * table.size()) == 0;
  const bool same_csvec = std::memcmp(csvec.data_ptr<float>(), table.data(), 4 * table.size()) == 0;
  const bool same_signed =
      std::memcmp(signed_add.data_ptr<float>(), table.data(), 4 * table.size()) == 0;
  const char* names[kImpls] = {
      "gradcomp sketch_accumulate", "LibTorch: int64 hash ops + index_add_",
      "LibTorch: index_add_ only (hashes precomputed)",
      "LibTorch: CSVec (bincount, hashes precomputed)", "LibTorch: index_add_, hashes precomputed"};
  const char* same[kImpls] = {
      "-", same_full ? "identical" : "DIFFERS", same_scatter ? "identical" : "DIFFERS",
      same_csvec ? "identical" : "DIFFERS", same_signed ? "identical" : "DIFFERS"};
  std::printf("count-sketch build: n = %zu, %u x %u table, 1 thread, median of %d (alternating)\n",
              n, rows, cols, repeats);
  std::printf("%-46s %9s %9s %9s %9s  %s\n", "implementation", "wall ms", "vs gc", "cpu ms",
              "vs gc", "table");
  for (int k = 0; k < kImpls; ++k) {
    const double w = median(wall[k]), c = median(cpu[k]);
    std::printf("%-46s %9.1f %8.2fx %9.1f %8.2fx  %s\n", names[k], w, w / median(wall[0]), c,
                c / median(cpu[0]), same[k]);
  }
  return same_full && same_scatter && same_csvec && same_signed ? 0 : 1;
}
