// The reducer schemes built into gradcomp (see gradcomp/dist/schemes.h), one function
// per scheme file, collected by reducer_schemes() under SCHEME-LIST in schemes.cc.
#pragma once

#include "gradcomp/dist/schemes.h"

namespace gradcomp::dist {

SchemeInfo powersgd_scheme();      // powersgd.cc
SchemeInfo sketched_sgd_scheme();  // sketched_sgd.cc
SchemeInfo fetchsgd_scheme();      // fetchsgd.cc

}  // namespace gradcomp::dist
