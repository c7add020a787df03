// --metrics FILE.jsonl: one JSON object per line (one per epoch, then a summary), each
// flushed as soon as it is written so that a killed run keeps what it measured.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "gradcomp/json.h"

namespace gradcomp::train {

class MetricsWriter {
 public:
  // Truncates (or creates) the file; InvalidArgument if it cannot be opened.
  explicit MetricsWriter(const std::filesystem::path& file, bool append = false);
  void write(const JsonObject& line);  // one line, flushed

 private:
  std::filesystem::path file_;
  std::ofstream out_;
};

// Median of the values (mean of the middle two for an even count); NaN when empty.
double median(std::vector<double> values);

}  // namespace gradcomp::train
