// Timing of repeated calls for the benchmark harness: warm-up calls (which grow
// scratch buffers and fault pages in), then `repeats` timed calls whose median is
// reported, with the heap allocations the timed calls made.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <vector>

#include "bench/alloc_counter.h"

namespace gradcomp::bench {

struct Timing {
  double median_ms = 0;
  double min_ms = 0;
  double allocations_per_call = 0;  // in the timed calls only (steady state)
};

// Calls f(i) for i = 0 .. warmup + repeats - 1; times the last `repeats` calls.
template <class F>
Timing time_calls(int warmup, int repeats, F&& f) {
  using Clock = std::chrono::steady_clock;
  int call = 0;
  for (; call < warmup; ++call) f(call);
  std::vector<double> ms;
  ms.reserve(static_cast<std::size_t>(repeats));
  const std::uint64_t allocs_before = allocation_count();
  for (int r = 0; r < repeats; ++r, ++call) {
    const auto t0 = Clock::now();
    f(call);
    const auto t1 = Clock::now();
    ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  const std::uint64_t allocs = allocation_count() - allocs_before;
  std::sort(ms.begin(), ms.end());
  Timing t;
  const std::size_t m = ms.size();
  t.median_ms = m == 0 ? 0.0 : (m % 2 == 1 ? ms[m / 2] : 0.5 * (ms[m / 2 - 1] + ms[m / 2]));
  t.min_ms = m == 0 ? 0.0 : ms.front();
  t.allocations_per_call = repeats > 0 ? static_cast<double>(allocs) / repeats : 0.0;
  return t;
}

// Several kinds of call timed alternately, fs[0](i), fs[1](i), ... in each round
// (warm-up rounds first), so that all medians are taken under the same machine load.
// Allocation counts cover all of them.
inline std::vector<Timing> time_alternating(int warmup, int repeats,
                                            const std::vector<std::function<void(int)>>& fs) {
  using Clock = std::chrono::steady_clock;
  int call = 0;
  for (; call < warmup; ++call) {
    for (const auto& f : fs) f(call);
  }
  std::vector<std::vector<double>> ms(fs.size());
  for (auto& m : ms) m.reserve(static_cast<std::size_t>(repeats));
  const std::uint64_t allocs_before = allocation_count();
  for (int r = 0; r < repeats; ++r, ++call) {
    for (std::size_t k = 0; k < fs.size(); ++k) {
      const auto t0 = Clock::now();
      fs[k](call);
      const auto t1 = Clock::now();
      ms[k].push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    }
  }
  const double allocs =
      repeats > 0 ? static_cast<double>(allocation_count() - allocs_before) / repeats : 0.0;
  std::vector<Timing> out;
  for (auto& v : ms) {
    std::sort(v.begin(), v.end());
    Timing t;
    const std::size_t m = v.size();
    t.median_ms = m == 0 ? 0.0 : (m % 2 == 1 ? v[m / 2] : 0.5 * (v[m / 2 - 1] + v[m / 2]));
    t.min_ms = m == 0 ? 0.0 : v.front();
    t.allocations_per_call = allocs;
    out.push_back(t);
  }
  return out;
}

}  // namespace gradcomp::bench
