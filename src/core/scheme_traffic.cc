// What each built-in scheme sends per step (SchemeDescription::traffic), from its
// parameters and the rules of its reducer in src/dist (powersgd.cc, sketched_sgd.cc,
// fetchsgd.cc, ps/sketch_plan.h).
#include "detail/scheme_traffic.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>

#include "gradcomp/kernels/count_sketch.h"
#include "gradcomp/kernels/low_rank.h"
#include "gradcomp/kernels/sketch_geometry.h"

namespace gradcomp::detail {

using kernels::sketch_columns;
using kernels::sketch_geometry_from;
using kernels::sketch_k_for;
using kernels::SketchGeometry;

namespace {

constexpr double kF32 = 4.0;

// Per element, one core, for a scheme that was not timed. Network lab
// (docs/measurements/network-lab.md), MLP at 1 Gbit/s, 4 workers on 2 cores (so each
// figure is halved for one core), 3.56 M compressed elements: powersgd:rank=2 encode
// 4.3 ms, decode 2.6 ms; fetchsgd (5 rows) encode 37.9 ms, decode 71.4 ms. PowerSGD's
// products scale with the rank. The sketch schemes are costed as their count sketch codec
// (SchemeTraffic::speed_spec) when that was measured; these figures only when it was not.
constexpr double kLabElements = 3.56e6;
constexpr double kLabOversubscription = 2.0;
constexpr double kPowerSgdEncode = 4.3e-3 / kLabOversubscription / kLabElements;  // rank 2
constexpr double kPowerSgdDecode = 2.6e-3 / kLabOversubscription / kLabElements;
constexpr double kSketchEncode = 37.9e-3 / kLabOversubscription / kLabElements;
constexpr double kSketchDecode = 71.4e-3 / kLabOversubscription / kLabElements;

// A share for a spec string: 3 significant digits (0.09, not 0.0900003), within (0, 1].
std::string format_share(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", std::clamp(x, 1e-6, 1.0));
  return buf;
}

// What a count-sketch scheme's first round holds, over the buckets: every compressed
// bucket's sketch (rows x sketch_columns cells), and the buckets left dense.
struct SketchSums {
  std::uint32_t rows = 0;
  double cells = 0.0;
  double dense = 0.0;       // elements sent as fp32
  double topk = 0.0;        // coordinates applied: k per bucket
  double candidates = 0.0;  // sketched-sgd: min(n, p2*k) per bucket
  std::size_t compressed = 0;
};

// p2: sketched-sgd's candidates per coordinate applied; 0 for fetchsgd (no second round).
SketchSums sketch_sums(const Params& p, std::span<const BucketPlan> buckets, std::size_t p2) {
  const SketchGeometry geo = sketch_geometry_from(p);
  SketchSums s;
  s.rows = geo.rows;
  for (const BucketPlan& b : buckets) {
    if (b.compressible && b.numel > 0) {
      const std::uint32_t cols = sketch_columns(b.numel, geo.rows, geo.cols, geo.table);
      const std::size_t k = sketch_k_for(geo, b.numel);
      s.cells += static_cast<double>(geo.rows) * cols;
      s.topk += static_cast<double>(k);
      if (p2 > 0) s.candidates += static_cast<double>(std::min(b.numel, p2 * k));
      s.compressed += b.numel;
    } else {
      s.dense += static_cast<double>(b.numel);
    }
  }
  return s;
}

// The count sketch codec whose measured speed approximates a sketch scheme's: the same
// rows, table share and decoded share (building the sketch is its encode, ranking every
// coordinate's estimate its decode; the schemes' momentum and error passes are left out).
// `decoded`: the coordinates whose estimates the scheme ranks.
std::string sketch_speed_spec(const SketchSums& s, double decoded) {
  if (s.compressed == 0) return {};
  const double n = static_cast<double>(s.compressed);
  return "sketch:rows=" + std::to_string(s.rows) +
         ",ratio=" + format_share(std::min(1.0, s.cells / n)) +
         ",heavy=" + format_share(std::max(std::min(n, decoded) / n, 1e-6));
}

}  // namespace

SchemeTraffic powersgd_traffic(const Params& p, std::span<const BucketPlan> buckets) {
  const auto rank = static_cast<std::size_t>(p.get_int("rank"));
  SchemeTraffic t;
  double ps = 0.0, qs = 0.0, dense = 0.0;
  for (const BucketPlan& b : buckets) {
    const std::size_t cols = b.rows > 0 ? b.numel / b.rows : 0;
    if (b.compressible && b.rows > 0 && kernels::low_rank_pays(b.rows, cols, rank)) {
      ps += static_cast<double>(b.rows * rank);
      qs += static_cast<double>(cols * rank);
      t.compressed_elements += b.numel;
      ++t.compressed_buckets;
    } else {
      dense += static_cast<double>(b.numel);
    }
  }
  t.rounds.push_back({"P + dense", Collective::kAllreduce, kF32 * (ps + dense)});
  if (qs > 0) t.rounds.push_back({"Q", Collective::kAllreduce, kF32 * qs});
  t.server_note = "powersgd runs on the allreduce topology only";
  const double r = static_cast<double>(rank) / 2.0;
  t.fallback = {kPowerSgdEncode * r, kPowerSgdDecode * r, "lab constant"};
  return t;
}

SchemeTraffic sketched_sgd_traffic(const Params& p, std::span<const BucketPlan> buckets) {
  const SketchSums s = sketch_sums(p, buckets, static_cast<std::size_t>(p.get_int("p2")));
  SchemeTraffic t;
  t.compressed_elements = s.compressed;
  t.rounds.push_back({"sketches + dense", Collective::kAllreduce, kF32 * (s.cells + s.dense)});
  if (s.candidates > 0) {
    t.rounds.push_back({"candidates' values", Collective::kAllreduce, kF32 * s.candidates});
  }
  // ps/sketch_plan.h: push sketches, reply candidates (u32); push values, reply top-k
  // (index + value).
  t.server_rounds.push_back({"sketches + dense, candidates", kF32 * (s.cells + s.dense),
                             kF32 * s.dense + 4.0 * s.candidates});
  t.server_rounds.push_back({"candidates' values, top-k", kF32 * s.candidates, 8.0 * s.topk});
  t.speed_spec = sketch_speed_spec(s, s.candidates);
  t.fallback = {kSketchEncode, kSketchDecode, "fetchsgd's lab constant"};
  return t;
}

SchemeTraffic fetchsgd_traffic(const Params& p, std::span<const BucketPlan> buckets) {
  const SketchSums s = sketch_sums(p, buckets, 0);
  SchemeTraffic t;
  t.compressed_elements = s.compressed;
  t.rounds.push_back({"sketches + dense", Collective::kAllreduce, kF32 * (s.cells + s.dense)});
  t.server_note = "fetchsgd runs on the allreduce topology only";
  t.speed_spec = sketch_speed_spec(s, s.topk);
  t.fallback = {kSketchEncode, kSketchDecode, "lab constant"};
  return t;
}

}  // namespace gradcomp::detail

namespace gradcomp {

const char* to_string(Collective kind) {
  switch (kind) {
    case Collective::kAllreduce:
      return "allreduce";
    case Collective::kAllgather:
      return "allgather";
    case Collective::kScatter:
      return "scatter";
  }
  return "?";
}

}  // namespace gradcomp
