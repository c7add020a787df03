// A minimal JSON writer for JSON-lines outputs: the CLI's --json, training metrics
// (flat objects, arrays of strings or objects). Non-finite numbers are written as null.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace gradcomp {

std::string json_quote(std::string_view s);
std::string json_number(double v);

class JsonObject {
 public:
  JsonObject& add(std::string_view key, std::string_view value);
  JsonObject& add(std::string_view key, const char* value) {
    return add(key, std::string_view(value));
  }
  JsonObject& add(std::string_view key, double value);
  JsonObject& add(std::string_view key, std::uint64_t value);
  JsonObject& add(std::string_view key, std::int64_t value);
  JsonObject& add(std::string_view key, int value) {
    return add(key, static_cast<std::int64_t>(value));
  }
  JsonObject& add(std::string_view key, bool value);
  JsonObject& add(std::string_view key, const std::vector<std::string>& values);
  JsonObject& add(std::string_view key, const std::vector<JsonObject>& values);
  JsonObject& add(std::string_view key, const JsonObject& value);
  JsonObject& add_null(std::string_view key);

  std::string str() const { return "{" + body_ + "}"; }

 private:
  JsonObject& raw(std::string_view key, std::string_view json);
  std::string body_;
};

}  // namespace gradcomp
