// --metrics FILE.jsonl: one JSON object per line (one per epoch, then a summary), each
// flushed as soon as it is written to FILE.partial beside FILE, so that a killed run keeps
// what it measured there; commit() renames it over FILE when the run ends. A run that
// fails or is killed leaves FILE as it was (a previous run's metrics are not lost) and its
// own lines in FILE.partial.
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
  // Opens FILE.partial, empty or (append: a resumed run continues the one that wrote the
  // metrics) starting with the lines of the run it resumes: FILE.partial when that run did
  // not finish and left one, else FILE. InvalidArgument if it cannot be written.
  explicit MetricsWriter(const std::filesystem::path& file, bool append = false);
  void write(const JsonObject& line);  // one line, flushed
  // The run ended: FILE.partial replaces FILE; lines written after it (the parameter
  // server's, which follow the summary) are appended to FILE itself.
  void commit();

  // Where the lines go until commit(): FILE.partial.
  static std::filesystem::path partial_file(const std::filesystem::path& file);

 private:
  std::filesystem::path file_;
  std::filesystem::path partial_;
  std::ofstream out_;
};

// Median of the values (mean of the middle two for an even count); NaN when empty.
double median(std::vector<double> values);

}  // namespace gradcomp::train
