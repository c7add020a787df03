#include "train/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>

#include "gradcomp/error.h"

namespace gradcomp::train {

std::filesystem::path MetricsWriter::partial_file(const std::filesystem::path& file) {
  std::filesystem::path p = file;
  p += ".partial";
  return p;
}

MetricsWriter::MetricsWriter(const std::filesystem::path& file, bool append)
    : file_(file), partial_(partial_file(file)) {
  std::error_code ec;
  if (std::filesystem::is_directory(file_, ec)) {
    throw InvalidArgument("metrics: " + file_.string() + " is a directory");
  }
  if (append && !std::filesystem::exists(partial_, ec) && std::filesystem::exists(file_, ec)) {
    std::filesystem::copy_file(file_, partial_, std::filesystem::copy_options::overwrite_existing,
                               ec);
    if (ec) {
      throw InvalidArgument("metrics: cannot copy " + file_.string() + " to " + partial_.string() +
                            ": " + ec.message());
    }
  }
  out_.open(partial_, append ? std::ios::app : std::ios::trunc);
  if (!out_) throw InvalidArgument("metrics: cannot open " + partial_.string() + " for writing");
}

void MetricsWriter::write(const JsonObject& line) {
  out_ << line.str() << '\n';
  out_.flush();
  if (!out_) throw InvalidArgument("metrics: write to " + partial_.string() + " failed");
}

void MetricsWriter::commit() {
  out_.close();
  if (out_.fail()) throw InvalidArgument("metrics: write to " + partial_.string() + " failed");
  std::error_code ec;
  std::filesystem::rename(partial_, file_, ec);
  if (ec) {
    throw InvalidArgument("metrics: cannot rename " + partial_.string() + " to " + file_.string() +
                          ": " + ec.message());
  }
  partial_ = file_;
  out_.clear();
  out_.open(file_, std::ios::app);
  if (!out_) throw InvalidArgument("metrics: cannot open " + file_.string() + " for writing");
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
