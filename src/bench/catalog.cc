#include "bench/catalog.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <vector>

#include "gradcomp/json.h"

namespace gradcomp::bench {

namespace {

constexpr const char* kRule =
    "codecs marked 'error feedback by default' get it unless wrapped in noef(...): "
    "efm(...), momentum-corrected, when the optimizer uses momentum (gradcomp train's "
    "--momentum, except on ps-async; gradcomp.torch.SGD; ExchangeOptions::momentum), "
    "ef(...) otherwise";

struct WrapperDoc {
  const char* name;
  const char* usage;
  const char* help;
};

constexpr WrapperDoc kWrappers[] = {
    {"ef", "ef(SPEC)",
     "error feedback: p = g + e; send encode(p); e = p - decode(msg). Adds a residual to any "
     "codec; the default for biased codecs without momentum"},
    {"efm", "efm(SPEC)",
     "error feedback with momentum correction (DGC's, without masking or warm-up): u = m*u + g; "
     "p = e + u; send encode(p); e = p - decode(msg); the optimizer skips its momentum on "
     "these tensors. The default for biased codecs under momentum SGD"},
    {"noef", "noef(SPEC)",
     "no memory: send encode(g) and forget the error (ablations of biased codecs)"},
};

const char* kind_name(ParamKind k) {
  switch (k) {
    case ParamKind::kInt:
      return "int";
    case ParamKind::kFloat:
      return "float";
    case ParamKind::kChoice:
      return "choice";
    case ParamKind::kBool:
      return "bool";
  }
  return "?";
}

std::string number(double v, ParamKind kind) {
  if (kind == ParamKind::kInt) return std::to_string(static_cast<std::int64_t>(v));
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

std::string join(const std::vector<std::string>& items, const std::string& sep) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : sep) + s;
  return out;
}

// "(0, 1]", "one of: exact, sampled", "0 or 1".
std::string domain(const ParamDef& p) {
  switch (p.kind) {
    case ParamKind::kInt:
    case ParamKind::kFloat:
      return std::string(p.min_exclusive ? "(" : "[") + number(p.min, p.kind) + ", " +
             number(p.max, p.kind) + "]";
    case ParamKind::kChoice:
      return "one of: " + join(p.choices, ", ");
    case ParamKind::kBool:
      return "0 or 1";
  }
  return "";
}

// Every trait spelled out both ways, so a codec with none of them reads clearly.
std::vector<std::string> trait_list(const CodecTraits& t) {
  return {t.linear ? "linear (allreduce)" : "gathered", t.unbiased ? "unbiased" : "biased",
          t.needs_memory ? "error feedback by default" : "no memory by default",
          t.stochastic ? "stochastic" : "deterministic"};
}

std::string default_spec(const CodecRegistry& registry, const CodecInfo& info) {
  return registry.make_codec(info.name)->spec();
}

std::string params_text(const std::vector<ParamDef>& params) {
  if (params.empty()) return "  params: none\n";
  std::string out = "  params:\n";
  std::size_t wk = 0, wt = 0, wd = 0, wr = 0;
  for (const auto& p : params) {
    wk = std::max(wk, p.key.size());
    wt = std::max(wt, std::string(kind_name(p.kind)).size());
    wd = std::max(wd, p.default_value.size());
    wr = std::max(wr, domain(p).size());
  }
  auto pad = [](const std::string& s, std::size_t w) { return s + std::string(w - s.size(), ' '); };
  for (const auto& p : params) {
    out += "    " + pad(p.key, wk) + "  " + pad(kind_name(p.kind), wt) + "  default " +
           pad(p.default_value, wd) + "  " + pad(domain(p), wr) + "  " + p.help + "\n";
  }
  return out;
}

std::vector<JsonObject> params_json(const std::vector<ParamDef>& defs) {
  std::vector<JsonObject> params;
  for (const auto& p : defs) {
    JsonObject o;
    o.add("key", p.key).add("type", kind_name(p.kind)).add("default", p.default_value);
    if (p.kind == ParamKind::kInt || p.kind == ParamKind::kFloat) {
      o.add("min", p.min).add("max", p.max).add("min_exclusive", p.min_exclusive);
    }
    if (p.kind == ParamKind::kChoice) o.add("choices", p.choices);
    o.add("help", p.help);
    params.push_back(std::move(o));
  }
  return params;
}

}  // namespace

