#include "bench/harness.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#ifdef GRADCOMP_BENCH_OPENMP
#include <omp.h>
#endif

#include "bench/timing.h"
#include "core/detail/checksum_switch.h"
#include "gradcomp/cpu.h"
#include "gradcomp/crc32c.h"
#include "gradcomp/error.h"
#include "gradcomp/json.h"
#include "gradcomp/rng.h"
#include "gradcomp/wire.h"

namespace gradcomp::bench {

namespace {

double gbps(std::size_t n, double ms) {
  return ms > 0 ? 4.0 * static_cast<double>(n) / (ms * 1e6) : kNotMeasured;
}

// Fills every field that follows from the timings and the memcpy reference.
void finish_row(BenchRow& row, double memcpy_ms) {
  row.encode_gbps = gbps(row.n, row.encode_ms);
  row.codec_encode_gbps = gbps(row.n, row.codec_encode_ms);
  row.decode_gbps = gbps(row.n, row.decode_ms);
  if (row.codec_encode_ms > 0 && std::isfinite(row.crc_ms)) {
    row.crc_share_pct = 100.0 * row.crc_ms / row.codec_encode_ms;
  }
  if (row.codec_encode_ms > 0 && std::isfinite(row.no_crc_encode_ms)) {
    row.crc_encode_share_pct =
        100.0 * (row.codec_encode_ms - row.no_crc_encode_ms) / row.codec_encode_ms;
  }
  if (row.message_bytes > 0) {
    row.ratio = 4.0 * static_cast<double>(row.n) / static_cast<double>(row.message_bytes);
  }
  if (std::isfinite(memcpy_ms) && row.encode_ms > 0) {
    row.encode_vs_memcpy_pct = 100.0 * memcpy_ms / row.encode_ms;
  }
}

StepContext step_context(const BenchOptions& options, int call) {
  return {.seed = options.seed, .step = static_cast<std::uint64_t>(call), .rank = 0, .bucket = 0};
}

const BenchRow* find_row(const std::vector<BenchRow>& rows, std::string_view kind,
                         std::string_view name) {
  for (const auto& r : rows) {
    if (r.kind == kind && r.name == name) return &r;
  }
  return nullptr;
}

}  // namespace

std::vector<float> bench_input(std::size_t n, std::uint64_t seed) {
  const CounterRng rng(detail::splitmix64(seed ^ 0xB5E1C0DEull));
  std::vector<float> g(n);
  float* out = g.data();
  const auto count = static_cast<std::int64_t>(n);
#ifdef GRADCOMP_BENCH_OPENMP
#pragma omp parallel for if (count > (1 << 16))
#endif
  for (std::int64_t i = 0; i < count; ++i) {
    // Counter 4i..4i+3 (mod 2^32: the pattern repeats past 2^30 elements, harmlessly).
    const auto k = static_cast<std::uint32_t>(4 * static_cast<std::uint64_t>(i));
    float v = rng.uniform(k) + rng.uniform(k + 1) + rng.uniform(k + 2) + rng.uniform(k + 3) - 2.0f;
    if ((rng.bits(k + 3) & 63) == 0) v *= 8.0f;
    out[i] = v;
  }
  return g;
}

std::vector<std::string> default_bench_specs(const CodecRegistry& registry) {
  std::vector<std::string> specs;
  for (const CodecInfo* info : registry.all()) specs.push_back(info->name);
  for (const char* s : {"topk:ratio=0.001,select=sampled", "topk:ratio=0.001,select=exact"}) {
    if (std::find(specs.begin(), specs.end(), s) == specs.end()) specs.emplace_back(s);
  }
  return specs;
}

bool set_threads(int threads) {
  if (threads < 1 || threads > kMaxThreads) {
    throw InvalidArgument("threads: " + std::to_string(threads) + " is not in [1, " +
                          std::to_string(kMaxThreads) + "]");
  }
#ifdef GRADCOMP_BENCH_OPENMP
  omp_set_num_threads(threads);
  return true;
#else
  return false;
#endif
}

BenchRow bench_memcpy(std::span<const float> input, const BenchOptions& options) {
  BenchRow row;
  row.kind = "reference";
  row.name = "memcpy";
  row.n = input.size();
  row.threads = options.threads;
  std::vector<float> dst(input.size());
  const std::size_t bytes = input.size_bytes();
  const Timing t = time_calls(options.warmup, options.repeats, [&](int) {
    if (bytes != 0) std::memcpy(dst.data(), input.data(), bytes);
  });
  if (!std::equal(dst.begin(), dst.end(), input.begin(),
                  [](float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; })) {
    throw Error("bench memcpy: the copy differs from the input");
  }
  row.message_bytes = bytes;
  row.encode_ms = t.median_ms;
  row.encode_allocs_per_call = t.allocations_per_call;
  finish_row(row, t.median_ms);
  return row;
}

BenchRow bench_spec(const CodecRegistry& registry, std::string_view spec,
                    std::span<const float> input, const BenchOptions& options) {
  const std::size_t n = input.size();
  std::unique_ptr<Memory> memory = registry.make_memory(spec, n);
  const Codec& codec = memory->codec();
  BenchRow row;
  row.kind = "codec";
  row.name = std::string(spec);
  row.memory = memory->spec();
  row.n = n;
  row.threads = options.threads;

  // Buffers live outside the timed calls; the warm-up faults their pages in.
  std::vector<std::byte> msg(memory->max_encoded_bytes());
  std::vector<float> out(n, 0.0f);

  // Once, untimed: the message of x decodes to finite values.
  row.message_bytes = codec.encode(input, step_context(options, 0), msg);
  codec.decode_add(std::span<const std::byte>(msg.data(), row.message_bytes), out);
  for (std::size_t i = 0; i < n; ++i) {
    if (!std::isfinite(out[i])) {
      throw Error("bench " + std::string(spec) + ": decode(encode(x)) is not finite at index " +
                  std::to_string(i) + " (" + std::to_string(out[i]) + ")");
    }
  }

  const Timing enc = time_calls(options.warmup, options.repeats, [&](int call) {
    memory->compress(input, step_context(options, call), msg);
  });
  // Codec::encode, the checksum it includes (message_crc of its message) and
  // Codec::encode without the checksum (detail::ScopedChecksumOff: the header's CRC
  // field stays 0, no fused checksum), alternating call for call so that the three
  // medians are taken under the same load.
  std::size_t bytes = 0;
  volatile std::uint32_t crc_sink = 0;  // keeps the checksum calls
  std::vector<std::byte> msg_plain(msg.size());
  const std::vector<Timing> t = time_alternating(
      options.warmup, options.repeats,
      {[&](int call) { bytes = codec.encode(input, step_context(options, call), msg); },
       [&](int) { crc_sink = message_crc(std::span<const std::byte>(msg.data(), bytes)); },
       [&](int call) {
         const detail::ScopedChecksumOff off;
         (void)codec.encode(input, step_context(options, call), msg_plain);
       }});
  const Timing& raw = t[0];
  // Decode the last message; out accumulates (decode_add), as a reducer's sum does.
  const std::span<const std::byte> last(msg.data(), bytes);
  const Timing dec =
      time_calls(options.warmup, options.repeats, [&](int) { codec.decode_add(last, out, 1.0f); });

  row.encode_ms = enc.median_ms;
  row.codec_encode_ms = raw.median_ms;
  row.crc_ms = t[1].median_ms;
  row.no_crc_encode_ms = t[2].median_ms;
  row.decode_ms = dec.median_ms;
  row.encode_allocs_per_call = std::max(enc.allocations_per_call, raw.allocations_per_call);
  (void)crc_sink;
  row.decode_allocs_per_call = dec.allocations_per_call;
  return row;
}

BenchReport run_codec_bench(const CodecRegistry& registry, const BenchOptions& options,
                            const std::vector<Baseline>& baselines) {
  if (options.size == 0) throw InvalidArgument("bench: size must be at least 1 element");
  if (options.size > kMaxElements) {
    throw InvalidArgument("bench: size " + std::to_string(options.size) +
                          " > the wire format's limit " + std::to_string(kMaxElements));
  }
  if (options.repeats < 1) {
    throw InvalidArgument("bench: repeats " + std::to_string(options.repeats) + " < 1");
  }
  if (options.warmup < 0) {
    throw InvalidArgument("bench: warmup " + std::to_string(options.warmup) + " < 0");
  }

  BenchReport report;
  report.n = options.size;
  report.threads = options.threads;
  report.repeats = options.repeats;

  // Check every spec before the (long) timing starts: a typo fails at once.
  const bool defaults = options.specs.empty();
  std::vector<std::string> specs;
  for (const auto& spec : defaults ? default_bench_specs(registry) : options.specs) {
    try {
      registry.make_memory(spec, 0);
      specs.push_back(spec);
    } catch (const InvalidArgument& e) {
      if (!defaults) throw InvalidArgument("bench: " + std::string(e.what()));
      report.notes.push_back("skipped '" + spec + "': " + e.what());
    }
  }

  const std::vector<float> input = bench_input(options.size, options.seed);
  report.rows.push_back(bench_memcpy(input, options));
  const double memcpy_ms = report.rows.front().encode_ms;
  for (const auto& spec : specs) report.rows.push_back(bench_spec(registry, spec, input, options));
  for (const auto& b : baselines) {
    BenchRow row = b.run(input, options);
    row.kind = "baseline";
    row.name = b.name;
    row.threads = options.threads;
    report.rows.push_back(std::move(row));
  }
  for (auto& row : report.rows) finish_row(row, memcpy_ms);

  for (const auto& b : baselines) {
    const BenchRow* base = find_row(report.rows, "baseline", b.name);
    for (const auto& spec : b.compare_with) {
      // Rows are matched by canonical spec, however the user spelled theirs.
      std::string canonical;
      try {
        canonical = registry.make_memory(spec, 0)->spec();
      } catch (const InvalidArgument&) {  // the reason is in the "skipped" note
        report.notes.push_back("no comparison of '" + spec + "' with " + b.name +
                               ": its codec is not in this build");
        continue;
      }
      const auto row = std::find_if(report.rows.begin(), report.rows.end(), [&](const BenchRow& r) {
        return r.kind == "codec" && r.memory == canonical;
      });
      if (row == report.rows.end()) continue;  // not among the specs asked for
      Comparison c;
      c.spec = row->name;
      c.baseline = b.name;
      c.baseline_ms = base->encode_ms;
      c.encode_speedup = base->encode_ms / row->encode_ms;
      c.codec_encode_speedup = base->encode_ms / row->codec_encode_ms;
      report.comparisons.push_back(c);
    }
  }
  return report;
}

namespace {

std::string fmt(const char* format, double v) {
  if (!std::isfinite(v)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

std::string fmt_allocs(double v) {
  if (!std::isfinite(v)) return "-";
  // Whole numbers when the count per call is whole, else one decimal.
  return fmt(v == std::floor(v) ? "%.0f" : "%.1f", v);
}

}  // namespace

std::string format_table(const BenchReport& report) {
  const std::vector<std::string> header = {
      "spec",      "message B",    "ratio",      "encode ms", "enc GB/s",
      "% memcpy",  "codec ms",     "codec GB/s", "crc ms",    "crc %",
      "no-crc ms", "crc % in enc", "decode ms",  "dec GB/s",  "allocs enc/dec"};
  std::vector<std::vector<std::string>> cells;
  for (const auto& r : report.rows) {
    std::string name = r.name;
    if (r.kind == "codec" && r.memory != r.name) name += "  [" + r.memory + "]";
    cells.push_back(
        {name, r.message_bytes > 0 ? std::to_string(r.message_bytes) : "-", fmt("%.2f", r.ratio),
         fmt("%.2f", r.encode_ms), fmt("%.2f", r.encode_gbps),
         fmt("%.0f%%", r.encode_vs_memcpy_pct), fmt("%.2f", r.codec_encode_ms),
         fmt("%.2f", r.codec_encode_gbps), fmt("%.3f", r.crc_ms), fmt("%.1f%%", r.crc_share_pct),
         fmt("%.3f", r.no_crc_encode_ms), fmt("%.1f%%", r.crc_encode_share_pct),
         fmt("%.2f", r.decode_ms), fmt("%.2f", r.decode_gbps),
         fmt_allocs(r.encode_allocs_per_call) + " / " + fmt_allocs(r.decode_allocs_per_call)});
  }
  std::vector<std::size_t> width(header.size());
  for (std::size_t c = 0; c < header.size(); ++c) {
    width[c] = header[c].size();
    for (const auto& row : cells) width[c] = std::max(width[c], row[c].size());
  }
  auto line = [&](const std::vector<std::string>& row) {
    std::string s;
    for (std::size_t c = 0; c < row.size(); ++c) {
      const std::size_t pad = width[c] - row[c].size();
      if (c == 0) {
        s += row[c] + std::string(pad, ' ');  // names left-aligned, numbers right
      } else {
        s += "  " + std::string(pad, ' ') + row[c];
      }
    }
    while (!s.empty() && s.back() == ' ') s.pop_back();
    return s + "\n";
  };

  std::string out = "gradcomp bench codec: n = " + std::to_string(report.n) + " floats (" +
                    fmt("%.1f", 4.0 * static_cast<double>(report.n) / 1e6) + " MB), " +
                    std::to_string(report.threads) + " thread(s), median of " +
                    std::to_string(report.repeats) + " calls; GB/s = fp32 input bytes / time\n";
  out += "ISA: " + isa_summary() + "\n";
  out += "CRC-32C: " + std::string(crc32c_implementation()) +
         "; crc % = message_crc() time / codec encode time; crc % in enc = (codec encode - "
         "the same without the checksum) / codec encode (differs where the checksum is fused "
         "into encode: none)\n";
  out += line(header);
  std::size_t total = 0;
  for (std::size_t w : width) total += w + 2;
  out += std::string(total - 2, '-') + "\n";
  for (const auto& row : cells) out += line(row);
  for (const auto& c : report.comparisons) {
    out += c.spec + ": " + fmt("%.1f", c.codec_encode_speedup) + "x faster than " + c.baseline +
           " (" + fmt("%.2f", c.baseline_ms) + " ms) as a codec encode, " +
           fmt("%.1f", c.encode_speedup) + "x with its memory\n";
  }
  for (const auto& note : report.notes) out += "note: " + note + "\n";
  return out;
}

std::string format_json_lines(const BenchReport& report) {
  std::string out;
  for (const auto& r : report.rows) {
    JsonObject o;
    o.add("kind", r.kind).add("spec", r.name);
    if (r.kind == "codec") o.add("memory", r.memory);
    o.add("n", static_cast<std::uint64_t>(r.n))
        .add("threads", r.threads)
        .add("repeats", report.repeats)
        .add("message_bytes", static_cast<std::uint64_t>(r.message_bytes))
        .add("ratio", r.ratio)
        .add("encode_ms", r.encode_ms)
        .add("encode_gbps", r.encode_gbps)
        .add("encode_vs_memcpy_pct", r.encode_vs_memcpy_pct)
        .add("codec_encode_ms", r.codec_encode_ms)
        .add("codec_encode_gbps", r.codec_encode_gbps)
        .add("crc_ms", r.crc_ms)
        .add("crc_share_pct", r.crc_share_pct)
        .add("no_crc_encode_ms", r.no_crc_encode_ms)
        .add("crc_encode_share_pct", r.crc_encode_share_pct)
        .add("decode_ms", r.decode_ms)
        .add("decode_gbps", r.decode_gbps)
        .add("encode_allocs_per_call", r.encode_allocs_per_call)
        .add("decode_allocs_per_call", r.decode_allocs_per_call);
    out += o.str() + "\n";
  }
  for (const auto& c : report.comparisons) {
    JsonObject o;
    o.add("kind", "comparison")
        .add("spec", c.spec)
        .add("baseline", c.baseline)
        .add("baseline_ms", c.baseline_ms)
        .add("codec_encode_speedup", c.codec_encode_speedup)
        .add("encode_speedup", c.encode_speedup);
    out += o.str() + "\n";
  }
  for (const auto& note : report.notes)
    out += JsonObject().add("kind", "note").add("text", note).str() + "\n";
  return out;
}

}  // namespace gradcomp::bench
