// The run's schedule line and start-of-run warnings (gradcomp/dist/run_checks.h).
#include "gradcomp/dist/run_checks.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "detail/count_sketch.h"
#include "gradcomp/dist/schemes.h"
#include "gradcomp/registry.h"
#include "memory/dgc.h"
#include "sketch_scheme_util.h"

namespace gradcomp::dist {

namespace {

// printf's %g with n significant digits.
std::string num(double v, int digits = 4) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", digits, v);
  return buf;
}

// A ratio: whole numbers from 100 on ("1024x", not "1.02e+03x").
std::string ratio_text(double r) { return r >= 100 ? num(std::round(r), 15) : num(r, 3); }

std::string steps_text(double steps) {
  return std::abs(steps - std::round(steps)) < 1e-9 ? num(steps, 12) : num(steps, 4);
}

struct DgcSettings {
  double density = 0;
  double warmup_epochs = 0;
};

std::optional<DgcSettings> dgc_settings(std::string_view spec) {
  const SpecNode node = parse_spec(spec);
  if (node.name != "dgc") return std::nullopt;
  const MemoryInfo* info = builtin_registry().find_memory("dgc");
  const Params p = resolve_params("dgc", info->params, node);
  return DgcSettings{p.get_float("density"), p.get_float("warmup_epochs")};
}

// The 2bit node of a spec (bare or wrapped in ef/efm/noef), resolved.
std::optional<Params> two_bit_params(std::string_view spec) {
  const SpecNode root = parse_spec(spec);
  const SpecNode* node = &root;
  while (node->inner) node = node->inner.get();
  if (node->name != "2bit") return std::nullopt;
  const CodecInfo* info = builtin_registry().find("2bit");
  if (info == nullptr) return std::nullopt;
  return CodecRegistry::resolve_params(*info, *node);
}

// A reducer scheme's resolved parameters (powersgd, sketched-sgd, fetchsgd), or nothing
// for any other spec.
std::optional<Params> scheme_params(const SpecNode& node) {
  const SchemeDescription* d = builtin_registry().find_scheme(node.name);
  if (d == nullptr) return std::nullopt;
  return resolve_params(node.name, d->params, node);
}

// PowerSGD's dense warm-up (warmup_steps), 0 for any other spec.
std::uint64_t powersgd_warmup_steps(const SpecNode& node) {
  if (node.name != "powersgd") return 0;
  const auto p = scheme_params(node);
  return p ? static_cast<std::uint64_t>(p->get_int("warmup_steps")) : 0;
}

}  // namespace

std::string describe_schedule(std::string_view spec, const RunShape& run) {
  const auto dgc = dgc_settings(spec);
  if (!dgc) {
    const SpecNode node = parse_spec(spec);
    const std::uint64_t warmup = powersgd_warmup_steps(node);
    if (warmup == 0) return {};
    std::string line = "powersgd warm-up: " + std::to_string(warmup) + " dense steps";
    if (run.total_steps > 0) line += " of " + std::to_string(run.total_steps);
    return line + ", then rank " + std::to_string(scheme_params(node)->get_int("rank"));
  }
  const double target = dgc->density;
  if (!(dgc->warmup_epochs > 0.0) || target >= detail::dgc_stage_density(0)) {
    return "dgc: density " + num(target, 6) + " from the first step (no warm-up)";
  }
  const double steps =
      detail::dgc_warmup_steps(dgc->warmup_epochs, run.steps_per_epoch, run.total_steps);
  if (!(steps > 0.0)) {
    return "dgc: density " + num(target, 6) +
           " from the first step (warm-up off: steps per epoch unknown)";
  }
  const double asked = dgc->warmup_epochs * static_cast<double>(run.steps_per_epoch);
  std::string line = "dgc warm-up: " + steps_text(steps) + " steps";
  if (run.total_steps > 0) line += " of " + std::to_string(run.total_steps);
  line += " (" + num(dgc->warmup_epochs) + " epochs";
  if (steps < asked) {
    line += " capped at 1/" + num(1.0 / detail::kDgcWarmupMaxShare) + " of the run";
  }
  line += "), 4 stages of " + steps_text(steps / 4) + " steps at density ";
  for (int j = 0; j < 4; ++j) {
    line += num(std::max(target, detail::dgc_stage_density(j)), 6) + ", ";
  }
  line += "then " + num(target, 6);
  return line;
}

