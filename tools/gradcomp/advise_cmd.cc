// gradcomp advise: which compressor makes a step faster on a model, network and worker
// count, by the cost model of src/advise (docs/cost-model.md).
//   advise [--model NAME | --sizes SHAPES|FILE] [--workers W] [--bandwidth 1gbit]
//          [--latency 5ms] [--topology allreduce|ps-sync --servers S] [--compute-ms X]
//          [--cores C] [--overlap F] [--codec-speeds FILE] [--methods "SPEC ..."]
//          [--json] [--svg FILE] [--sweep]
// Speeds not given in a file are measured on the spot: a short `bench codec` of each codec
// spec at --bench-size elements, and `bench scheme` of each reducer scheme on the model.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "bench/harness.h"
#include "commands.h"
#include "gradcomp/advise/messages.h"
#include "gradcomp/advise/models.h"
#include "gradcomp/advise/report.h"
#include "gradcomp/advise/step_model.h"
#include "gradcomp/advise/sweep.h"
#include "gradcomp/error.h"
#include "gradcomp/registry.h"
#include "model_flags.h"
#include "torch_binary.h"

namespace gradcomp::cli {

namespace {

using namespace gradcomp::advise;

// The README's tables' methods (accuracy and network lab), plus the allreduce-able
// sparsifier and the 16-bit baseline.
constexpr const char* kDefaultMethods =
    "none fp16 efm(topk:ratio=0.01) ef(topk:ratio=0.01) dgc:density=0.001 powersgd "
    "powersgd:rank=2 qsgd 2bit randomk sketched-sgd fetchsgd";

struct AdviseFlags {
  std::string model = "mlp";
  std::string sizes;
  int workers = 4;
  std::string bandwidth = "1gbit";
  std::string latency = "0";
  std::string topology = "allreduce";
  std::string algorithm = "ring";
  int servers = 1;
  std::optional<double> compute_ms;
  double backward_share = 2.0 / 3.0;
  double overlap = 0.0;
  int cores = 0;
  double overhead_ms = kGlooCollectiveOverhead * 1e3;
  double efficiency = kLinkEfficiency;
  double hop_delay_ms = kOversubscribedHopDelay * 1e3;
  double exchange_cpu_ns_per_byte = kOverlappedExchangeCpuPerByte * 1e9;
  std::string codec_speeds;
  std::string device_speeds;
  double pcie_gbs = 25.0;
  double device_memory_gbs = DeviceModel{}.memory_bandwidth * 1e-9;
  double device_bucket_ms = kDeviceBucketOverhead * 1e3;
  std::size_t bench_size = std::size_t{1} << 20;
  std::string methods = kDefaultMethods;
  double dense_share = 0.01;
  std::optional<double> min_group_mb;
  std::int64_t min_elements = 1024;
  double bucket_mb = 0.0;
  bool json = false;
  bool sweep = false;
  std::string svg;
};

double parse_with_units(const std::string& flag, const std::string& text,
                        const std::vector<std::pair<std::string, double>>& units,
                        const std::string& example) {
  for (const auto& [unit, mult] : units) {
    if (text.size() > unit.size() &&
        text.compare(text.size() - unit.size(), unit.size(), unit) == 0) {
      const std::string num = text.substr(0, text.size() - unit.size());
      std::size_t used = 0;
      double v = NAN;
      try {
        v = std::stod(num, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used == num.size() && std::isfinite(v) && v >= 0) return v * mult;
      break;
    }
  }
  if (text == "0") return 0.0;
  throw InvalidArgument(flag + ": '" + text + "' is not a " + example);
}

// Bytes per second from "1gbit", "100mbit", "10kbit", "125MB" (bytes).
double parse_bandwidth(const std::string& text) {
  const double v = parse_with_units(
      "--bandwidth", text,
      {{"gbit", 1e9 / 8}, {"mbit", 1e6 / 8}, {"kbit", 1e3 / 8}, {"GB", 1e9}, {"MB", 1e6}},
      "rate (e.g. 1gbit, 100mbit, 25gbit)");
  if (!(v > 0)) throw InvalidArgument("--bandwidth: must be > 0, got '" + text + "'");
  return v;
}

// Seconds from "5ms", "100us", "0.2s", "0".
double parse_latency(const std::string& text) {
  return parse_with_units("--latency", text, {{"ms", 1e-3}, {"us", 1e-6}, {"s", 1.0}},
                          "time (e.g. 5ms, 100us, 0)");
}

// Per-step compute of one worker with a core of its own, when not given.
double default_compute_ms(const std::string& model) {
  // Network lab: the MLP's compute floor, 61.3 ms with 4 workers on 2 cores.
  if (model == "mlp") return 61.3 / 2.0;
  // Network lab: the transformer LM's compute floor (AdamW, batch 32), 340 ms with 4
  // workers on 2 cores (docs/measurements/outer-loop/lab-lm-100mbit).
  if (model == "transformer") return 340.0 / 2.0;
  // Planning figure: ResNet-50 forward + backward at batch 32 on a V100-class GPU.
  if (model == "resnet50") return 100.0;
  throw InvalidArgument("--compute-ms is needed for " + model +
                        " (no measured default; time one worker's step: gradcomp train "
                        "--workers 1)");
}

std::vector<std::string> split_methods(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string s; in >> s;) out.push_back(s);
  if (out.empty()) throw InvalidArgument("--methods: no spec given");
  return out;
}

// A double as text that reads back to the same value.
std::string exact(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// Times the schemes the table lacks with `gradcomp bench scheme` in gradcomp-torch (the
// reducers run over c10d, which this binary does not link), on the model's buckets. If
// that cannot run, says so in one line and leaves them to their approximations.
void time_schemes(const AdviseFlags& f, const std::vector<MethodPlan>& plans, SpeedTable& speeds) {
  std::vector<std::string> args = {"bench", "scheme", "--json", "--steps", "3", "--warmup", "2"};
  if (f.sizes.empty()) {
    args.insert(args.end(), {"--model", f.model});
  } else {
    args.insert(args.end(), {"--sizes", f.sizes});
  }
  args.insert(args.end(), {"--dense-share", exact(f.dense_share), "--min-elements",
                           std::to_string(f.min_elements), "--bucket-mb", exact(f.bucket_mb)});
  bool any = false;
  for (const MethodPlan& m : plans) {
    if (!m.traits.scheme || speeds.find(m.spec) || speeds.find(m.canonical)) continue;
    args.insert(args.end(), {"--spec", m.spec});
    any = true;
  }
  if (!any) return;
  SpeedTable timed;
  try {
    timed = parse_bench_json(run_torch_binary(args));
  } catch (const Error& e) {
    std::cerr << "gradcomp advise: could not time the schemes (" << e.what()
              << "); costing them by approximation (see the speed source)\n";
    return;
  }
  for (const MethodPlan& m : plans) {
    if (!m.traits.scheme) continue;
    if (const CodecSpeed* t = timed.find(m.spec)) {
      CodecSpeed sp = *t;
      sp.source = "bench scheme";
      speeds.set(m.spec, sp);
    }
  }
}

// Runs `bench codec` on the spot for every codec spec the table lacks, and for the count
// sketch codec standing in for a sketch scheme that has no timing of its own.
void bench_codecs(const std::vector<MethodPlan>& plans, std::size_t size, SpeedTable& speeds) {
  std::vector<float> input;
  bench::BenchOptions bo;
  bo.size = size;
  bo.repeats = 3;
  bo.warmup = 1;
  for (const MethodPlan& m : plans) {
    const bool codec = !m.traits.dense && !m.traits.scheme;
    if (!codec && (speeds.find(m.spec) || speeds.find(m.canonical))) continue;
    const std::string& spec = codec ? m.spec : m.speed_spec;
    if (spec.empty() || speeds.find(spec) || (codec && speeds.find(m.canonical))) continue;
    if (input.empty()) {
      bench::set_threads(1);
      input = bench::bench_input(bo.size, bo.seed);
    }
    const bench::BenchRow r = bench::bench_spec(builtin_registry(), spec, input, bo);
    const double n = static_cast<double>(r.n);
    speeds.set(spec, {r.encode_ms * 1e-3 / n, r.decode_ms * 1e-3 / n, "bench", n,
                      static_cast<double>(r.message_bytes)});
  }
}

void run_advise(const AdviseFlags& f) {
  // Inputs first: every bad flag is reported before anything is measured.
  const ModelSizes model = model_from_flags(f.model, f.sizes);
  Scenario s;
  s.workers = f.workers;
  s.link.bandwidth = parse_bandwidth(f.bandwidth);
  s.link.latency = parse_latency(f.latency);
  s.link.collective_overhead = f.overhead_ms * 1e-3;
  s.link.efficiency = f.efficiency;
  if (f.algorithm == "ring") {
    s.link.algorithm = Algorithm::kRing;
  } else if (f.algorithm == "halving-doubling") {
    s.link.algorithm = Algorithm::kHalvingDoubling;
  } else {
    throw InvalidArgument("--algorithm: '" + f.algorithm + "' is not ring or halving-doubling");
  }
  if (f.topology == "allreduce") {
    s.topology = Topology::kAllreduce;
  } else if (f.topology == "ps-sync") {
    s.topology = Topology::kPsSync;
  } else {
    throw InvalidArgument("--topology: '" + f.topology + "' is not allreduce or ps-sync");
  }
  s.servers = f.servers;
  if (f.compute_ms) {
    s.compute_s = *f.compute_ms * 1e-3;
  } else if (f.sizes.empty()) {
    s.compute_s = default_compute_ms(f.model) * 1e-3;
  } else {
    throw InvalidArgument("--compute-ms is needed with --sizes");
  }
  s.backward_share = f.backward_share;
  s.overlap = f.overlap;
  s.cores = f.cores;
  s.oversubscribed_hop_delay = f.hop_delay_ms * 1e-3;
  s.overlapped_exchange_cpu = f.exchange_cpu_ns_per_byte * 1e-9;

  PlanOptions po;
  po.layout.dense_share = f.dense_share;
  po.layout.min_elements = f.min_elements;
  po.layout.bucket_mb = f.bucket_mb;
  po.min_group_mb = f.min_group_mb;
  std::vector<MethodPlan> plans;
  for (const std::string& spec : split_methods(f.methods)) {
    try {
      plans.push_back(plan_method(spec, model.params, po));
    } catch (const InvalidArgument& e) {
      throw InvalidArgument("--methods: " + spec + ": " + e.what());
    }
  }

  if (!(f.pcie_gbs > 0)) throw InvalidArgument("--pcie-gbs: must be > 0");
  if (!(f.device_bucket_ms >= 0)) throw InvalidArgument("--device-bucket-ms: must be >= 0");
  if (!(f.device_memory_gbs > 0)) throw InvalidArgument("--device-memory-gbs: must be > 0");
  if (!f.device_speeds.empty()) {
    DeviceModel d;
    d.pcie_bandwidth = f.pcie_gbs * 1e9;
    d.bucket_overhead_s = f.device_bucket_ms * 1e-3;
    d.memory_bandwidth = f.device_memory_gbs * 1e9;
    d.speeds = parse_bench_json(read_text_file(f.device_speeds, "--device-speeds"));
    s.device = std::move(d);
  }

  SpeedTable speeds;
  if (!f.codec_speeds.empty())
    speeds = parse_bench_json(read_text_file(f.codec_speeds, "--codec-speeds"), model.name);
  // Measure what the file does not hold: the schemes themselves, then the codecs (and
  // the count sketch codec of a sketch scheme that could not be timed).
  time_schemes(f, plans, speeds);
  bench_codecs(plans, f.bench_size, speeds);
  // Named memories: the bench decoded their warm-up message; use the steady state's.
  for (const MethodPlan& m : plans) {
    if (m.traits.dense || m.traits.scheme) continue;
    const CodecSpeed* sp = speeds.find(m.spec);
    if (sp == nullptr) sp = speeds.find(m.canonical);
    if (sp != nullptr) speeds.set(m.spec, steady_state_decode(*sp, m.spec));
  }

  if (f.sweep) {
    const SweepGrid grid = default_grid();
    Scenario base = s;
    const std::vector<SweepCell> cells = run_sweep(plans, base, speeds, grid);
    std::cout << format_sweep(cells, model.name) << std::flush;
    if (!f.svg.empty()) {
      std::ofstream out(f.svg);
      out << sweep_svg(cells, model.name + ": predicted step time", {1e9 / 8, 100e9 / 8}, 64);
      if (!out) throw InvalidArgument("--svg: cannot write " + f.svg);
    }
    return;
  }

  const std::vector<Prediction> rows = predict_all(plans, s, speeds);
  if (f.json) {
    std::cout << format_json(rows, model.name, s) << std::flush;
  } else {
    char line[512];
    std::snprintf(
        line, sizeof line,
        "%s (%.2f M parameters), W=%d, %s, latency %g ms, %s%s, compute %.1f ms%s%s",
        model.name.c_str(), static_cast<double>(model.numel()) / 1e6, s.workers,
        format_rate(s.link.bandwidth).c_str(), s.link.latency * 1e3, f.topology.c_str(),
        s.topology == Topology::kPsSync ? (" S=" + std::to_string(s.servers)).c_str() : "",
        s.compute_s * 1e3,
        s.cores > 0 ? (", on " + std::to_string(s.cores) + " shared cores").c_str() : "",
        s.overlap > 0 ? ", overlapped" : "");
    if (s.device) {
      std::cout << "gradients on GPUs: device codecs from " << f.device_speeds << ", PCIe "
                << f.pcie_gbs << " GB/s each way; other methods staged through the host\n";
    }
    std::cout << format_table(rows, line) << std::flush;
  }
  if (!f.svg.empty()) {
    SweepGrid grid = default_grid();
    grid.workers.push_back(s.workers);
    grid.bandwidths.push_back(s.link.bandwidth);
    const std::vector<SweepCell> cells = run_sweep(plans, s, speeds, grid);
    std::ofstream out(f.svg);
    out << sweep_svg(cells, model.name + ": predicted step time", {s.link.bandwidth}, s.workers);
    if (!out) throw InvalidArgument("--svg: cannot write " + f.svg);
  }
}

}  // namespace

void add_advise_command(CLI::App& app) {
  auto f = std::make_shared<AdviseFlags>();
  CLI::App* a = app.add_subcommand(
      "advise",
      "Predict each compressor's step time, bytes and speedup over dense on a model, network "
      "and worker count, and rank them (the cost model of docs/cost-model.md)");
  a->add_option("--model", f->model, "Built-in model: " + known_models())->capture_default_str();
  a->add_option("--sizes", f->sizes,
                "Tensor shapes instead of --model: '1000,784x1536,...' or a file of them");
  a->add_option("--workers", f->workers, "Workers W")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  a->add_option("--bandwidth", f->bandwidth, "Each worker's link, each direction (1gbit, 100mbit)")
      ->capture_default_str();
  a->add_option("--latency", f->latency, "One-way latency alpha (5ms, 100us)")
      ->capture_default_str();
  a->add_option("--topology", f->topology, "allreduce or ps-sync")->capture_default_str();
  a->add_option("--algorithm", f->algorithm,
                "Collectives: ring (Gloo's) or halving-doubling (log2 W latency steps, as MPI "
                "and NCCL-like stacks for small messages)")
      ->capture_default_str();
  a->add_option("--servers", f->servers, "Parameter servers S (ps-sync)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  a->add_option("--compute-ms", f->compute_ms,
                "Forward + backward of one worker on a core of its own (default: measured for "
                "mlp and transformer, a planning figure for resnet50)")
      ->check(non_negative_number());
  a->add_option("--backward-share", f->backward_share, "Share of compute that is backward")
      ->capture_default_str()
      ->check(number_in(0.0, 1.0));
  a->add_option("--overlap", f->overlap,
                "Share of backward that hides allreduce traffic (0: gradcomp's reducer exchanges "
                "after backward; ~1: DDP-style bucketed overlap)")
      ->capture_default_str()
      ->check(number_in(0.0, 1.0));
  a->add_option("--cores", f->cores,
                "All W workers share this many cores (the network lab); 0: a machine each")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  a->add_option("--oversubscribed-hop-ms", f->hop_delay_ms,
                "With --cores C < W: latency added to every ring hop per unit of W/C - 1 "
                "(a worker waits to be scheduled)")
      ->capture_default_str()
      ->check(non_negative_number());
  a->add_option("--overlapped-exchange-cpu-ns", f->exchange_cpu_ns_per_byte,
                "With --cores C < W and an outer loop's --delay: compute added per byte a worker "
                "sends (the exchange thread's share of the cores)")
      ->capture_default_str()
      ->check(non_negative_number());
  a->add_option("--collective-overhead-ms", f->overhead_ms,
                "Gloo over TCP: constant cost per collective")
      ->capture_default_str()
      ->check(non_negative_number());
  a->add_option("--link-efficiency", f->efficiency,
                "Share of the nominal bandwidth bulk transfers get (TCP/IP, shaping)")
      ->capture_default_str()
      ->check(number_in(0.01, 1.0));
  a->add_option("--codec-speeds", f->codec_speeds,
                "Output of `gradcomp bench codec --json` and/or `gradcomp bench scheme --json` "
                "(what it lacks is measured now)");
  a->add_option(
      "--device-speeds", f->device_speeds,
      "The gradients are on GPUs: the device codecs' speeds (scripts/bench_device_codecs.py "
      "--jsonl on the GPU; docs/measurements/gpu/*/device-codecs.jsonl); --compute-ms "
      "is then the GPU's step");
  // Given without --device-speeds they would change nothing: refused (in the callback).
  const std::vector<CLI::Option*> device_only = {
      a->add_option("--pcie-gbs", f->pcie_gbs,
                    "With --device-speeds: host <-> device GB/s each way")
          ->capture_default_str(),
      a->add_option("--device-bucket-ms", f->device_bucket_ms,
                    "With --device-speeds: the device reducer's fixed cost per compressed bucket")
          ->capture_default_str(),
      a->add_option("--device-memory-gbs", f->device_memory_gbs,
                    "With --device-speeds: the GPU's memory bandwidth, read + written (PowerSGD's "
                    "passes on the device; device-codecs.json's copy_bandwidth)")
          ->capture_default_str()};
  a->add_option("--bench-size", f->bench_size, "Elements of the on-the-spot codec bench")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t{1024}, std::size_t{1} << 28));
  a->add_option("--methods", f->methods,
                "Compressor specs, space-separated; SPEC+--reducer=scatter for the scatter "
                "reducer, SPEC+--sync-every=H[+--fragments=F][+--delay=D] for an outer loop")
      ->capture_default_str();
  a->add_option("--dense-share", f->dense_share, "As gradcomp train --dense-share")
      ->capture_default_str()
      ->check(number_in(0.0, 1.0));
  a->add_option("--min-elements", f->min_elements, "As gradcomp train --min-elements")
      ->capture_default_str()
      ->check(non_negative_number());
  a->add_option("--bucket-mb", f->bucket_mb, "As gradcomp train --bucket-mb")
      ->capture_default_str()
      ->check(non_negative_number());
  a->add_option("--min-group-mb", f->min_group_mb,
                "Buckets exchanged together, at least this many MiB per group; each group is "
                "one set of collectives (default: the trainer's, 1 for dense, 25 for a "
                "compressed method)")
      ->check(non_negative_number());
  a->add_flag("--json", f->json, "One JSON object per method");
  a->add_option("--svg", f->svg, "Write a plot: step time against W and against bandwidth");
  a->add_flag("--sweep", f->sweep,
              "W = 2..1024 x 100 Mbit/s..100 Gbit/s: where each method pays (markdown)");
  a->callback([f, device_only] {
    for (const CLI::Option* o : device_only) {
      if (o->count() > 0 && f->device_speeds.empty()) {
        throw InvalidArgument(o->get_name() + " applies with --device-speeds only");
      }
    }
    run_advise(*f);
  });
}

}  // namespace gradcomp::cli
