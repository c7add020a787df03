// Timing of repeated calls for the benchmark harness: warm-up calls (which grow
// scratch buffers and fault pages in), then `repeats` timed calls whose median is
// reported, with the heap allocations the timed calls made.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <utility>
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

// Two kinds of call timed alternately, f(i) then g(i) in each round (warm-up rounds
// first), so that both medians are taken under the same machine load. Allocation
// counts cover both.
template <class F, class G>
std::pair<Timing, Timing> time_call_pairs(int warmup, int repeats, F&& f, G&& g) {
  using Clock = std::chrono::steady_clock;
  int call = 0;
  for (; call < warmup; ++call) {
    f(call);
    g(call);
  }
  std::vector<double> ms_f, ms_g;
  ms_f.reserve(static_cast<std::size_t>(repeats));
  ms_g.reserve(static_cast<std::size_t>(repeats));
  const std::uint64_t allocs_before = allocation_count();
  for (int r = 0; r < repeats; ++r, ++call) {
    const auto t0 = Clock::now();
    f(call);
    const auto t1 = Clock::now();
    g(call);
    const auto t2 = Clock::now();
    ms_f.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    ms_g.push_back(std::chrono::duration<double, std::milli>(t2 - t1).count());
  }
  const double allocs = repeats > 0
                            ? static_cast<double>(allocation_count() - allocs_before) / repeats
                            : 0.0;
  auto summarise = [&](std::vector<double>& ms) {
    std::sort(ms.begin(), ms.end());
    Timing t;
    const std::size_t m = ms.size();
    t.median_ms = m == 0 ? 0.0 : (m % 2 == 1 ? ms[m / 2] : 0.5 * (ms[m / 2 - 1] + ms[m / 2]));
    t.min_ms = m == 0 ? 0.0 : ms.front();
    t.allocations_per_call = allocs;
    return t;
  };
  return {summarise(ms_f), summarise(ms_g)};
}

}  // namespace gradcomp::bench
