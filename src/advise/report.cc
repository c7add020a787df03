// Table, JSON and SVG output of the advisor; see report.h.
#include "gradcomp/advise/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "gradcomp/json.h"

namespace gradcomp::advise {

namespace {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string ms(double s) {
  const double v = s * 1e3;
  if (v == 0) return "0";
  if (v < 0.1) return fmt("%.3f", v);
  if (v < 10) return fmt("%.2f", v);
  if (v < 1000) return fmt("%.1f", v);
  return fmt("%.0f", v);
}

std::string pad(const std::string& s, std::size_t w, bool right) {
  if (s.size() >= w) return s;
  return right ? std::string(w - s.size(), ' ') + s : s + std::string(w - s.size(), ' ');
}

std::string xml_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '<')
      o += "&lt;";
    else if (c == '>')
      o += "&gt;";
    else if (c == '&')
      o += "&amp;";
    else if (c == '"')
      o += "&quot;";
    else
      o += c;
  }
  return o;
}

}  // namespace

std::string format_rate(double bps) {
  const double bits = bps * 8.0;
  if (bits >= 1e9) return fmt("%g Gbit/s", bits / 1e9);
  if (bits >= 1e6) return fmt("%g Mbit/s", bits / 1e6);
  if (bits >= 1e3) return fmt("%g kbit/s", bits / 1e3);
  return fmt("%g bit/s", bits);
}

std::string format_bytes(double b) {
  if (b >= 1e9) return fmt("%.2f GB", b / 1e9);
  if (b >= 1e6) return fmt("%.2f MB", b / 1e6);
  if (b >= 1e3) return fmt("%.0f kB", b / 1e3);
  return fmt("%.0f B", b);
}

std::string format_table(const std::vector<Prediction>& rows, const std::string& scenario_line) {
  // Gradients on GPUs (Scenario::device): where each codec runs and the PCIe copies.
  const bool device = std::any_of(rows.begin(), rows.end(),
                                  [](const Prediction& p) { return p.on_device || p.pcie_s > 0; });
  std::vector<std::string> head = {"rank",      "method",    "sent/worker/step", "ratio",
                                   "encode ms", "decode ms", "comm ms",          "exposed ms",
                                   "step ms",   "speedup",   "acc (pts)"};
  if (device) {
    head.insert(head.begin() + 7, "pcie ms");
    head.insert(head.begin() + 4, "codec on");
  }
  std::vector<std::vector<std::string>> cells;
  for (const Prediction& p : rows) {
    if (!p.available) {
      std::vector<std::string> r(head.size(), "-");
      r[1] = p.spec;
      r.back() = p.note;
      cells.push_back(std::move(r));
      continue;
    }
    std::vector<std::string> r = {std::to_string(p.rank),
                                  p.spec,
                                  format_bytes(p.bytes_sent),
                                  fmt("%.1fx", p.ratio),
                                  ms(p.encode_s),
                                  ms(p.decode_s),
                                  ms(p.comm_s),
                                  ms(p.exposed_s),
                                  ms(p.step_s),
                                  fmt("%.2fx", p.speedup),
                                  p.accuracy_points ? fmt("%+.2f", *p.accuracy_points) : "?"};
    if (device) {
      r.insert(r.begin() + 7, ms(p.pcie_s));
      r.insert(r.begin() + 4, p.traits.dense ? "-" : p.on_device ? "device" : "host");
    }
    cells.push_back(std::move(r));
  }
  std::vector<std::size_t> width(head.size());
  for (std::size_t c = 0; c < head.size(); ++c) {
    width[c] = head[c].size();
    for (const auto& r : cells) {
      if (c + 1 < head.size() || r[0] != "-") width[c] = std::max(width[c], r[c].size());
    }
  }
  auto line = [&](const std::vector<std::string>& r) {
    std::string s;
    for (std::size_t c = 0; c < r.size(); ++c) {
      const bool right = c != 1;
      s += (c ? "  " : "") + (c + 1 == r.size() ? r[c] : pad(r[c], width[c], right));
    }
    while (!s.empty() && s.back() == ' ') s.pop_back();
    return s + "\n";
  };
  std::string out = scenario_line + "\n" + line(head);
  for (const auto& r : cells) out += line(r);
  return out;
}

