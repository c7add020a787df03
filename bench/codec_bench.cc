// Codec throughput with Google Benchmark: one registration per codec spec (every
// registered codec's defaults and examples, taken from the registry), sizes 2^10 to
// 2^25 elements, plus memcpy of the same bytes as the physical reference.
//   encode/<spec>/<n>    Codec::encode
//   compress/<spec>/<n>  Memory::compress (only for specs whose memory keeps state)
//   decode/<spec>/<n>    Codec::decode_add
//   checksum/<spec>/<n>  the CRC32C over that codec's message (wire.h), which encode
//                        and decode_add each include: its share of the codec's cost is
//                        checksum time / encode time
// bytes_per_second counts 4n bytes of fp32 gradient per iteration; counters give the
// compression ratio, the message size and heap allocations per call (steady state).
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bench/alloc_counter.h"
#include "bench/harness.h"
#include "gradcomp/error.h"
#include "gradcomp/registry.h"
#include "gradcomp/wire.h"

namespace gradcomp {
namespace {

constexpr std::uint64_t kSeed = 1;

// One input per size, generated once (it takes longer than a benchmark at 2^25).
const std::vector<float>& input(std::size_t n) {
  static std::map<std::size_t, std::vector<float>> cache;
  auto it = cache.find(n);
  if (it == cache.end()) it = cache.emplace(n, bench::bench_input(n, kSeed)).first;
  return it->second;
}

std::vector<std::string> specs() {
  std::vector<std::string> out;
  for (const CodecInfo* info : builtin_registry().all()) {
    out.push_back(info->name);
    for (const auto& e : info->examples) out.push_back(e);
  }
  return out;
}

// Heap allocations per call in steady state: f is called once to warm up (scratch
// growth), then counted over a few calls outside the timed loop, where Google
// Benchmark's own bookkeeping would be counted too.
template <class F>
double steady_allocations(F&& f) {
  constexpr int kCalls = 4;
  f();
  const std::uint64_t before = bench::allocation_count();
  for (int i = 0; i < kCalls; ++i) f();
  return static_cast<double>(bench::allocation_count() - before) / kCalls;
}

void set_common(benchmark::State& state, std::size_t n, std::size_t message_bytes,
                double allocs_per_call) {
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) *
                          static_cast<std::int64_t>(4 * n));
  state.counters["ratio"] = 4.0 * static_cast<double>(n) / static_cast<double>(message_bytes);
  state.counters["encoded_bytes"] = static_cast<double>(message_bytes);
  state.counters["allocs_per_call"] = allocs_per_call;
}

// Checks once, before timing, that decode(encode(x)) runs and is finite.
bool verified(benchmark::State& state, const Codec& codec, const std::vector<float>& x,
              std::vector<std::byte>& msg, std::size_t& bytes) {
  bytes = codec.encode(x, {.seed = kSeed}, msg);
  std::vector<float> out(x.size(), 0.0f);
  codec.decode_add({msg.data(), bytes}, out);
  for (float v : out) {
    if (!std::isfinite(v)) {
      state.SkipWithError("decode(encode(x)) is not finite");
      return false;
    }
  }
  return true;
}

// Times `encode(x, ctx, msg) -> bytes` (a codec's encode, or a memory's compress,
// error feedback included) after verifying the codec's output once. A memory's state
// can diverge on the same gradient fed step after step (error feedback over a sketch
// whose heavy-hitter decode is not a contraction grows its residual until the table
// overflows fp32, issue 18): the codec then refuses its input, and the row reports
// that, with the step, instead of aborting the whole run.
template <class Encode>
void time_encode(benchmark::State& state, const Codec& codec, std::size_t max_bytes,
                 Encode encode) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const auto& x = input(n);
  std::vector<std::byte> msg(max_bytes);
  std::size_t bytes = 0;
  if (!verified(state, codec, x, msg, bytes)) return;
  std::uint64_t step = 0;
  try {
    const double allocs =
        steady_allocations([&] { encode(x, StepContext{.seed = kSeed, .step = step++}, msg); });
    for (auto _ : state) {
      bytes = encode(x, StepContext{.seed = kSeed, .step = step++}, msg);
      benchmark::DoNotOptimize(msg.data());
      benchmark::ClobberMemory();
    }
    set_common(state, n, bytes, allocs);
  } catch (const Error& e) {
    state.SkipWithError(
        ("step " + std::to_string(step - 1) + " of the same gradient: " + e.what()).c_str());
  }
}

