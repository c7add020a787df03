#include "gradcomp/registry.h"

#include <string>

#include "gradcomp/error.h"

namespace gradcomp {

namespace {

bool is_wrapper(std::string_view name) { return name == "ef" || name == "efm" || name == "noef"; }

}  // namespace

void CodecRegistry::add(CodecInfo info) {
  if (info.name.empty() || !info.make) {
    throw InvalidArgument("codec registry: a codec needs a name and a factory");
  }
  if (codecs_.count(info.name) != 0 || memories_.count(info.name) != 0 ||
      schemes_.count(info.name) != 0) {
    throw InvalidArgument("codec registry: '" + info.name + "' registered twice");
  }
  if (const CodecInfo* other = find_wire_id(info.wire_id)) {
    throw InvalidArgument("codec registry: wire id " + std::to_string(info.wire_id) + " of '" +
                          info.name + "' already taken by '" + other->name + "'");
  }
  std::string name = info.name;
  codecs_.emplace(std::move(name), std::move(info));
}

const CodecInfo* CodecRegistry::find(std::string_view name) const {
  const auto it = codecs_.find(name);
  return it == codecs_.end() ? nullptr : &it->second;
}

const CodecInfo* CodecRegistry::find_wire_id(std::uint16_t id) const {
  for (const auto& [name, info] : codecs_) {
    if (info.wire_id == id) return &info;
  }
  return nullptr;
}

std::vector<const CodecInfo*> CodecRegistry::all() const {
  std::vector<const CodecInfo*> out;
  out.reserve(codecs_.size());
  for (const auto& [name, info] : codecs_) out.push_back(&info);
  return out;
}

std::string CodecRegistry::known_names() const {
  std::string out;
  for (const auto& [name, info] : codecs_) out += (out.empty() ? "" : ", ") + name;
  return out;
}

void CodecRegistry::add_memory(MemoryInfo info) {
  if (info.name.empty() || !info.codec_spec || !info.make) {
    throw InvalidArgument("codec registry: a memory needs a name, a codec_spec and a factory");
  }
  if (is_wrapper(info.name) || codecs_.count(info.name) != 0 || memories_.count(info.name) != 0 ||
      schemes_.count(info.name) != 0) {
    throw InvalidArgument("codec registry: '" + info.name + "' registered twice");
  }
  std::string name = info.name;
  memories_.emplace(std::move(name), std::move(info));
}

void CodecRegistry::add_scheme(SchemeDescription info) {
  if (info.name.empty() || is_wrapper(info.name) || codecs_.count(info.name) != 0 ||
      memories_.count(info.name) != 0 || schemes_.count(info.name) != 0) {
    throw InvalidArgument("codec registry: scheme '" + info.name + "' registered twice");
  }
  std::string name = info.name;
  schemes_.emplace(std::move(name), std::move(info));
}

const SchemeDescription* CodecRegistry::find_scheme(std::string_view name) const {
  const auto it = schemes_.find(name);
  return it == schemes_.end() ? nullptr : &it->second;
}

std::vector<const SchemeDescription*> CodecRegistry::schemes() const {
  std::vector<const SchemeDescription*> out;
  out.reserve(schemes_.size());
  for (const auto& [name, info] : schemes_) out.push_back(&info);
  return out;
}

std::string canonical_scheme_spec(const SchemeDescription& info, const SpecNode& node) {
  const std::string canonical = resolve_params(info.name, info.params, node).canonical();
  return canonical.empty() ? info.name : info.name + ":" + canonical;
}

const MemoryInfo* CodecRegistry::find_memory(std::string_view name) const {
  const auto it = memories_.find(name);
  return it == memories_.end() ? nullptr : &it->second;
}

std::vector<const MemoryInfo*> CodecRegistry::memories() const {
  std::vector<const MemoryInfo*> out;
  out.reserve(memories_.size());
  for (const auto& [name, info] : memories_) out.push_back(&info);
  return out;
}

std::shared_ptr<const Codec> CodecRegistry::make_codec(const SpecNode& node) const {
  if (node.inner || is_wrapper(node.name)) {
    throw InvalidArgument("'" + node.name +
                          "(...)' wraps a codec in a memory; a plain codec spec is needed here");
  }
  if (find_memory(node.name) != nullptr) {
    throw InvalidArgument("'" + node.name +
                          "' is a memory with its own state, not a codec: write it on its own "
                          "as the compressor (e.g. --compressor " +
                          node.name + "), not inside ef(...), efm(...) or noef(...)");
  }
  const CodecInfo* info = find(node.name);
  if (info == nullptr) {
    std::string memories;
    for (const auto& [name, m] : memories_)
      memories += (memories.empty() ? "; memories: " : ", ") + name;
    throw InvalidArgument("unknown codec '" + node.name + "'; known: " + known_names() +
                          " (wrappers: ef, efm, noef" + memories + ")");
  }
  const Params params = resolve_params(*info, node);
  const std::string canonical = params.canonical();
  CodecIdentity identity{info->name, info->wire_id,
                         canonical.empty() ? info->name : info->name + ":" + canonical};
  return info->make(std::move(identity), params);
}

std::shared_ptr<const Codec> CodecRegistry::make_codec(std::string_view spec) const {
  return make_codec(parse_spec(spec));
}

namespace {

// The node a wrapper spec wraps; throws for a wrapper written without its codec.
const SpecNode& wrapped_codec(const SpecNode& node, std::string_view spec) {
  if (!node.inner) {
    throw InvalidArgument("spec '" + std::string(spec) + "': " + node.name +
                          " takes a codec in parentheses, e.g. " + node.name + "(topk)");
  }
  return *node.inner;
}

}  // namespace

std::pair<Params, std::shared_ptr<const Codec>> CodecRegistry::memory_codec(
    const MemoryInfo& info, const SpecNode& node, std::string_view spec) const {
  if (node.inner) {
    throw InvalidArgument("spec '" + std::string(spec) + "': " + info.name +
                          " is a memory of its own and wraps no codec (write " + info.name +
                          ":key=value,...)");
  }
  Params params = gradcomp::resolve_params(info.name, info.params, node);
  const std::string codec_spec = info.codec_spec(params);
  try {
    auto codec = make_codec(codec_spec);
    return {std::move(params), std::move(codec)};
  } catch (const InvalidArgument& e) {
    // A codec_spec the registry rejects is the memory's bug, not the user's: say whose.
    throw InvalidArgument(info.name + ": its message codec '" + codec_spec +
                          "' does not build: " + e.what());
  }
}

std::shared_ptr<const Codec> CodecRegistry::make_codec_of(std::string_view compressor_spec) const {
  const SpecNode node = parse_spec(compressor_spec);
  if (is_wrapper(node.name)) return make_codec(wrapped_codec(node, compressor_spec));
  if (const MemoryInfo* m = find_memory(node.name)) {
    return memory_codec(*m, node, compressor_spec).second;
  }
  return make_codec(node);
}

std::unique_ptr<Memory> CodecRegistry::make_memory(std::string_view spec, std::size_t n) const {
  return make_memory(parse_spec(spec), spec, n);
}

std::unique_ptr<Memory> CodecRegistry::make_memory(const SpecNode& node, std::string_view spec,
                                                   std::size_t n) const {
  if (const MemoryInfo* m = find_memory(node.name)) {
    auto [params, codec] = memory_codec(*m, node, spec);
    return m->make(params, std::move(codec), n);
  }
  if (is_wrapper(node.name)) {
    auto codec = make_codec(wrapped_codec(node, spec));
    if (node.name == "ef") return make_error_feedback(std::move(codec), n);
    if (node.name == "efm") return make_momentum_error_feedback(std::move(codec), n);
    return make_pass_through(std::move(codec), n);
  }
  auto codec = make_codec(node);
  return codec->traits().needs_memory ? make_error_feedback(std::move(codec), n)
                                      : make_pass_through(std::move(codec), n);
}

std::string CodecRegistry::with_default_memory(std::string_view spec, double momentum) const {
  const SpecNode node = parse_spec(spec);
  if (find(node.name) == nullptr || !make_codec(node)->traits().needs_memory) {
    return std::string(spec);
  }
  return std::string(momentum > 0.0 ? "efm(" : "ef(") + std::string(spec) + ")";
}

const CodecRegistry& builtin_registry() {
  static const CodecRegistry registry = [] {
    CodecRegistry r;
    register_builtin_codecs(r);
    return r;
  }();
  return registry;
}

}  // namespace gradcomp