std::string format_json(const std::vector<Prediction>& rows, const std::string& model,
                        const Scenario& s) {
  std::string out;
  for (const Prediction& p : rows) {
    JsonObject o;
    o.add("model", model)
        .add("workers", s.workers)
        .add("bandwidth_bps", s.link.bandwidth * 8.0)
        .add("latency_ms", s.link.latency * 1e3)
        .add("topology", s.topology == Topology::kAllreduce ? "allreduce" : "ps-sync")
        .add("servers", s.servers)
        .add("cores", s.cores)
        .add("overlap", s.overlap)
        .add("rank", p.rank)
        .add("spec", p.spec)
        .add("family", p.family)
        .add("available", p.available);
    if (!p.available) {
      o.add("note", p.note);
      out += o.str() + "\n";
      continue;
    }
    o.add("bytes_per_worker_step", p.bytes_sent)
        .add("ratio", p.ratio)
        .add("collectives", p.collectives)
        .add("compressed_buckets", static_cast<std::uint64_t>(p.compressed_buckets))
        .add("compute_ms", p.compute_s * 1e3)
        .add("encode_ms", p.encode_s * 1e3)
        .add("decode_ms", p.decode_s * 1e3)
        .add("comm_ms", p.comm_s * 1e3)
        .add("exposed_ms", p.exposed_s * 1e3)
        .add("pcie_ms", p.pcie_s * 1e3)
        .add("on_device", p.on_device)
        .add("step_ms", p.step_s * 1e3)
        .add("speedup", p.speedup)
        .add("speed_source", p.speed_source);
    std::vector<JsonObject> rounds;
    for (const RoundCost& r : p.rounds) {
      rounds.push_back(JsonObject()
                           .add("what", r.what)
                           .add("collective", r.collective)
                           .add("bytes", r.bytes)
                           .add("ms", r.seconds * 1e3));
    }
    o.add("rounds", rounds);
    if (p.accuracy_points)
      o.add("accuracy_points", *p.accuracy_points);
    else
      o.add_null("accuracy_points");
    out += o.str() + "\n";
  }
  return out;
}

