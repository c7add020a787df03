// The reducer schemes' descriptions (gradcomp/registry.h, SchemeDescription): names,
// parameters with defaults and ranges, examples, traits, and what a step sends (their
// traffic hooks, scheme_traffic.cc). In the core, free of the reducers' code, so that a
// Method is parsed, `gradcomp list` describes the schemes and `gradcomp advise` costs them
// without c10d; each scheme's file in src/dist (powersgd.cc, sketched_sgd.cc,
// fetchsgd.cc) reads the parameters declared here and pairs the description with its
// reducer.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "codecs/codecs.h"
#include "detail/run_text.h"
#include "detail/scheme_traffic.h"
#include "gradcomp/kernels/count_sketch.h"
#include "gradcomp/kernels/sketch_geometry.h"
#include "gradcomp/registry.h"

namespace gradcomp {

namespace {

// The sketch geometry both count-sketch schemes take (read by the distributed layer's
// sketch_scheme::geometry_from).
std::vector<ParamDef> geometry_params(double default_ratio, double default_table,
                                      std::int64_t default_rows) {
  return {int_param("k", 0, 0, std::int64_t{1} << 31,
                    "coordinates updated per bucket and step; 0: ceil(ratio*n)"),
          float_param("ratio", default_ratio, 0.0, 1.0, "with k=0: k as a fraction of the bucket",
                      true),
          int_param("rows", default_rows, 1, kernels::kMaxSketchRows, "sketch rows r"),
          int_param("cols", 0, 0, std::int64_t{1} << 24, "sketch columns c; 0: ceil(table*n/rows)"),
          float_param("table", default_table, 0.0, 1.0,
                      "with cols=0: sketch cells r*c as a fraction of the bucket", true)};
}

// PowerSGD's dense warm-up in the run's header.
std::string powersgd_schedule(const Params& p, const RunShape& run) {
  const auto warmup = static_cast<std::uint64_t>(p.get_int("warmup_steps"));
  if (warmup == 0) return {};
  std::string line = "powersgd warm-up: " + std::to_string(warmup) + " dense steps";
  if (run.total_steps > 0) line += " of " + std::to_string(run.total_steps);
  return line + ", then rank " + std::to_string(p.get_int("rank"));
}

std::vector<std::string> powersgd_warnings(const Params& p, const RunShape& run) {
  const auto warmup = static_cast<std::uint64_t>(p.get_int("warmup_steps"));
  if (run.total_steps == 0 || warmup < run.total_steps) return {};
  return {"warning: powersgd: warmup_steps=" + std::to_string(warmup) +
          " covers the whole run of " + std::to_string(run.total_steps) +
          " steps: every step is exchanged dense, and nothing is compressed"};
}

// A sketch with fewer columns than the candidates it must rank (sketched-sgd: p2*k,
// fetchsgd: k) in some bucket: every row then mixes them, whatever the hashes. Named
// after the bucket whose sketch is shortest for its candidates.
// p2: sketched-sgd's candidates per coordinate it applies (p2*k); 0 for fetchsgd (k).
std::vector<std::string> sketch_geometry_warnings(const std::string& scheme, const Params& p,
                                                  std::size_t p2, const RunShape& run) {
  const bool per_k = p2 > 0;
  if (!per_k) p2 = 1;
  const kernels::SketchGeometry geo = kernels::sketch_geometry_from(p);
  double worst = 0;
  std::size_t worst_n = 0, worst_cols = 0, worst_cand = 0, worst_k = 0;
  for (const std::size_t n : run.compressed_sizes) {
    if (n == 0) continue;
    const std::size_t k = kernels::sketch_k_for(geo, n);
    const std::size_t cand = std::min(n, p2 * k);
    const std::size_t cols = kernels::sketch_columns(n, geo.rows, geo.cols, geo.table);
    if (cols >= cand) continue;
    const double short_by =
        static_cast<double>(cand) / static_cast<double>(std::max<std::size_t>(cols, 1));
    if (short_by > worst) {
      worst = short_by;
      worst_n = n;
      worst_cols = cols;
      worst_cand = cand;
      worst_k = k;
    }
  }
  if (!(worst > 0)) return {};
  const double table_needed = static_cast<double>(geo.rows) * static_cast<double>(worst_cand) /
                              static_cast<double>(worst_n);
  return {"warning: " + scheme + ": a sketch of " + std::to_string(geo.rows) + " x " +
          std::to_string(worst_cols) + " cells for " + std::to_string(worst_cand) +
          " candidates to rank (" +
          (per_k ? "p2*k, k=" + std::to_string(worst_k) : std::string("k")) + ") in a bucket of " +
          std::to_string(worst_n) +
          " elements: fewer columns than candidates, so every row mixes them; table >= " +
          detail::number_text(table_needed, 3) + " (or cols >= " + std::to_string(worst_cand) +
          ") gives each one a column"};
}

// Rank 4 by default: on the default job (3 seeds) rank 2 lands 0.74 points below dense at
// 123x, rank 4 0.3 below at 90x (docs/measurements/accuracy.md).
SchemeDescription powersgd_description() {
  return {.name = "powersgd",
          .summary =
              "PowerSGD (Vogels et al. 2019): rank-r factors P = MQ, Q = M^T P, two fp32 "
              "allreduces, warm start, error feedback; 32 r (rows + cols) bits per matrix",
          .params = {int_param("rank", 4, 1, 64, "rank r of the approximation"),
                     int_param("warmup_steps", 0, 0, 1'000'000'000,
                               "steps exchanged dense before compression starts (PyTorch's "
                               "start_powerSGD_iter; see also --dense-steps)"),
                     bool_param("error_feedback", true,
                                "keep M - PQ^T and add it to the next gradient"),
                     bool_param("warm_start", true,
                                "reuse the previous step's Q (else a fresh shared draw)")},
          .examples = {"powersgd:rank=1", "powersgd:rank=4,warm_start=false",
                       "powersgd:rank=2,error_feedback=false"},
          .schedule = powersgd_schedule,
          .warnings = powersgd_warnings,
          .traffic = detail::powersgd_traffic};
}

SchemeDescription sketched_sgd_description() {
  // One row of 0.05 n columns, k = 0.5%, 4k candidates (0.4 of the columns): 13.4x on the
  // wire, 2.5x less CPU per step than 5 rows of n/200 with k = 1% (14.3x), and the same
  // accuracy, which no geometry moves (docs/algorithms/sketches.md); unlike those 5 rows it
  // gives each candidate a column of its own.
  std::vector<ParamDef> params = geometry_params(0.005, 0.05, 1);
  params.push_back(int_param("p2", 4, 1, 1000,
                             "candidates per bucket in round 2: p2*k (exact values allreduced)"));
  params.push_back(
      float_param("momentum", 0.9, 0.0, 0.9999, "worker momentum m (u <- m*u + g); = --momentum"));
  params.push_back(bool_param("mask", true,
                              "zero the momentum u where the update is applied (the paper's "
                              "momentum stopping)"));
  return {.name = "sketched-sgd",
          .summary =
              "Sketched-SGD: allreduce count sketches of the accumulated momentum, then "
              "the exact values of the p2*k best candidates; apply the top k (on "
              "--topology ps-sync the server merges the sketches)",
          .params = std::move(params),
          .examples = {"sketched-sgd:ratio=0.001,table=0.01", "sketched-sgd:k=100,rows=3,cols=500"},
          .carries_momentum = true,
          .runs_on_ps_sync = true,
          .warnings =
              [](const Params& p, const RunShape& run) {
                return sketch_geometry_warnings("sketched-sgd", p,
                                                static_cast<std::size_t>(p.get_int("p2")), run);
              },
          .traffic = detail::sketched_sgd_traffic};
}

SchemeDescription fetchsgd_description() {
  // One row of 0.09 n columns (18 k for k = 0.5%), >= 10x on the wire: on the default job
  // it lands -0.39 points from dense, where 5 rows of the same cells land -3.7 whatever k
  // (docs/measurements/accuracy.md, "FetchSGD's sketch").
  std::vector<ParamDef> params = geometry_params(0.005, 0.09, 1);
  params.push_back(
      float_param("momentum", 0.9, 0.0, 0.9999, "momentum m in sketch space; = --momentum"));
  return {.name = "fetchsgd",
          .summary =
              "FetchSGD: allreduce count sketches of the gradients; momentum and error "
              "kept in sketch space; apply the top k of the error sketch's estimates",
          .params = std::move(params),
          .examples = {"fetchsgd:rows=5,ratio=0.01,table=0.1", "fetchsgd:k=50,rows=3,cols=1000"},
          .carries_momentum = true,
          .warnings =
              [](const Params& p, const RunShape& run) {
                return sketch_geometry_warnings("fetchsgd", p, 0, run);
              },
          .traffic = detail::fetchsgd_traffic};
}

}  // namespace

void register_builtin_schemes(CodecRegistry& registry) {
  registry.add_scheme(powersgd_description());
  registry.add_scheme(sketched_sgd_description());
  registry.add_scheme(fetchsgd_description());
}

}  // namespace gradcomp
