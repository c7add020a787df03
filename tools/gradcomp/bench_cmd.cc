// gradcomp bench codec [--spec S ...] [--size N] [--threads T] [--repeats R] [--json]
// [--torch]: encode/decode throughput of codec specs against memcpy (and, with --torch,
// LibTorch's top-k: the torch-free gradcomp hands that to gradcomp-torch).
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "bench/harness.h"
#include "commands.h"
#include "gradcomp/error.h"
#include "gradcomp/registry.h"

namespace gradcomp::cli {

namespace {

struct BenchFlags {
  bench::BenchOptions options;
  bool json = false;
  bool torch = false;
  bool no_torch = false;  // the default since the torch row moved to --torch; kept for scripts
};

}  // namespace

void add_bench_command(CLI::App& app, TorchBaselines torch) {
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks");
  bench->require_subcommand(1);

  auto f = std::make_shared<BenchFlags>();
  CLI::App* codec = bench->add_subcommand(
      "codec",
      "Encode/decode throughput (GB/s of fp32 input), message size and ratio per spec, with a "
      "memcpy row measured in the same run (--torch: and LibTorch's topk of |g|)");
  codec->add_option("--spec", f->options.specs,
                    "Spec to measure (repeatable; default: every codec's default spec and "
                    "top-k at ratio 0.001, sampled and exact)");
  codec->add_option("--size", f->options.size, "Elements of the gradient")
      ->capture_default_str()
      ->check(integer_at_least(1));
  codec->add_option("--threads", f->options.threads, "Threads (OpenMP and LibTorch)")
      ->capture_default_str()
      ->check(integer_in(1, kMaxThreads));
  codec->add_option("--repeats", f->options.repeats, "Timed calls per measurement (median)")
      ->capture_default_str()
      ->check(integer_at_least(1));
  codec->add_option("--warmup", f->options.warmup, "Untimed calls before them")
      ->capture_default_str()
      ->check(integer_at_least(0));
  codec->add_option("--seed", f->options.seed, "Input data seed")
      ->capture_default_str()
      ->check(unsigned_integer());
  codec->add_flag("--json", f->json, "One JSON object per row (and per comparison, note)");
  codec->add_flag("--torch", f->torch,
                  "Add LibTorch's topk(abs(g), k) at ratio 0.001 (loads LibTorch: ~1 s more)");
  codec->add_flag("--no-torch", f->no_torch, "No LibTorch row (the default)");
  codec->callback([f, torch] {
    bench::set_threads(f->options.threads);
    std::vector<bench::Baseline> baselines;
    if (f->torch && !f->no_torch) {
      if (!torch) throw Error("bench codec --torch: this binary has no LibTorch");
      baselines = torch(f->options.threads);
    }
    const auto report = bench::run_codec_bench(builtin_registry(), f->options, baselines);
    std::cout << (f->json ? bench::format_json_lines(report) : bench::format_table(report))
              << std::flush;
  });
}

}  // namespace gradcomp::cli
