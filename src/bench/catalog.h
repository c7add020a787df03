// What `gradcomp list` prints: every registered codec with its wire id, traits,
// summary, parameters (default, range or choices, help) and examples, then the
// memory wrappers ef(...) and noef(...) and the rule that picks between them, then the
// named memories (dgc) with the codec of their messages.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "gradcomp/registry.h"

namespace gradcomp::bench {

// A reducer scheme as `gradcomp list` shows it (gradcomp_dist's SchemeInfo, without the
// dependency on it: this library stays free of c10d).
struct SchemeDoc {
  std::string name;
  std::string summary;
  std::string default_spec;
  std::vector<ParamDef> params;
  std::vector<std::string> examples;
};

std::string describe_codecs_text(const CodecRegistry& registry,
                                 std::span<const SchemeDoc> schemes = {});

// One JSON object per line: {"kind":"codec",...} per codec, then
// {"kind":"wrapper",...} for ef and noef, {"kind":"memory",...} per named memory, then
// {"kind":"scheme",...} per scheme.
std::string describe_codecs_json(const CodecRegistry& registry,
                                 std::span<const SchemeDoc> schemes = {});

}  // namespace gradcomp::bench
