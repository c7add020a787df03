#include "gradcomp/dist/schemes.h"

#include <algorithm>

#include "gradcomp/error.h"
#include "scheme_list.h"

namespace gradcomp::dist {

// SCHEME-LIST: each scheme's file defines one of these; add it to the list below and its
// description to scheme_descriptions(). (Explicit calls, not static registration objects
// a linker may drop.)

const std::vector<SchemeInfo>& reducer_schemes() {
  static const std::vector<SchemeInfo> schemes = [] {
    std::vector<SchemeInfo> all;
    // SCHEME-LIST entries: all.push_back(<name>_scheme());
    all.push_back(powersgd_scheme());
    all.push_back(sketched_sgd_scheme());
    all.push_back(fetchsgd_scheme());
    std::sort(all.begin(), all.end(),
              [](const SchemeInfo& a, const SchemeInfo& b) { return a.name < b.name; });
    // `gradcomp list` shows scheme_descriptions(): it must name exactly these.
    const std::vector<SchemeDescription>& listed = scheme_descriptions();
    const bool same = std::equal(
        all.begin(), all.end(), listed.begin(), listed.end(),
        [](const SchemeInfo& a, const SchemeDescription& b) { return a.name == b.name; });
    if (!same) throw Error("reducer_schemes() and scheme_descriptions() list different schemes");
    return all;
  }();
  return schemes;
}

const SchemeInfo* find_scheme(std::string_view name) {
  for (const SchemeInfo& s : reducer_schemes()) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

void validate_compressor_spec(std::string_view spec, const CodecRegistry& registry) {
  const SpecNode node = parse_spec(spec);
  if (const SchemeInfo* s = find_scheme(node.name)) {
    (void)canonical_scheme_spec(*s, node);
    return;
  }
  (void)registry.make_memory(spec, 1);
}

}  // namespace gradcomp::dist
