// Each built-in scheme's traffic hook (SchemeDescription::traffic, gradcomp/scheme_traffic.h),
// registered with its description by scheme_descriptions.cc.
#pragma once

#include <cstddef>
#include <span>

#include "gradcomp/layout.h"
#include "gradcomp/registry.h"
#include "gradcomp/scheme_traffic.h"

namespace gradcomp::detail {

SchemeTraffic powersgd_traffic(const Params& p, std::span<const BucketPlan> buckets);
SchemeTraffic sketched_sgd_traffic(const Params& p, std::span<const BucketPlan> buckets);
SchemeTraffic fetchsgd_traffic(const Params& p, std::span<const BucketPlan> buckets);

}  // namespace gradcomp::detail