std::vector<std::string> start_warnings(std::string_view spec, const RunShape& run) {
  std::vector<std::string> out;
  if (const auto dgc = dgc_settings(spec)) {
    const bool warms_up = dgc->warmup_epochs > 0.0 && dgc->density < detail::dgc_stage_density(0);
    if (warms_up && run.steps_per_epoch == 0) {
      out.push_back("warning: dgc: warmup_epochs=" + num(dgc->warmup_epochs) +
                    " but the steps per epoch are unknown: no warm-up, density " +
                    num(dgc->density, 6) + " from the first step");
    } else if (warms_up && run.total_steps > 0) {
      const double asked = dgc->warmup_epochs * static_cast<double>(run.steps_per_epoch);
      const double steps =
          detail::dgc_warmup_steps(dgc->warmup_epochs, run.steps_per_epoch, run.total_steps);
      if (steps < asked) {
        out.push_back(
            "warning: dgc: warmup_epochs=" + num(dgc->warmup_epochs) + " (" + steps_text(asked) +
            " steps) " +
            (asked >= static_cast<double>(run.total_steps) ? "covers the whole run of "
                                                           : "is more than 1/8 of the run's ") +
            std::to_string(run.total_steps) + " steps; capped at " + steps_text(steps) +
            " steps so that density " + num(dgc->density, 6) + " holds for 7/8 of the run");
      }
    }
    return out;
  }

  const SpecNode node = parse_spec(spec);
  if (const std::uint64_t warmup = powersgd_warmup_steps(node);
      run.total_steps > 0 && warmup >= run.total_steps) {
    out.push_back("warning: powersgd: warmup_steps=" + std::to_string(warmup) +
                  " covers the whole run of " + std::to_string(run.total_steps) +
                  " steps: every step is exchanged dense, and nothing is compressed");
    return out;
  }
  if ((node.name == "ef" || node.name == "efm") && node.inner && node.inner->name == "sketch") {
    out.push_back("warning: " + node.name +
                  "(sketch): count-sketch estimates are not a contraction, so error feedback "
                  "can diverge (the default MLP job: loss NaN at step 20); the bare sketch runs "
                  "without memory, and sketched-sgd / fetchsgd keep their error consistently "
                  "with the summed sketch");
    return out;
  }
  if (node.name == "sketched-sgd" || node.name == "fetchsgd") {
    const std::optional<Params> resolved = scheme_params(node);
    if (!resolved) return out;
    const Params& p = *resolved;
    const sketch_scheme::Geometry geo = sketch_scheme::geometry_from(p);
    const bool sketched = node.name == "sketched-sgd";
    const std::size_t p2 = sketched ? static_cast<std::size_t>(p.get_int("p2")) : 1;
    // The bucket whose sketch is shortest for its candidates.
    double worst = 0;
    std::size_t worst_n = 0, worst_cols = 0, worst_cand = 0, worst_k = 0;
    for (const std::size_t n : run.compressed_sizes) {
      if (n == 0) continue;
      const std::size_t k = sketch_scheme::k_for(geo, n);
      const std::size_t cand = std::min(n, p2 * k);
      const std::size_t cols = detail::sketch_columns(n, geo.rows, geo.cols, geo.table);
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
    if (worst > 0) {
      const double table_needed = static_cast<double>(geo.rows) * static_cast<double>(worst_cand) /
                                  static_cast<double>(worst_n);
      out.push_back("warning: " + node.name + ": a sketch of " + std::to_string(geo.rows) + " x " +
                    std::to_string(worst_cols) + " cells for " + std::to_string(worst_cand) +
                    " candidates to rank (" +
                    (sketched ? "p2*k, k=" + std::to_string(worst_k) : std::string("k")) +
                    ") in a bucket of " + std::to_string(worst_n) +
                    " elements: fewer columns than candidates, so every row mixes them; "
                    "table >= " +
                    num(table_needed, 3) + " (or cols >= " + std::to_string(worst_cand) +
                    ") gives each one a column");
    }
  }
  return out;
}

double fixed_2bit_threshold(std::string_view spec) {
  const auto p = two_bit_params(spec);
  return p ? p->get_float("threshold") : 0.0;
}

std::optional<std::string> threshold_warning(std::string_view spec,
                                             std::span<const std::span<const float>> grads,
                                             std::uint64_t step) {
  const double tau = fixed_2bit_threshold(spec);
  if (!(tau > 0.0)) return std::nullopt;
  double scale = 0;
  for (const std::span<const float> g : grads) {
    if (g.empty()) continue;
    double sum = 0;
    for (const float x : g) sum += std::abs(static_cast<double>(x));
    const double mean = sum / static_cast<double>(g.size());
    if (std::isfinite(mean)) scale = std::max(scale, mean);
  }
  if (!(scale > 0.0) || !(tau > kThresholdFarAbove * scale)) return std::nullopt;
  return "warning: 2bit: threshold=" + num(tau) + " is " + ratio_text(tau / scale) +
         "x the gradients' mean |g| (" + num(scale, 3) + " at step " + std::to_string(step) +
         "): a typical entry waits ~" + ratio_text(tau / scale) +
         " steps in the residual before it is sent; the default 2bit (no threshold=) scales "
         "tau to the residual";
}

}  // namespace gradcomp::dist
