// What a reducer costs this machine's CPU per step: its encode and decode time on real
// buckets, measured by running it in a world of one. The collectives then move nothing,
// so the figures are the reducer's own work -- for a scheme (PowerSGD's products and
// orthogonalisation, Sketched-SGD's momentum pass, sketch and candidate ranking,
// FetchSGD's sketch-space momentum and unsketching) everything it does around its
// rounds. `gradcomp bench scheme` prints it; `gradcomp advise` costs the schemes with it
// (docs/cost-model.md) instead of approximating them by a codec.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "gradcomp/reducer.h"

namespace gradcomp::dist {

struct ReducerTiming {
  double encode_s = 0.0;  // median over the timed steps
  double decode_s = 0.0;
  std::size_t compressed_elements = 0;  // elements of the compressible buckets
  int steps = 0;                        // timed steps
};

// Builds the reducer of `spec` (a scheme or a codec spec, as --compressor takes it) for
// `buckets` over an in-process world of one, runs `warmup` untimed steps then `steps`
// timed ones on a fresh synthetic gradient each step (every compressible bucket
// compressed, as in steady state), and returns the medians of ReduceStats' encode and
// decode seconds. InvalidArgument for a bad spec or steps < 1.
ReducerTiming time_reducer(const std::string& spec, std::span<const BucketShape> buckets,
                           int warmup, int steps, std::uint64_t seed = 1);

}  // namespace gradcomp::dist
