// What `gradcomp list` prints: every registered codec with its wire id, traits,
// summary, parameters (default, range or choices, help) and examples, then the
// memory wrappers ef(...) and noef(...) and the rule that picks between them.
#pragma once

#include <string>

#include "gradcomp/registry.h"

namespace gradcomp::bench {

std::string describe_codecs_text(const CodecRegistry& registry);

// One JSON object per line: {"kind":"codec",...} per codec, then
// {"kind":"wrapper",...} for ef and noef.
std::string describe_codecs_json(const CodecRegistry& registry);

}  // namespace gradcomp::bench
