// The advisor's outputs: an aligned table, JSON lines, and a small hand-written SVG
// line plot (no dependencies). Torch-free.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "gradcomp/advise/step_model.h"

namespace gradcomp::advise {

// "1 Gbit/s", "100 Mbit/s" from bytes per second.
std::string format_rate(double bytes_per_second);
// "21.49 MB", "175 kB", "8 B".
std::string format_bytes(double bytes);

// The ranked table with a header line describing the scenario.
std::string format_table(const std::vector<Prediction>& rows, const std::string& scenario_line);

// One JSON object per method (ranked order), each with the scenario's fields.
std::string format_json(const std::vector<Prediction>& rows, const std::string& model,
                        const Scenario& scenario);

struct Series {
  std::string label;
  std::vector<std::pair<double, double>> points;  // (x, y)
};

struct Panel {
  std::string title;
  std::string x_label;
  std::string y_label;
  bool log_x = true;
  bool log_y = true;
  std::vector<Series> series;
};

// Panels side by side, a legend under them; non-finite or non-positive points (on a
// log axis) are skipped.
std::string svg_plot(const std::vector<Panel>& panels, const std::string& title);

}  // namespace gradcomp::advise
