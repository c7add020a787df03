// Codec and scheme speeds; see speeds.h.
#include "gradcomp/advise/speeds.h"

#include <charconv>
#include <cmath>

#include "gradcomp/error.h"

namespace gradcomp::advise {

namespace {

// The value after "key": in a flat JSON object line, as text ("" when absent).
std::string_view field(std::string_view line, std::string_view key) {
  const std::string quoted = "\"" + std::string(key) + "\"";
  std::size_t at = line.find(quoted);
  if (at == std::string_view::npos) return {};
  at = line.find(':', at + quoted.size());
  if (at == std::string_view::npos) return {};
  ++at;
  while (at < line.size() && line[at] == ' ') ++at;
  if (at < line.size() && line[at] == '"') {
    const std::size_t end = line.find('"', at + 1);
    return end == std::string_view::npos ? std::string_view{} : line.substr(at + 1, end - at - 1);
  }
  std::size_t end = at;
  while (end < line.size() && line[end] != ',' && line[end] != '}') ++end;
  return line.substr(at, end - at);
}

bool number(std::string_view s, double& out) {
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size() && std::isfinite(out);
}

}  // namespace

void SpeedTable::set(const std::string& spec, CodecSpeed speed) { by_spec_[spec] = speed; }

const CodecSpeed* SpeedTable::find(std::string_view spec) const {
  auto it = by_spec_.find(spec);
  return it == by_spec_.end() ? nullptr : &it->second;
}

SpeedTable parse_bench_json(std::string_view text, std::string_view model) {
  SpeedTable t;
  int rows = 0, line_no = 0;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(start, end - start);
    start = end + 1;
    ++line_no;
    const std::string_view kind = field(line, "kind");
    if (kind != "codec" && kind != "scheme") continue;
    double n = 0, enc = 0, dec = 0;
    if (!number(field(line, "n"), n) || n < 1 || !number(field(line, "encode_ms"), enc) ||
        !number(field(line, "decode_ms"), dec)) {
      throw InvalidArgument("codec speeds: line " + std::to_string(line_no) + " is a " +
                            std::string(kind) + " row without numeric n, encode_ms and decode_ms");
    }
    // A negative time would be predicted as a step faster than dense, not refused.
    if (enc < 0 || dec < 0) {
      throw InvalidArgument("codec speeds: line " + std::to_string(line_no) + " (" +
                            std::string(field(line, "spec")) +
                            ") has a negative encode_ms or decode_ms");
    }
    double bytes = 0;
    if (!number(field(line, "message_bytes"), bytes)) bytes = 0;
    CodecSpeed s{enc * 1e-3 / n, dec * 1e-3 / n, "file", n, bytes};
    if (kind == "scheme") {
      s.model = std::string(field(line, "model"));
      if (!model.empty() && s.model != model) continue;
    }
    t.set(std::string(field(line, "spec")), s);
    // A codec row also names its memory's canonical spec, a scheme row its own.
    const std::string_view memory = field(line, kind == "codec" ? "memory" : "canonical");
    if (!memory.empty()) t.set(std::string(memory), s);
    ++rows;
  }
  if (rows == 0) {
    throw InvalidArgument(
        "codec speeds: no codec or scheme rows (expected the output of gradcomp bench codec "
        "--json or gradcomp bench scheme --json)");
  }
  return t;
}

CodecSpeed speed_of(const MethodPlan& plan, const SpeedTable& table) {
  if (plan.traits.dense) return {0.0, 0.0, "none"};
  // A codec, or a scheme timed itself by `gradcomp bench scheme` (on the spot, or in the
  // file).
  if (const CodecSpeed* s = table.find(plan.spec)) return *s;
  if (const CodecSpeed* s = table.find(plan.canonical)) return *s;
  if (!plan.speed_spec.empty()) {
    if (const CodecSpeed* s = table.find(plan.speed_spec)) {
      CodecSpeed out = *s;
      out.source = "as " + plan.speed_spec;
      return out;
    }
  }
  // A scheme's lab constants; nothing (source empty) for a codec missing from the table.
  return {plan.fallback.encode, plan.fallback.decode, plan.fallback.source};
}

CodecSpeed steady_state_decode(const CodecSpeed& speed, const std::string& spec,
                               const CodecRegistry& registry) {
  if (!(speed.bench_n >= 1) || !(speed.bench_message_bytes > 0)) return speed;
  if (registry.find_memory(parse_spec(spec).name) == nullptr) return speed;
  const auto n = static_cast<std::size_t>(speed.bench_n);
  CodecSpeed out = speed;
  out.decode *= static_cast<double>(encoded_bytes(registry, spec, n)) / speed.bench_message_bytes;
  out.bench_message_bytes = static_cast<double>(encoded_bytes(registry, spec, n));
  return out;
}

}  // namespace gradcomp::advise
