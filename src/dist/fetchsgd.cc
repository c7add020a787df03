// fetchsgd: FetchSGD (Rothchild et al., ICML 2020; docs/algorithms/sketches.md), a one-round
// reducer whose momentum and error live in sketch space, on the aggregate.
//   worker:  allreduce S(g)                                   (one round: r*c floats)
//   all:     S_u <- m*S_u + (sum_w S(g_w)) / W
//            S_e <- S_e + lr*S_u
//            Delta <- top-k of S_e's median estimates (values: the estimates)
//            zero the cells of S_u and S_e that Delta's coordinates touch
//            x <- x - Delta   (the bucket receives Delta / lr as its gradient; the
//                              optimizer multiplies by lr, without momentum of its own)
// The workers' sketches are averaged (not summed as in the paper's formula) so that lr means
// what it means for the dense baseline, whose gradient is the mean over workers.
// S_u and S_e are identical on every rank (they are functions of the allreduced sums),
// so no rank sends anything else. The hashes must stay fixed over steps (the state is
// a sketch): the key depends on (seed, bucket) only.
// lr == 0 (or not finite): the update would be lost (Delta / 0), so nothing is
// extracted that step; S_u still accumulates and S_e is unchanged (lr * S_u = 0).
// Dense steps (BucketRef::compressed false) of a compressible bucket: plain mean of g,
// the sketch state is left alone.
#include <cmath>
#include <utility>

#include "dense_packing.h"
#include "gradcomp/dist/schemes.h"
#include "gradcomp/kernels/count_sketch.h"
#include "gradcomp/kernels/select.h"
#include "gradcomp/rng.h"
#include "scheme_list.h"
#include "sketch_scheme_util.h"
#include "step_recorder.h"

namespace gradcomp::dist {

namespace {

using namespace sketch_scheme;

constexpr std::uint32_t kHashStream = 0xFE7Cu;

class FetchSgdReducer final : public Reducer {
 public:
  FetchSgdReducer(const Params& p, std::string spec, Communicator& comm,
                  std::span<const BucketShape> shapes)
      : spec_(std::move(spec)),
        comm_(comm),
        shapes_(shapes.begin(), shapes.end()),
        geo_(geometry_from(p)),
        momentum_(static_cast<float>(p.get_float("momentum"))) {
    std::size_t cap1 = 0, max_n = 0, max_k = 0;
    for (const BucketShape& s : shapes_) {
      State st;
      if (s.compressible && s.numel > 0) {
        st.on = true;
        st.cols = kernels::sketch_columns(s.numel, geo_.rows, geo_.cols, geo_.table);
        st.k = k_for(geo_, s.numel);
        const std::size_t cells = std::size_t{geo_.rows} * st.cols;
        st.su.assign(cells, 0.0f);
        st.se.assign(cells, 0.0f);
        cap1 += std::max(s.numel, cells);
        max_n = std::max(max_n, s.numel);
        max_k = std::max(max_k, st.k);
      } else {
        cap1 += s.numel;
      }
      state_.push_back(std::move(st));
    }
    packing_ = DensePacking(cap1);
    est_.resize(max_n);
    idx_.resize(max_k);
  }

