// --metrics FILE.jsonl: one JSON object per line (one per epoch, then a summary), each
// flushed as soon as it is written so that a killed run keeps what it measured.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

namespace gradcomp::train {

// A flat JSON object built key by key (keys are written as given, values escaped).
class JsonLine {
 public:
  JsonLine& add(std::string_view key, double v);  // non-finite -> null
  JsonLine& add(std::string_view key, std::int64_t v);
  JsonLine& add(std::string_view key, std::uint64_t v);
  JsonLine& add(std::string_view key, int v) { return add(key, static_cast<std::int64_t>(v)); }
  JsonLine& add(std::string_view key, bool v);
  JsonLine& add(std::string_view key, std::string_view v);
  JsonLine& add(std::string_view key, const char* v) { return add(key, std::string_view(v)); }
  std::string str() const { return "{" + body_ + "}"; }

 private:
  void key(std::string_view k);
  std::string body_;
};

std::string json_escape(std::string_view s);  // with the quotes

class MetricsWriter {
 public:
  // Truncates (or creates) the file; InvalidArgument if it cannot be opened.
  explicit MetricsWriter(const std::filesystem::path& file, bool append = false);
  void write(const JsonLine& line);  // one line, flushed

 private:
  std::filesystem::path file_;
  std::ofstream out_;
};

// Median of the values (mean of the middle two for an even count); NaN when empty.
double median(std::vector<double> values);

}  // namespace gradcomp::train
