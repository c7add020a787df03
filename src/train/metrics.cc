#include "train/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>

#include "gradcomp/error.h"

namespace gradcomp::train {

MetricsWriter::MetricsWriter(const std::filesystem::path& file, bool append)
    : file_(file), out_(file, append ? std::ios::app : std::ios::trunc) {
  if (!out_) throw InvalidArgument("metrics: cannot open " + file.string() + " for writing");
}

void MetricsWriter::write(const JsonObject& line) {
  out_ << line.str() << '\n';
  out_.flush();
  if (!out_) throw InvalidArgument("metrics: write to " + file_.string() + " failed");
}

double median(std::vector<double> values) {
  if (values.empty()) return std::numeric_limits<double>::quiet_NaN();
  const std::size_t mid = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid), values.end());
  const double hi = values[mid];
  if (values.size() % 2 == 1) return hi;
  const double lo =
      *std::max_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid));
  return (lo + hi) / 2.0;
}

}  // namespace gradcomp::train
