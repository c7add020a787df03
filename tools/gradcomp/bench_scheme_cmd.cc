// gradcomp bench scheme --spec S [--spec S ...] [--model M | --sizes SHAPES] [--steps N]
// [--json]: what a reducer scheme (PowerSGD, Sketched-SGD, FetchSGD; any --compressor
// spec) costs the CPU per step on a model's buckets, measured by running it in a world of
// one (gradcomp/dist/reducer_timing.h). gradcomp-torch only (the reducers run over c10d);
// `gradcomp advise` runs it for the schemes it costs.
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "bench/harness.h"
#include "commands.h"
#include "gradcomp/dist/reducer_timing.h"
#include "gradcomp/dist/schemes.h"
#include "gradcomp/json.h"
#include "gradcomp/layout.h"
#include "gradcomp/method.h"
#include "model_flags.h"

namespace gradcomp::cli {

namespace {

struct SchemeBenchFlags {
  std::vector<std::string> specs;
  std::string model = "mlp";
  std::string sizes;
  double dense_share = 0.01;
  std::int64_t min_elements = 1024;
  double bucket_mb = 0.0;
  int steps = 5;
  int warmup = 2;
  std::uint64_t seed = 1;
  bool json = false;
};

// The scheme's canonical spec ("sketched-sgd" -> "sketched-sgd:rows=5,..."), or "" for a
// codec spec (its rows are keyed by what was given).
std::string canonical_of(const std::string& spec) {
  const Method method = Method::parse(spec);
  return method.is_scheme() ? method.canonical() : std::string();
}

void run_scheme_bench(const SchemeBenchFlags& f) {
  const advise::ModelSizes model = model_from_flags(f.model, f.sizes);
  LayoutOptions layout{
      .bucket_mb = f.bucket_mb, .min_elements = f.min_elements, .dense_share = f.dense_share};
  const std::vector<BucketShape> shapes = bucket_shapes(plan_buckets(model.params, layout));
  for (const std::string& spec : f.specs) (void)Method::parse(spec);  // all, first
  bench::set_threads(1);
  if (!f.json) {
    std::printf("%s (%zu buckets), one thread, median of %d steps after %d\n", model.name.c_str(),
                shapes.size(), f.steps, f.warmup);
    std::printf("%-40s %12s %10s %10s\n", "spec", "compressed", "encode ms", "decode ms");
  }
  for (const std::string& spec : f.specs) {
    const std::string canonical = canonical_of(spec);
    const dist::ReducerTiming t = dist::time_reducer(spec, shapes, f.warmup, f.steps, f.seed);
    if (f.json) {
      std::cout << "{\"kind\":\"scheme\",\"spec\":" << json_quote(spec)
                << ",\"canonical\":" << json_quote(canonical)
                << ",\"model\":" << json_quote(model.name) << ",\"n\":" << t.compressed_elements
                << ",\"buckets\":" << shapes.size() << ",\"threads\":1,\"steps\":" << t.steps
                << ",\"encode_ms\":" << t.encode_s * 1e3 << ",\"decode_ms\":" << t.decode_s * 1e3
                << "}\n";
    } else {
      std::printf("%-40s %12zu %10.3f %10.3f\n", spec.c_str(), t.compressed_elements,
                  t.encode_s * 1e3, t.decode_s * 1e3);
    }
  }
  std::cout << std::flush;
}

}  // namespace

void add_bench_scheme_command(CLI::App& bench) {
  auto f = std::make_shared<SchemeBenchFlags>();
  CLI::App* s = bench.add_subcommand("scheme", kBenchSchemeSummary);
  s->add_option("--spec", f->specs, "Scheme (or any --compressor) spec to time; repeatable")
      ->required();
  s->add_option("--model", f->model, "Built-in model: " + advise::known_models())
      ->capture_default_str();
  s->add_option("--sizes", f->sizes,
                "Tensor shapes instead of --model: '1000,784x1536,...' or a file of them");
  s->add_option("--dense-share", f->dense_share, "As gradcomp train --dense-share")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  s->add_option("--min-elements", f->min_elements, "As gradcomp train --min-elements")
      ->capture_default_str()
      ->check(non_negative_number());
  s->add_option("--bucket-mb", f->bucket_mb, "As gradcomp train --bucket-mb")
      ->capture_default_str()
      ->check(non_negative_number());
  s->add_option("--steps", f->steps, "Timed steps (median)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  s->add_option("--warmup", f->warmup, "Untimed steps before them")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000));
  s->add_option("--seed", f->seed, "Gradient data seed")
      ->capture_default_str()
      ->check(unsigned_integer());
  s->add_flag("--json", f->json, "One JSON object per spec (advise --codec-speeds reads it)");
  s->callback([f] { run_scheme_bench(*f); });
}

}  // namespace gradcomp::cli
