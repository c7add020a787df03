#include "gradcomp/dist/schemes.h"

#include <algorithm>

#include "gradcomp/error.h"
#include "scheme_list.h"

namespace gradcomp::dist {

// SCHEME-LIST: each scheme's file defines one of these; add it to the list below and its
// description to register_builtin_schemes (src/core/scheme_descriptions.cc). (Explicit calls, not
// static registration objects a linker may drop.)

const std::vector<SchemeInfo>& reducer_schemes() {
  static const std::vector<SchemeInfo> schemes = [] {
    std::vector<SchemeInfo> all;
    // SCHEME-LIST entries: all.push_back(<name>_scheme());
    all.push_back(powersgd_scheme());
    all.push_back(sketched_sgd_scheme());
    all.push_back(fetchsgd_scheme());
    std::sort(all.begin(), all.end(),
              [](const SchemeInfo& a, const SchemeInfo& b) { return a.name < b.name; });
    // A Method knows the registry's schemes: each must have its reducer here.
    const std::vector<const SchemeDescription*> listed = builtin_registry().schemes();
    const bool same = std::equal(
        all.begin(), all.end(), listed.begin(), listed.end(),
        [](const SchemeInfo& a, const SchemeDescription* b) { return a.name == b->name; });
    if (!same) throw Error("reducer_schemes() and the registry's schemes() differ");
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

const SchemeDescription& described(std::string_view name) {
  const SchemeDescription* d = builtin_registry().find_scheme(name);
  if (d == nullptr) throw Error("scheme " + std::string(name) + " has no description");
  return *d;
}

}  // namespace gradcomp::dist