std::string svg_plot(const std::vector<Panel>& panels, const std::string& title) {
  static const char* colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                 "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
  const double pw = 420, ph = 300, ml = 60, mt = 40, gap = 40;
  std::size_t n_series = 0;
  for (const Panel& p : panels) n_series = std::max(n_series, p.series.size());
  const double legend_h = 18.0 * static_cast<double>((n_series + 1) / 2) + 10;
  const double W = ml + static_cast<double>(panels.size()) * (pw + gap) + 10;
  const double H = mt + ph + 50 + legend_h;
  std::string o = fmt("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" ", W) +
                  fmt("height=\"%.0f\" font-family=\"sans-serif\" font-size=\"11\">\n", H);
  o += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  o += fmt("<text x=\"%.0f\" y=\"18\" font-size=\"14\" text-anchor=\"middle\">", W / 2) +
       xml_escape(title) + "</text>\n";
  for (std::size_t k = 0; k < panels.size(); ++k) {
    const Panel& P = panels[k];
    const double x0 = ml + static_cast<double>(k) * (pw + gap), y0 = mt;
    double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
    auto ok = [&](double x, double y) {
      return std::isfinite(x) && std::isfinite(y) && (!P.log_x || x > 0) && (!P.log_y || y > 0);
    };
    for (const Series& s : P.series) {
      for (auto [x, y] : s.points) {
        if (!ok(x, y)) continue;
        xmin = std::min(xmin, x), xmax = std::max(xmax, x);
        ymin = std::min(ymin, y), ymax = std::max(ymax, y);
      }
    }
    if (!(xmin < xmax)) xmin = xmin * 0.5, xmax = xmax * 2 + 1;
    if (!(ymin < ymax)) ymin = ymin * 0.5, ymax = ymax * 2 + 1;
    auto tx = [&](double v) { return P.log_x ? std::log10(v) : v; };
    auto ty = [&](double v) { return P.log_y ? std::log10(v) : v; };
    double lx0 = tx(xmin), lx1 = tx(xmax), ly0 = ty(ymin), ly1 = ty(ymax);
    if (P.log_y) ly0 = std::floor(ly0), ly1 = std::ceil(ly1);
    if (P.log_x) lx0 = std::floor(lx0 * 2) / 2, lx1 = std::ceil(lx1 * 2) / 2;
    auto X = [&](double v) { return x0 + (tx(v) - lx0) / (lx1 - lx0) * pw; };
    auto Y = [&](double v) { return y0 + ph - (ty(v) - ly0) / (ly1 - ly0) * ph; };
    o += fmt("<rect x=\"%.1f\" ", x0) + fmt("y=\"%.1f\" ", y0) + fmt("width=\"%.0f\" ", pw) +
         fmt("height=\"%.0f\" fill=\"none\" stroke=\"#444\"/>\n", ph);
    o += fmt("<text x=\"%.1f\" ", x0 + pw / 2) + fmt("y=\"%.1f\" text-anchor=\"middle\">", y0 - 6) +
         xml_escape(P.title) + "</text>\n";
    o += fmt("<text x=\"%.1f\" ", x0 + pw / 2) +
         fmt("y=\"%.1f\" text-anchor=\"middle\">", y0 + ph + 32) + xml_escape(P.x_label) +
         "</text>\n";
    o += fmt("<text transform=\"translate(%.1f,", x0 - 45) +
         fmt("%.1f) rotate(-90)\" ", y0 + ph / 2) + "text-anchor=\"middle\">" +
         xml_escape(P.y_label) + "</text>\n";
    // Ticks: decades on log axes, five steps on linear ones.
    auto ticks = [](double a, double b, bool log) {
      std::vector<double> t;
      if (log) {
        for (double e = std::ceil(a); e <= b + 1e-9; e += 1) t.push_back(std::pow(10.0, e));
      } else {
        for (int i = 0; i <= 5; ++i) t.push_back(a + (b - a) * i / 5);
      }
      return t;
    };
    for (double v : ticks(lx0, lx1, P.log_x)) {
      o += fmt("<line x1=\"%.1f\" ", X(v)) + fmt("x2=\"%.1f\" ", X(v)) + fmt("y1=\"%.1f\" ", y0) +
           fmt("y2=\"%.1f\" stroke=\"#ddd\"/>\n", y0 + ph);
      o += fmt("<text x=\"%.1f\" ", X(v)) +
           fmt("y=\"%.1f\" text-anchor=\"middle\">", y0 + ph + 14) + fmt("%g", v) + "</text>\n";
    }
    for (double v : ticks(ly0, ly1, P.log_y)) {
      o += fmt("<line x1=\"%.1f\" ", x0) + fmt("x2=\"%.1f\" ", x0 + pw) +
           fmt("y1=\"%.1f\" ", Y(v)) + fmt("y2=\"%.1f\" stroke=\"#ddd\"/>\n", Y(v));
      o += fmt("<text x=\"%.1f\" ", x0 - 4) + fmt("y=\"%.1f\" text-anchor=\"end\">", Y(v) + 4) +
           fmt("%g", v) + "</text>\n";
    }
    for (std::size_t i = 0; i < P.series.size(); ++i) {
      std::string pts;
      for (auto [x, y] : P.series[i].points) {
        if (!ok(x, y)) continue;
        pts += fmt("%.1f,", X(x)) + fmt("%.1f ", Y(y));
      }
      o += "<polyline fill=\"none\" stroke-width=\"1.8\" stroke=\"" + std::string(colors[i % 10]) +
           "\" points=\"" + pts + "\"/>\n";
    }
  }
  // Legend (the first panel's series; every panel plots the same methods).
  if (!panels.empty()) {
    const auto& series = panels.front().series;
    for (std::size_t i = 0; i < series.size(); ++i) {
      const double lx = ml + static_cast<double>(i % 2) * (W / 2);
      const double ly = mt + ph + 50 + 18.0 * static_cast<double>(i / 2);
      o += fmt("<line x1=\"%.1f\" ", lx) + fmt("x2=\"%.1f\" ", lx + 20) + fmt("y1=\"%.1f\" ", ly) +
           fmt("y2=\"%.1f\" stroke-width=\"2\" stroke=\"", ly) + colors[i % 10] + "\"/>\n";
      o += fmt("<text x=\"%.1f\" ", lx + 26) + fmt("y=\"%.1f\">", ly + 4) +
           xml_escape(series[i].label) + "</text>\n";
    }
  }
  o += "</svg>\n";
  return o;
}

}  // namespace gradcomp::advise
