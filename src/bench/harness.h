// The codec benchmark harness behind `gradcomp bench codec`: encode and decode
// throughput of registry specs on one large deterministic gradient, next to a memcpy
// of the same bytes measured in the same run (the physical reference) and optional
// external baselines (LibTorch's top-k, linked only into the CLI).
//
// Per spec: build the Memory and the codec from the registry, check once that
// decode(encode(x)) runs and is finite, warm up, then time `repeats` calls of
//   encode        Memory::compress (error feedback included when the spec has it),
//   codec encode  Codec::encode alone,
//   decode        Codec::decode_add into an fp32 buffer,
//   checksum      message_crc() over the message codec encode wrote (header + payload:
//                 the CRC-32C that encode and decode each include),
//   no-crc encode Codec::encode without the checksum (benchmark-only switch),
// the last three alternating call for call so that they see the same machine load, and
// report medians. The CRC's share of encode is given two ways: checksum time / codec
// encode time, and (codec encode - no-crc encode) / codec encode, which is the true
// cost where encode computes the checksum in its own pass (none: crc32c_copy).
// GB/s is always 4n bytes of fp32 gradient per second.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gradcomp/cpu.h"
#include "gradcomp/registry.h"

namespace gradcomp::bench {

struct BenchOptions {
  std::size_t size = 25'000'000;   // elements (ResNet-50 has about 25.6M parameters)
  int repeats = 5;                 // timed calls; the median is reported
  int warmup = 1;                  // untimed calls before them
  int threads = 1;                 // recorded in the rows; set_threads() applies it
  std::uint64_t seed = 1;          // input data and StepContext seed
  std::vector<std::string> specs;  // empty: default_bench_specs()
};

inline constexpr double kNotMeasured = std::numeric_limits<double>::quiet_NaN();

struct BenchRow {
  std::string kind;    // "reference" (memcpy), "codec" or "baseline"
  std::string name;    // the spec as given, "memcpy", or the baseline's name
  std::string memory;  // codec rows: the Memory's canonical spec, e.g. "ef(topk:...)"
  std::size_t n = 0;
  int threads = 1;
  std::size_t message_bytes = 0;  // codec rows: the message of x (one encode)
  double ratio = kNotMeasured;    // 4n / message_bytes
  double encode_ms = kNotMeasured;
  double encode_gbps = kNotMeasured;
  double encode_vs_memcpy_pct = kNotMeasured;  // memcpy time / encode time, in %
  double codec_encode_ms = kNotMeasured;       // Codec::encode without the memory
  double codec_encode_gbps = kNotMeasured;
  double crc_ms = kNotMeasured;                // message_crc() of the codec's message
  double crc_share_pct = kNotMeasured;         // crc_ms / codec_encode_ms, in %
  double no_crc_encode_ms = kNotMeasured;      // Codec::encode without the checksum
  double crc_encode_share_pct = kNotMeasured;  // (codec - no-crc) / codec encode, in %
  double decode_ms = kNotMeasured;
  double decode_gbps = kNotMeasured;
  double encode_allocs_per_call = kNotMeasured;  // steady state, all threads
  double decode_allocs_per_call = kNotMeasured;
};

// An external implementation timed on the same input, e.g. at::topk of |g|.
// `compare_with` lists codec specs whose speedup against it the report states.
struct Baseline {
  std::string name;
  std::vector<std::string> compare_with;
  std::function<BenchRow(std::span<const float> input, const BenchOptions& options)> run;
};

// "spec is X times faster than baseline" lines, for rows that are both present.
struct Comparison {
  std::string spec;
  std::string baseline;
  double baseline_ms = kNotMeasured;
  double encode_speedup = kNotMeasured;        // baseline time / Memory::compress time
  double codec_encode_speedup = kNotMeasured;  // baseline time / Codec::encode time
};

struct BenchReport {
  std::size_t n = 0;
  int threads = 1;
  int repeats = 0;
  std::vector<BenchRow> rows;  // memcpy first, then the specs, then the baselines
  std::vector<Comparison> comparisons;
  std::vector<std::string> notes;  // skipped default specs, missing comparisons
};

// Gaussian-ish values (centred Irwin-Hall(4), 1 in 64 scaled by 8 for a heavy tail),
// a pure function of (n, seed) whatever the thread count.
std::vector<float> bench_input(std::size_t n, std::uint64_t seed);

// Every registered codec's default spec, then top-k at ratio 0.001 with sampled and
// exact selection (the comparison against LibTorch's top-k).
std::vector<std::string> default_bench_specs(const CodecRegistry& registry);

// Applies a thread count to OpenMP (when gradcomp is built with it); returns whether
// OpenMP is present. InvalidArgument outside [1, kMaxThreads] (gradcomp/cpu.h).
bool set_threads(int threads);

BenchRow bench_memcpy(std::span<const float> input, const BenchOptions& options);
BenchRow bench_spec(const CodecRegistry& registry, std::string_view spec,
                    std::span<const float> input, const BenchOptions& options);

// Runs everything. Specs given in options.specs must all build (else InvalidArgument
// before anything is timed); default specs whose codec is not registered are skipped
// with a note.
BenchReport run_codec_bench(const CodecRegistry& registry, const BenchOptions& options,
                            const std::vector<Baseline>& baselines = {});

// An aligned text table with the comparisons and notes below it.
std::string format_table(const BenchReport& report);
// One JSON object per line: every row ({"kind": ...}), then every comparison
// ({"kind": "comparison", ...}).
std::string format_json_lines(const BenchReport& report);

}  // namespace gradcomp::bench
