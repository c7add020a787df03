#include "gradcomp/json.h"

#include <charconv>
#include <cmath>
#include <cstdio>

namespace gradcomp {

std::string json_quote(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[32];
  // Whole numbers (counts, byte sizes) without an exponent; the rest in the shortest
  // form that reads back as the same double.
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    std::snprintf(buf, sizeof buf, "%.0f", v);
    return buf;
  }
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

JsonObject& JsonObject::raw(std::string_view key, std::string_view json) {
  if (!body_.empty()) body_ += ',';
  body_ += json_quote(key);
  body_ += ':';
  body_ += json;
  return *this;
}

JsonObject& JsonObject::add(std::string_view key, std::string_view value) {
  return raw(key, json_quote(value));
}
JsonObject& JsonObject::add(std::string_view key, double value) {
  return raw(key, json_number(value));
}
JsonObject& JsonObject::add(std::string_view key, std::uint64_t value) {
  return raw(key, std::to_string(value));
}
JsonObject& JsonObject::add(std::string_view key, std::int64_t value) {
  return raw(key, std::to_string(value));
}
JsonObject& JsonObject::add(std::string_view key, bool value) {
  return raw(key, value ? "true" : "false");
}
JsonObject& JsonObject::add(std::string_view key, const std::vector<std::string>& values) {
  std::string a = "[";
  for (const auto& v : values) a += (a.size() > 1 ? "," : "") + json_quote(v);
  return raw(key, a + "]");
}
JsonObject& JsonObject::add(std::string_view key, const std::vector<JsonObject>& values) {
  std::string a = "[";
  for (const auto& v : values) a += (a.size() > 1 ? "," : "") + v.str();
  return raw(key, a + "]");
}
JsonObject& JsonObject::add(std::string_view key, const JsonObject& value) {
  return raw(key, value.str());
}
JsonObject& JsonObject::add_null(std::string_view key) { return raw(key, "null"); }

}  // namespace gradcomp
