// Pieces shared by the count-sketch reducer schemes (sketched_sgd.cc, fetchsgd.cc) and
// Sketched-SGD at the parameter server (ps/sketch_plan.cc): bucket-size checks,
// per-bucket sketch geometry, the common parameters, Sketched-SGD's hashes and worker
// accumulation.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "gradcomp/error.h"
#include "gradcomp/kernels/count_sketch.h"
#include "gradcomp/kernels/select.h"
#include "gradcomp/kernels/sketch_geometry.h"
#include "gradcomp/reducer.h"
#include "gradcomp/registry.h"
#include "gradcomp/rng.h"
#include "gradcomp/step_context.h"

namespace gradcomp::dist::sketch_scheme {

// The geometry as the user gave it, and k for a bucket (the core's, shared with the
// start-of-run check: detail/sketch_geometry.h).
using Geometry = kernels::SketchGeometry;
inline Geometry geometry_from(const Params& p) { return kernels::sketch_geometry_from(p); }
inline std::size_t k_for(const Geometry& g, std::size_t n) { return kernels::sketch_k_for(g, n); }

inline void check_buckets(std::span<const BucketRef> buckets, std::span<const BucketShape> shapes,
                          const char* op) {
  if (buckets.size() != shapes.size()) {
    throw InvalidArgument(std::string(op) + ": " + std::to_string(buckets.size()) +
                          " buckets, reducer built for " + std::to_string(shapes.size()));
  }
  for (std::size_t b = 0; b < buckets.size(); ++b) {
    if (buckets[b].grad.size() != shapes[b].numel) {
      throw InvalidArgument(std::string(op) + ": bucket " + std::to_string(b) + " has " +
                            std::to_string(buckets[b].grad.size()) + " elements, expected " +
                            std::to_string(shapes[b].numel));
    }
  }
}

// Sketched-SGD's hashes for one bucket (or parameter-server key) and step: keyed by
// (seed, step, bucket), shared by every rank, new every step (see sketched_sgd.cc).
inline constexpr std::uint32_t kSketchedSgdHashStream = 0x55C4u;
inline kernels::SketchHash sketched_sgd_hash(std::uint64_t seed, std::uint64_t step,
                                             std::uint32_t bucket, std::uint32_t rows,
                                             std::uint32_t cols) {
  StepContext c;
  c.seed = seed;
  c.step = step;
  c.bucket = bucket;
  return kernels::SketchHash(
      CounterRng::for_step(c, RngScope::kShared, kSketchedSgdHashStream).key(), rows, cols);
}

// Sketched-SGD's worker state update: u <- m*u + g ; v <- v + u.
inline void accumulate_momentum(std::span<float> u, std::span<float> v, std::span<const float> g,
                                float m) {
  float* pu = u.data();
  float* pv = v.data();
  const float* pg = g.data();
  for (std::size_t i = 0; i < g.size(); ++i) {
    pu[i] = m * pu[i] + pg[i];
    pv[i] += pu[i];
  }
}

}  // namespace gradcomp::dist::sketch_scheme
