// libFuzzer target for the spec parser and the registry behind `gradcomp list` and
// compressor specs: parse_spec, make_codec, make_memory, make_codec_of and Method::parse
// in several run contexts (every scheme's parameters are the core's too). The input is
// the spec string. The only acceptable failure is InvalidArgument; anything else is a
// bug. A spec that parses must print back (canonical form) to a spec that parses to the
// same codec, and a method's canonical spec to the same method.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "gradcomp/error.h"
#include "gradcomp/method.h"
#include "gradcomp/registry.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > 512) return 0;  // specs are short; longer inputs only slow the search
  const std::string_view spec(reinterpret_cast<const char*>(data), size);
  const gradcomp::CodecRegistry& registry = gradcomp::builtin_registry();
  try {
    (void)gradcomp::parse_spec(spec);
  } catch (const gradcomp::InvalidArgument&) {
    return 0;
  }
  try {
    const auto codec = registry.make_codec(spec);
    // The canonical spec names the same codec.
    const auto again = registry.make_codec(codec->spec());
    if (again->spec() != codec->spec() || again->config_tag() != codec->config_tag())
      __builtin_trap();
  } catch (const gradcomp::InvalidArgument&) {
  }
  try {
    (void)registry.make_memory(spec, 64);
  } catch (const gradcomp::InvalidArgument&) {
  }
  try {
    (void)registry.make_codec_of(spec);
  } catch (const gradcomp::InvalidArgument&) {
  }
  using gradcomp::ReducerKind;
  using gradcomp::Topology;
  const gradcomp::MethodContext contexts[] = {
      {},
      {.reducer = ReducerKind::kAllreduce, .momentum = 0.9},
      {.reducer = ReducerKind::kDense, .momentum = 0.0},
      {.topology = Topology::kPsSync, .downlink = gradcomp::Downlink::kCompressed, .momentum = 0.9},
      {.topology = Topology::kPsAsync, .momentum = 0.5, .nesterov = true}};
  for (const gradcomp::MethodContext& c : contexts) {
    try {
      const gradcomp::Method m = gradcomp::Method::parse(spec, c, registry);
      const gradcomp::Method again = gradcomp::Method::parse(m.canonical(), c, registry);
      if (again.canonical() != m.canonical() || again.reducer() != m.reducer() ||
          again.momentum_in_memory() != m.momentum_in_memory())
        __builtin_trap();
      if (!m.is_scheme()) (void)m.make_memory(7);
    } catch (const gradcomp::InvalidArgument&) {
    }
  }
  return 0;
}