void bm_encode(benchmark::State& state, const std::string& spec) {
  const auto codec = builtin_registry().make_codec(spec);
  const auto n = static_cast<std::size_t>(state.range(0));
  time_encode(state, *codec, codec->max_encoded_bytes(n),
              [&](std::span<const float> x, const StepContext& ctx, std::span<std::byte> msg) {
                return codec->encode(x, ctx, msg);
              });
}

void bm_compress(benchmark::State& state, const std::string& spec) {
  auto memory = builtin_registry().make_memory(spec, static_cast<std::size_t>(state.range(0)));
  time_encode(state, memory->codec(), memory->max_encoded_bytes(),
              [&](std::span<const float> x, const StepContext& ctx, std::span<std::byte> msg) {
                return memory->compress(x, ctx, msg);
              });
}

void bm_decode(benchmark::State& state, const std::string& spec) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const auto codec = builtin_registry().make_codec(spec);
  const auto& x = input(n);
  std::vector<std::byte> msg(codec->max_encoded_bytes(n));
  std::size_t bytes = 0;
  if (!verified(state, *codec, x, msg, bytes)) return;
  const std::span<const std::byte> m(msg.data(), bytes);
  std::vector<float> out(n, 0.0f);
  const double allocs = steady_allocations([&] { codec->decode_add(m, out); });
  for (auto _ : state) {
    codec->decode_add(m, out);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  set_common(state, n, bytes, allocs);
}

void bm_checksum(benchmark::State& state, const std::string& spec) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const auto codec = builtin_registry().make_codec(spec);
  const auto& x = input(n);
  std::vector<std::byte> msg(codec->max_encoded_bytes(n));
  std::size_t bytes = 0;
  if (!verified(state, *codec, x, msg, bytes)) return;
  const std::span<const std::byte> m(msg.data(), bytes);
  const double allocs = steady_allocations([&] { benchmark::DoNotOptimize(message_crc(m)); });
  for (auto _ : state) {
    benchmark::DoNotOptimize(message_crc(m));
  }
  set_common(state, n, bytes, allocs);
}

void bm_memcpy(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const auto& x = input(n);
  std::vector<float> dst(n);
  std::memcpy(dst.data(), x.data(), 4 * n);
  if (std::memcmp(dst.data(), x.data(), 4 * n) != 0) {
    state.SkipWithError("memcpy copy differs");
    return;
  }
  const double allocs = steady_allocations([&] { std::memcpy(dst.data(), x.data(), 4 * n); });
  for (auto _ : state) {
    std::memcpy(dst.data(), x.data(), 4 * n);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  set_common(state, n, 4 * n, allocs);
}

void apply_sizes(benchmark::internal::Benchmark* b) {
  b->RangeMultiplier(32)->Range(1 << 10, 1 << 25)->Unit(benchmark::kMicrosecond);
}

void register_all() {
  apply_sizes(benchmark::RegisterBenchmark("memcpy", bm_memcpy));
  for (const std::string& spec : specs()) {
    apply_sizes(benchmark::RegisterBenchmark(("encode/" + spec).c_str(), bm_encode, spec));
    // A memory that keeps state (error feedback) costs a pass of its own.
    if (!builtin_registry().make_memory(spec, 1)->state().empty()) {
      apply_sizes(benchmark::RegisterBenchmark(("compress/" + spec).c_str(), bm_compress, spec));
    }
    apply_sizes(benchmark::RegisterBenchmark(("decode/" + spec).c_str(), bm_decode, spec));
    apply_sizes(benchmark::RegisterBenchmark(("checksum/" + spec).c_str(), bm_checksum, spec));
  }
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
