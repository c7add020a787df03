// ps-async's momentum rule (gradcomp/dist/ps.h): the servers take the momentum that
// asynchrony adds out of the momentum they apply.
#include <algorithm>
#include <cstdio>
#include <string>

#include "gradcomp/dist/ps.h"
#include "gradcomp/error.h"

namespace gradcomp::dist {

AsyncMomentum parse_async_momentum(std::string_view name) {
  if (name == "compensate") return AsyncMomentum::kCompensate;
  if (name == "as-given") return AsyncMomentum::kAsGiven;
  throw InvalidArgument("--async-momentum " + std::string(name) +
                        ": unknown (known: compensate, as-given)");
}

const char* to_string(AsyncMomentum rule) {
  return rule == AsyncMomentum::kCompensate ? "compensate" : "as-given";
}

AsyncServerOptimizer async_server_optimizer(const PsConfig& c) {
  AsyncServerOptimizer o;
  o.momentum = c.momentum;
  o.implicit = c.workers > 0 ? 1.0 - 1.0 / c.workers : 0.0;
  // Nothing to take out without momentum; m >= 1 has no long-run step to keep.
  if (c.async_momentum == AsyncMomentum::kAsGiven || c.momentum <= 0.0 || c.momentum >= 1.0) {
    return o;
  }
  o.momentum = std::max(0.0, c.momentum - o.implicit);
  o.lr_scale = (1.0 - o.momentum) / (1.0 - c.momentum);
  return o;
}

std::string describe_async_optimizer(const PsConfig& c) {
  const AsyncServerOptimizer o = async_server_optimizer(c);
  char text[160];
  if (o.lr_scale == 1.0 && o.momentum == c.momentum) {
    std::snprintf(text, sizeof text, ", server momentum %g as given", o.momentum);
  } else {
    std::snprintf(text, sizeof text,
                  ", server momentum %g at %.3gx lr (asynchrony's %.3g taken out)", o.momentum,
                  o.lr_scale, o.implicit);
  }
  return text;
}

}  // namespace gradcomp::dist
