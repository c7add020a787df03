// libFuzzer target for the spec parser and the registry behind `gradcomp list` and
// compressor specs: parse_spec, make_codec, make_memory and make_codec_of (the torch-free
// part of dist::validate_compressor_spec; the scheme specs, powersgd and fetchsgd, are
// parsed by gradcomp_dist, which needs LibTorch). The input is the spec string. The only
// acceptable failure is InvalidArgument; anything else is a bug. A spec that parses must
// print back (canonical form) to a spec that parses to the same codec.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "gradcomp/error.h"
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
  return 0;
}
