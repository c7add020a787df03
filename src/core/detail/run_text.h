// Numbers as the run's header and warnings print them (Method::schedule, start_warnings
// and the registry entries' hooks that write them).
#pragma once

#include <cmath>
#include <cstdio>
#include <string>

namespace gradcomp::detail {

// printf's %g with `digits` significant digits.
inline std::string number_text(double v, int digits = 4) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", digits, v);
  return buf;
}

// A ratio: whole numbers from 100 on ("1024x", not "1.02e+03x").
inline std::string ratio_text(double r) {
  return r >= 100 ? number_text(std::round(r), 15) : number_text(r, 3);
}

// A step count: whole when it is one ("58"), else 4 digits ("58.5").
inline std::string steps_text(double steps) {
  return std::abs(steps - std::round(steps)) < 1e-9 ? number_text(steps, 12)
                                                    : number_text(steps, 4);
}

}  // namespace gradcomp::detail
