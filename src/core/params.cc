// Parameter declarations and validated values for spec strings.
#include <charconv>
#include <cmath>
#include <limits>
#include <string>

#include "gradcomp/error.h"
#include "gradcomp/registry.h"

namespace gradcomp {

ParamDef int_param(std::string key, std::int64_t def, std::int64_t min, std::int64_t max,
                   std::string help) {
  ParamDef p;
  p.key = std::move(key);
  p.kind = ParamKind::kInt;
  p.default_value = std::to_string(def);
  p.help = std::move(help);
  p.min = static_cast<double>(min);
  p.max = static_cast<double>(max);
  return p;
}

namespace {

std::string format_double(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

std::string format_value(const Params::Value& v) {
  if (const auto* i = std::get_if<std::int64_t>(&v)) return std::to_string(*i);
  if (const auto* d = std::get_if<double>(&v)) return format_double(*d);
  if (const auto* b = std::get_if<bool>(&v)) return *b ? "1" : "0";
  return std::get<std::string>(v);
}

}  // namespace

ParamDef float_param(std::string key, double def, double min, double max, std::string help,
                     bool min_exclusive) {
  ParamDef p;
  p.key = std::move(key);
  p.kind = ParamKind::kFloat;
  p.default_value = format_double(def);
  p.help = std::move(help);
  p.min = min;
  p.max = max;
  p.min_exclusive = min_exclusive;
  return p;
}

ParamDef choice_param(std::string key, std::string def, std::vector<std::string> choices,
                      std::string help) {
  ParamDef p;
  p.key = std::move(key);
  p.kind = ParamKind::kChoice;
  p.default_value = std::move(def);
  p.help = std::move(help);
  p.choices = std::move(choices);
  return p;
}

ParamDef bool_param(std::string key, bool def, std::string help) {
  ParamDef p;
  p.key = std::move(key);
  p.kind = ParamKind::kBool;
  p.default_value = def ? "1" : "0";
  p.help = std::move(help);
  return p;
}

const Params::Value& Params::at(std::string_view key) const {
  for (const auto& [k, v] : values_) {
    if (k == key) return v;
  }
  // A codec asking for a key it did not declare is a programming error.
  throw InvalidArgument("params: no parameter '" + std::string(key) + "' declared");
}

std::int64_t Params::get_int(std::string_view key) const { return std::get<std::int64_t>(at(key)); }
double Params::get_float(std::string_view key) const { return std::get<double>(at(key)); }
const std::string& Params::get_choice(std::string_view key) const {
  return std::get<std::string>(at(key));
}
bool Params::get_bool(std::string_view key) const { return std::get<bool>(at(key)); }

void Params::set(std::string key, Value v) {
  for (auto& [k, old] : values_) {
    if (k == key) {
      old = std::move(v);
      return;
    }
  }
  values_.emplace_back(std::move(key), std::move(v));
}

std::string Params::canonical() const {
  std::string out;
  for (const auto& [k, v] : values_) {
    if (!out.empty()) out += ',';
    out += k + "=" + format_value(v);
  }
  return out;
}

namespace {

[[noreturn]] void bad_value(const std::string& codec, const ParamDef& def, const std::string& text,
                            const std::string& why) {
  throw InvalidArgument(codec + ": " + def.key + "=" + text + ": " + why);
}

std::string range_text(const ParamDef& def) {
  auto fmt = [&](double v) {
    return def.kind == ParamKind::kInt ? std::to_string(static_cast<std::int64_t>(v))
                                       : format_double(v);
  };
  return std::string(def.min_exclusive ? "(" : "[") + fmt(def.min) + ", " + fmt(def.max) + "]";
}

void check_range(const std::string& codec, const ParamDef& def, const std::string& text, double v) {
  const bool low_ok = def.min_exclusive ? v > def.min : v >= def.min;
  if (!low_ok || v > def.max) bad_value(codec, def, text, "out of range " + range_text(def));
}

Params::Value parse_value(const std::string& codec, const ParamDef& def, const std::string& text) {
  const char* first = text.data();
  const char* last = text.data() + text.size();
  switch (def.kind) {
    case ParamKind::kInt: {
      std::int64_t v = 0;
      const auto r = std::from_chars(first, last, v);
      if (r.ec != std::errc() || r.ptr != last) bad_value(codec, def, text, "not an integer");
      check_range(codec, def, text, static_cast<double>(v));
      return v;
    }
    case ParamKind::kFloat: {
      double v = 0;
      const auto r = std::from_chars(first, last, v);
      if (r.ec != std::errc() || r.ptr != last || !std::isfinite(v)) {
        bad_value(codec, def, text, "not a finite number");
      }
      check_range(codec, def, text, v);
      return v;
    }
    case ParamKind::kBool:
      if (text == "1" || text == "true") return true;
      if (text == "0" || text == "false") return false;
      bad_value(codec, def, text, "expected 0, 1, true or false");
    case ParamKind::kChoice:
      for (const auto& c : def.choices) {
        if (c == text) return c;
      }
      {
        std::string known;
        for (const auto& c : def.choices) known += (known.empty() ? "" : ", ") + c;
        bad_value(codec, def, text, "expected one of: " + known);
      }
  }
  bad_value(codec, def, text, "unknown parameter kind");
}

}  // namespace

Params resolve_params(const std::string& owner, std::span<const ParamDef> defs,
                      const SpecNode& node) {
  for (const auto& [key, value] : node.params) {
    bool known = false;
    for (const auto& def : defs) known = known || def.key == key;
    if (!known) {
      std::string keys;
      for (const auto& def : defs) keys += (keys.empty() ? "" : ", ") + def.key;
      throw InvalidArgument(owner + ": unknown parameter '" + key +
                            "'; known: " + (keys.empty() ? "(none)" : keys));
    }
  }
  Params params;
  for (const auto& def : defs) {
    std::string text = def.default_value;
    for (const auto& [key, value] : node.params) {
      if (key == def.key) text = value;
    }
    params.set(def.key, parse_value(owner, def, text));
  }
  return params;
}

Params CodecRegistry::resolve_params(const CodecInfo& info, const SpecNode& node) {
  return gradcomp::resolve_params(info.name, info.params, node);
}

}  // namespace gradcomp
