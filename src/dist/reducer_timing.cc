// A reducer's per-step CPU cost in a world of one (see gradcomp/dist/reducer_timing.h).
#include "gradcomp/dist/reducer_timing.h"

#include <algorithm>
#include <vector>

#include "gradcomp/dist/communicator.h"
#include "gradcomp/dist/reducers.h"
#include "gradcomp/error.h"
#include "gradcomp/rng.h"

namespace gradcomp::dist {

namespace {

// A gradient-like input (sum of four uniforms, centred, with an occasional large
// coordinate, as `gradcomp bench codec` uses), different for every step and bucket so
// that stateful reducers see a changing gradient.
void fill_gradient(std::span<float> g, std::uint64_t seed, std::uint64_t step,
                   std::uint32_t bucket) {
  StepContext ctx;
  ctx.seed = seed;
  ctx.step = step;
  ctx.bucket = bucket;
  const CounterRng rng = CounterRng::for_step(ctx, RngScope::kShared);
  for (std::size_t i = 0; i < g.size(); ++i) {
    const auto k = static_cast<std::uint32_t>(4 * i);
    float v = rng.uniform(k) + rng.uniform(k + 1) + rng.uniform(k + 2) + rng.uniform(k + 3) - 2.0f;
    if ((rng.bits(k + 3) & 63) == 0) v *= 8.0f;
    g[i] = v;
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

ReducerTiming time_reducer(const std::string& spec, std::span<const BucketShape> buckets,
                           int warmup, int steps, std::uint64_t seed) {
  if (steps < 1 || warmup < 0) {
    throw InvalidArgument("time_reducer: steps must be >= 1 and warmup >= 0");
  }
  RendezvousConfig config;
  config.rank = 0;
  config.world_size = 1;
  Communicator comm(Store::in_process(), config);
  const std::unique_ptr<Reducer> reducer = make_reducer(spec, ReducerKind::kAuto, comm, buckets);

  ReducerTiming out;
  std::vector<std::vector<float>> grads;
  std::vector<BucketRef> refs;
  for (const BucketShape& b : buckets) {
    grads.emplace_back(b.numel);
    if (b.compressible) out.compressed_elements += b.numel;
  }
  for (std::size_t i = 0; i < buckets.size(); ++i) {
    refs.push_back({buckets[i].id, grads[i], buckets[i].compressible});
  }

  std::vector<double> encode, decode;
  for (int t = 0; t < warmup + steps; ++t) {
    for (std::size_t i = 0; i < buckets.size(); ++i) {
      fill_gradient(grads[i], seed, static_cast<std::uint64_t>(t), buckets[i].id);
    }
    StepContext ctx;
    ctx.seed = seed;
    ctx.step = static_cast<std::uint64_t>(t);
    ctx.lr = 0.1f;
    reducer->reduce(refs, ctx);
    const ReduceStats s = reducer->take_stats();
    if (t >= warmup) {
      encode.push_back(s.encode_seconds);
      decode.push_back(s.decode_seconds);
    }
  }
  out.encode_s = median(encode);
  out.decode_s = median(decode);
  out.steps = steps;
  return out;
}

}  // namespace gradcomp::dist
