// The reducer schemes built into gradcomp (see gradcomp/dist/schemes.h): each scheme's
// description (scheme_descriptions.cc, torch-free: what `gradcomp list` shows) and its
// reducer (one file per scheme), collected under SCHEME-LIST in scheme_descriptions.cc
// and schemes.cc.
#pragma once

#include "gradcomp/dist/schemes.h"

namespace gradcomp::dist {

SchemeDescription powersgd_description();      // scheme_descriptions.cc
SchemeDescription sketched_sgd_description();  // scheme_descriptions.cc
SchemeDescription fetchsgd_description();      // scheme_descriptions.cc

SchemeInfo powersgd_scheme();      // powersgd.cc
SchemeInfo sketched_sgd_scheme();  // sketched_sgd.cc
SchemeInfo fetchsgd_scheme();      // fetchsgd.cc

}  // namespace gradcomp::dist
