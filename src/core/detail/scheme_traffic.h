// Each built-in scheme's traffic hook (SchemeDescription::traffic, gradcomp/scheme_traffic.h),
// registered with its description by scheme_descriptions.cc.
#pragma once

#include <cstddef>
#include <span>

#include "gradcomp/layout.h"
#include "gradcomp/registry.h"
#include "gradcomp/scheme_traffic.h"

namespace gradcomp::detail {

// PowerSGD's size rule (src/dist/powersgd.cc): a rows x cols matrix is factored at
// rank r when its factors are under half its size; otherwise it is averaged dense.
inline bool powersgd_worth(std::size_t rows, std::size_t cols, std::size_t rank) {
  return rows * cols > 2 * rank * (rows + cols);
}

SchemeTraffic powersgd_traffic(const Params& p, std::span<const BucketPlan> buckets);
SchemeTraffic sketched_sgd_traffic(const Params& p, std::span<const BucketPlan> buckets);
SchemeTraffic fetchsgd_traffic(const Params& p, std::span<const BucketPlan> buckets);

}  // namespace gradcomp::detail
