#include "train/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>

#include "gradcomp/error.h"

namespace gradcomp::train {

std::string json_escape(std::string_view s) {
  std::string out = "\"";
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (ch) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (c < 0x20) {
          static constexpr char kHex[] = "0123456789abcdef";
          out += "\\u00";
          out += kHex[c >> 4];
          out += kHex[c & 15];
        } else {
          out += ch;
        }
    }
  }
  return out + "\"";
}

void JsonLine::key(std::string_view k) {
  if (!body_.empty()) body_ += ",";
  body_ += json_escape(k);
  body_ += ":";
}

JsonLine& JsonLine::add(std::string_view k, double v) {
  key(k);
  if (!std::isfinite(v)) {
    body_ += "null";
  } else {
    char buf[32];
    const auto r = std::to_chars(buf, buf + sizeof(buf), v);  // shortest round trip
    body_.append(buf, r.ptr);
  }
  return *this;
}

JsonLine& JsonLine::add(std::string_view k, std::int64_t v) {
  key(k);
  body_ += std::to_string(v);
  return *this;
}

JsonLine& JsonLine::add(std::string_view k, std::uint64_t v) {
  key(k);
  body_ += std::to_string(v);
  return *this;
}

JsonLine& JsonLine::add(std::string_view k, bool v) {
  key(k);
  body_ += v ? "true" : "false";
  return *this;
}

JsonLine& JsonLine::add(std::string_view k, std::string_view v) {
  key(k);
  body_ += json_escape(v);
  return *this;
}

MetricsWriter::MetricsWriter(const std::filesystem::path& file, bool append)
    : file_(file), out_(file, append ? std::ios::app : std::ios::trunc) {
  if (!out_) throw InvalidArgument("metrics: cannot open " + file.string() + " for writing");
}

void MetricsWriter::write(const JsonLine& line) {
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
