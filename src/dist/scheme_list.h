// The reducer schemes built into gradcomp (see gradcomp/dist/schemes.h): each scheme's
// reducer (one file per scheme), paired with the description the core registers
// (src/core/scheme_descriptions.cc), collected under SCHEME-LIST in schemes.cc.
#pragma once

#include <string_view>

#include "gradcomp/dist/schemes.h"

namespace gradcomp::dist {

// The registered description of a built-in scheme (schemes.cc).
const SchemeDescription& described(std::string_view name);

SchemeInfo powersgd_scheme();      // powersgd.cc
SchemeInfo sketched_sgd_scheme();  // sketched_sgd.cc
SchemeInfo fetchsgd_scheme();      // fetchsgd.cc

}  // namespace gradcomp::dist