  void reduce(std::span<const BucketRef> buckets, const StepContext& ctx) override {
    check_buckets(buckets, shapes_, "fetchsgd reduce");
    StepRecorder rec(comm_, stats_);
    const float inv_w = 1.0f / static_cast<float>(comm_.world_size());

    // ---- encode: each worker's sketch of its gradient, with the dense buckets
    packing_.begin(buckets.size());
    for (std::size_t b = 0; b < buckets.size(); ++b) {
      const BucketRef& bk = buckets[b];
      State& st = state_[b];
      if (!sketched(bk, st)) {
        packing_.add_dense(bk.grad);
        continue;
      }
      if (!st.keyed) {
        // Fixed over steps: (seed, bucket) only.
        StepContext c{.seed = ctx.seed, .step = 0, .rank = 0, .bucket = bk.id};
        st.hash = kernels::SketchHash(CounterRng::for_step(c, RngScope::kShared, kHashStream).key(),
                                      geo_.rows, st.cols);
        st.keyed = true;
        st.seed = ctx.seed;
      } else if (st.seed != ctx.seed) {
        throw InvalidArgument("fetchsgd reduce: the run seed changed from " +
                              std::to_string(st.seed) + " to " + std::to_string(ctx.seed) +
                              " (the sketch state is tied to its hashes)");
      }
      st.table = packing_.add_summed(st.hash.cells());
      std::fill(st.table.begin(), st.table.end(), 0.0f);
      kernels::sketch_accumulate(st.hash, bk.grad, 1.0f, st.table);
    }
    const std::span<float> fused = packing_.pack();
    rec.encoded();

    comm_.allreduce_sum(fused);
    rec.communicated();

    // ---- momentum and error in sketch space; unsketch; the update; dense buckets' means
    const float lr = ctx.lr;
    const bool extract = std::isfinite(lr) && lr > 0.0f;
    packing_.write_means(inv_w);
    for (std::size_t b = 0; b < buckets.size(); ++b) {
      const BucketRef& bk = buckets[b];
      State& st = state_[b];
      if (!sketched(bk, st)) continue;
      const std::size_t n = bk.grad.size();
      float* g = bk.grad.data();
      const float* sum = st.table.data();
      float* su = st.su.data();
      float* se = st.se.data();
      const std::size_t cells = st.hash.cells();
      for (std::size_t c = 0; c < cells; ++c) su[c] = momentum_ * su[c] + sum[c] * inv_w;
      std::fill(bk.grad.begin(), bk.grad.end(), 0.0f);
      if (!extract) continue;
      for (std::size_t c = 0; c < cells; ++c) se[c] += lr * su[c];
      const std::size_t kk = kernels::sketch_top_k(st.hash, st.se, std::span<float>(est_.data(), n),
                                                   st.k, idx_, "fetchsgd unsketch");
      const float inv_lr = 1.0f / lr;
      for (std::size_t t = 0; t < kk; ++t) g[idx_[t]] = est_[idx_[t]] * inv_lr;
      const std::span<const std::uint32_t> sent(idx_.data(), kk);
      kernels::sketch_zero_cells(st.hash, sent, st.su);
      kernels::sketch_zero_cells(st.hash, sent, st.se);
    }
    rec.decoded();

    rec.finish();
  }

  ReduceStats take_stats() override { return std::exchange(stats_, {}); }

  std::vector<StateBuffer> state() override {
    std::vector<StateBuffer> out;
    for (std::size_t b = 0; b < state_.size(); ++b) {
      State& st = state_[b];
      if (!st.on) continue;
      const std::string id = std::to_string(shapes_[b].id);
      out.push_back({"bucket" + id + ".sketch_momentum", st.su});
      out.push_back({"bucket" + id + ".sketch_error", st.se});
    }
    return out;
  }

  std::string describe() const override { return spec_; }
  bool momentum_in_memory() const override { return true; }

 private:
  struct State {
    bool on = false;
    bool keyed = false;
    std::uint64_t seed = 0;
    std::uint32_t cols = 0;
    std::size_t k = 0;
    std::vector<float> su, se;  // r x c each
    kernels::SketchHash hash{0, 1, 1};
    std::span<float> table;  // this step, when sketched: its sketch in the fused allreduce
  };

  static bool sketched(const BucketRef& bk, const State& st) { return bk.compressed && st.on; }

  std::string spec_;
  Communicator& comm_;
  std::vector<BucketShape> shapes_;
  Geometry geo_;
  float momentum_;
  std::vector<State> state_;
  DensePacking packing_;  // the sketches and the dense buckets, one allreduce
  std::vector<float> est_;
  std::vector<std::uint32_t> idx_;
  ReduceStats stats_;
};

}  // namespace

// Parameters: declared in scheme_descriptions.cc.
SchemeInfo fetchsgd_scheme() {
  return {described("fetchsgd"),
          [](const Params& p, const std::string& spec, Communicator& comm,
             std::span<const BucketShape> buckets) -> std::unique_ptr<Reducer> {
            return std::make_unique<FetchSgdReducer>(p, spec, comm, buckets);
          }};
}

}  // namespace gradcomp::dist
