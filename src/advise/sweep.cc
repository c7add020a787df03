// The scale sweep; see sweep.h.
#include "gradcomp/advise/sweep.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "gradcomp/advise/report.h"

namespace gradcomp::advise {

namespace {

const Prediction* find(const SweepCell& c, const std::string& spec) {
  for (const Prediction& p : c.ranked) {
    if (p.spec == spec) return &p;
  }
  return nullptr;
}

// Cells of one bandwidth, ordered by W.
std::map<double, std::vector<const SweepCell*>> by_bandwidth(const std::vector<SweepCell>& cells) {
  std::map<double, std::vector<const SweepCell*>> m;
  for (const SweepCell& c : cells) m[c.bandwidth].push_back(&c);
  for (auto& [bw, v] : m) {
    std::sort(v.begin(), v.end(),
              [](const SweepCell* a, const SweepCell* b) { return a->workers < b->workers; });
  }
  return m;
}

}  // namespace

SweepGrid default_grid() {
  SweepGrid g;
  for (int w = 2; w <= 1024; w *= 2) g.workers.push_back(w);
  for (double bits : {100e6, 1e9, 10e9, 25e9, 100e9}) g.bandwidths.push_back(bits / 8.0);
  return g;
}

std::vector<SweepCell> run_sweep(const std::vector<MethodPlan>& plans, const Scenario& base,
                                 const SpeedTable& speeds, const SweepGrid& grid) {
  std::vector<SweepCell> out;
  for (double bw : grid.bandwidths) {
    for (int w : grid.workers) {
      Scenario s = base;
      s.workers = w;
      s.link.bandwidth = bw;
      out.push_back({w, bw, predict_all(plans, s, speeds)});
    }
  }
  return out;
}

std::vector<PaysRange> pays_ranges(const std::vector<SweepCell>& cells) {
  std::vector<PaysRange> out;
  for (const auto& [bw, row] : by_bandwidth(cells)) {
    if (row.empty()) continue;
    for (const Prediction& first : row.front()->ranked) {
      if (!first.available || first.traits.dense) continue;
      PaysRange r;
      r.bandwidth = bw;
      r.spec = first.spec;
      r.family = first.family;
      bool gap = false;
      for (const SweepCell* c : row) {
        const Prediction* p = find(*c, first.spec);
        if (!p) continue;
        if (c == row.front()) r.speedup_at_min = p->speedup;
        if (c == row.back()) r.speedup_at_max = p->speedup;
        if (p->speedup > 1.0) {
          if (r.first_paying == 0)
            r.first_paying = c->workers;
          else if (gap)
            r.contiguous = false;
          r.last_paying = c->workers;
        } else if (r.first_paying != 0) {
          gap = true;
        }
      }
      out.push_back(r);
    }
  }
  return out;
}

std::vector<Overtake> overtakes(const std::vector<SweepCell>& cells) {
  std::vector<Overtake> out;
  for (const auto& [bw, row] : by_bandwidth(cells)) {
    if (row.empty()) continue;
    const SweepCell& first = *row.front();
    for (const Prediction& a : first.ranked) {
      if (a.traits.all_allreduce || !a.available) continue;
      for (const Prediction& r : first.ranked) {
        // A compressed method that only allreduces (dense is the baseline, not a rival).
        const bool allreduce_able = !r.traits.dense && r.traits.all_allreduce;
        if (!allreduce_able || !r.available || r.step_s <= a.step_s) continue;
        for (const SweepCell* c : row) {
          const Prediction* pa = find(*c, a.spec);
          const Prediction* pr = find(*c, r.spec);
          if (pa && pr && pr->step_s < pa->step_s) {
            out.push_back({bw, a.spec, r.spec, c->workers});
            break;
          }
        }
      }
    }
  }
  return out;
}

std::string format_sweep(const std::vector<SweepCell>& cells, const std::string& model) {
  std::string o = "## " + model + ": where each method beats dense allreduce\n\n";
  o += "| link | method | family | beats dense at W | speedup at W=min | at W=max |\n";
  o += "|---|---|---|---|---|---|\n";
  char buf[64];
  for (const PaysRange& r : pays_ranges(cells)) {
    std::string range = "never";
    if (r.first_paying) {
      range = std::to_string(r.first_paying) + "–" + std::to_string(r.last_paying);
      if (!r.contiguous) range += " (with gaps)";
    }
    o += "| " + format_rate(r.bandwidth) + " | `" + r.spec + "` | " + r.family + " | " + range;
    std::snprintf(buf, sizeof buf, " | %.2f× | %.2f× |\n", r.speedup_at_min, r.speedup_at_max);
    o += buf;
  }
  // Per link and allgathered method: the smallest W at which an allreduce-able method
  // that was slower at the grid's smallest W is faster, and which ones are by then.
  std::map<std::pair<double, std::string>, std::pair<int, std::string>> first;
  for (const Overtake& t : overtakes(cells)) {
    auto [it, fresh] =
        first.try_emplace({t.bandwidth, t.allgathered}, t.from_workers, "`" + t.overtaken_by + "`");
    if (fresh) continue;
    if (t.from_workers < it->second.first) {
      it->second = {t.from_workers, "`" + t.overtaken_by + "`"};
    } else if (t.from_workers == it->second.first) {
      it->second.second += ", `" + t.overtaken_by + "`";
    }
  }
  o += "\n## " + model + ": allgathered methods overtaken by allreduce-able ones\n\n";
  if (first.empty()) {
    o += "(none in the grid)\n";
  } else {
    o += "| link | allgathered | from W | first overtaken by |\n|---|---|---|---|\n";
    for (const auto& [key, v] : first) {
      o += "| " + format_rate(key.first) + " | `" + key.second + "` | " + std::to_string(v.first) +
           " | " + v.second + " |\n";
    }
  }
  // Fastest method per cell.
  std::set<int> ws;
  for (const SweepCell& c : cells) ws.insert(c.workers);
  o += "\n## " + model + ": fastest method (speedup over dense)\n\n| link |";
  for (int w : ws) o += " W=" + std::to_string(w) + " |";
  o += "\n|---|";
  for (std::size_t i = 0; i < ws.size(); ++i) o += "---|";
  o += "\n";
  for (const auto& [bw, row] : by_bandwidth(cells)) {
    o += "| " + format_rate(bw) + " |";
    for (const SweepCell* c : row) {
      const Prediction& best = c->ranked.front();
      std::snprintf(buf, sizeof buf, " (%.2f×)", best.speedup);
      o += " `" + best.spec + "`" + buf + " |";
    }
    o += "\n";
  }
  return o;
}

std::string sweep_svg(const std::vector<SweepCell>& cells, const std::string& title,
                      const std::vector<double>& at_bandwidths, int at_workers) {
  std::vector<Panel> panels;
  std::vector<std::string> specs;
  if (!cells.empty()) {
    // Dense first, then the others in the first cell's order.
    specs.push_back("none");
    for (const Prediction& p : cells.front().ranked) {
      if (p.spec != "none" && p.available) specs.push_back(p.spec);
    }
  }
  auto series_for = [&](auto keep, auto x_of) {
    std::vector<Series> out;
    for (const std::string& spec : specs) {
      Series s{spec, {}};
      for (const SweepCell& c : cells) {
        if (!keep(c)) continue;
        if (spec == "none") {
          // Dense's step: any prediction's step times its speedup.
          const Prediction& p = c.ranked.front();
          s.points.push_back({x_of(c), p.step_s * p.speedup * 1e3});
        } else if (const Prediction* p = find(c, spec)) {
          s.points.push_back({x_of(c), p->step_s * 1e3});
        }
      }
      out.push_back(std::move(s));
    }
    return out;
  };
  for (double bw : at_bandwidths) {
    Panel p;
    p.title = "step time against workers, " + format_rate(bw);
    p.x_label = "workers W";
    p.y_label = "step ms";
    p.series = series_for([bw](const SweepCell& c) { return c.bandwidth == bw; },
                          [](const SweepCell& c) { return static_cast<double>(c.workers); });
    panels.push_back(std::move(p));
  }
  Panel p;
  p.title = "step time against bandwidth, W = " + std::to_string(at_workers);
  p.x_label = "link Gbit/s";
  p.y_label = "step ms";
  p.series = series_for([at_workers](const SweepCell& c) { return c.workers == at_workers; },
                        [](const SweepCell& c) { return c.bandwidth * 8.0 / 1e9; });
  panels.push_back(std::move(p));
  return svg_plot(panels, title);
}

}  // namespace gradcomp::advise