std::string describe_codecs_text(const CodecRegistry& registry,
                                 std::span<const SchemeDoc> schemes) {
  std::string out = "Codecs (spec: name[:key=value,...]; " + std::string(kRule) + "):\n";
  for (const CodecInfo* info : registry.all()) {
    const auto traits = trait_list(info->traits);
    out += "\n" + info->name + "  (wire id " + std::to_string(info->wire_id) + ")  " +
           join(traits, ", ") + "\n";
    out += "  " + info->summary + "\n";
    out += "  default: " + default_spec(registry, *info) + "\n";
    out += params_text(info->params);
    if (!info->examples.empty()) out += "  examples: " + join(info->examples, "  ") + "\n";
  }
  out += "\nWrappers (memory):\n";
  for (const auto& w : kWrappers) {
    out += "  " + std::string(w.usage) + std::string(12 - std::string(w.usage).size(), ' ') +
           w.help + "\n";
  }
  out += "  Rule: " + std::string(kRule) + ".\n";
  const auto memories = registry.memories();
  if (!memories.empty()) {
    out +=
        "\nMemories (a compressor of their own with state, written like a codec; their "
        "messages are a codec's):\n";
    for (const MemoryInfo* m : memories) {
      out += "\n" + m->name + "\n  " + m->summary + "\n";
      out += "  default: " + registry.make_memory(m->name, 0)->spec() + "\n";
      out += "  messages: " + registry.make_codec_of(m->name)->spec() + "\n";
      out += params_text(m->params);
      if (!m->examples.empty()) out += "  examples: " + join(m->examples, "  ") + "\n";
    }
  }
  if (!schemes.empty()) {
    out += "\nReducer schemes (a whole exchange protocol; pass to --compressor like a codec):\n";
    for (const SchemeDoc& s : schemes) {
      out += "\n" + s.name + "\n  " + s.summary + "\n  default: " + s.default_spec + "\n";
      out += params_text(s.params);
      if (!s.examples.empty()) out += "  examples: " + join(s.examples, "  ") + "\n";
    }
  }
  return out;
}

std::string describe_codecs_json(const CodecRegistry& registry,
                                 std::span<const SchemeDoc> schemes) {
  std::string out;
  for (const CodecInfo* info : registry.all()) {
    JsonObject traits;
    traits.add("linear", info->traits.linear)
        .add("unbiased", info->traits.unbiased)
        .add("memory", info->traits.needs_memory)
        .add("stochastic", info->traits.stochastic);
    const std::vector<JsonObject> params = params_json(info->params);
    JsonObject o;
    o.add("kind", "codec")
        .add("name", info->name)
        .add("wire_id", static_cast<std::int64_t>(info->wire_id))
        .add("summary", info->summary)
        .add("traits", traits)
        .add("default_spec", default_spec(registry, *info))
        .add("params", params)
        .add("examples", info->examples);
    out += o.str() + "\n";
  }
  for (const auto& w : kWrappers) {
    JsonObject o;
    o.add("kind", "wrapper").add("name", w.name).add("usage", w.usage).add("help", w.help);
    if (std::string(w.name) == "ef") {
      o.add("default_for", "codecs with traits.memory (biased), optimizer without momentum");
    } else if (std::string(w.name) == "efm") {
      o.add("default_for", "codecs with traits.memory (biased), optimizer with momentum");
    }
    out += o.str() + "\n";
  }
  for (const MemoryInfo* m : registry.memories()) {
    JsonObject o;
    o.add("kind", "memory")
        .add("name", m->name)
        .add("summary", m->summary)
        .add("default_spec", registry.make_memory(m->name, 0)->spec())
        .add("message_codec", registry.make_codec_of(m->name)->spec())
        .add("params", params_json(m->params))
        .add("examples", m->examples);
    out += o.str() + "\n";
  }
  for (const SchemeDoc& s : schemes) {
    JsonObject o;
    o.add("kind", "scheme")
        .add("name", s.name)
        .add("summary", s.summary)
        .add("default_spec", s.default_spec)
        .add("params", params_json(s.params))
        .add("examples", s.examples);
    out += o.str() + "\n";
  }
  return out;
}

}  // namespace gradcomp::bench
