// sketched-sgd: Sketched-SGD (Ivkin et al., NeurIPS 2019; docs/algorithms/sketches.md), a two-round
// reducer.
//   worker:  u <- m*u + g ; v <- v + u ; allreduce S(v)             (round 1: r*c floats)
//   all:     C <- the p2*k coordinates with the largest |median estimate| of the summed
//            sketch (identical on every rank: the sums are)
//   worker:  allreduce v[C]                                          (round 2: p2*k floats)
//   all:     Delta <- top-k of the exact sums at C ; u[supp Delta] <- 0 ; v[supp Delta] <- 0
//            (mask=false keeps u: no momentum factor masking, an ablation)
//            grad <- Delta / W  (the optimizer applies x <- x - lr * Delta / W, without
//            momentum of its own for these buckets: u is the momentum)
// Every compressed bucket's sketch goes into ONE fused allreduce together with the dense
// buckets; the candidates' values of every bucket into one second allreduce.
// Hashes: keyed by (seed, step, bucket), shared by all ranks, new every step. u and v
// live in coordinate space, so nothing ties the hashes of two steps together, and
// fresh hashes stop a coordinate from colliding with the same heavy neighbour step
// after step (it would then be estimated wrongly, and skipped, every time).
// Dense steps (BucketRef::compressed false, e.g. --dense-steps) of a compressible bucket
// send the plain gradient and leave u and v alone: the trainer's optimizer applies its
// own momentum on dense steps (it skips momentum only while a bucket is compressed), as
// for every other method. The parameter server runs the same math per key
// (ps/sketch_plan.h).
#include <utility>

#include "dense_packing.h"
#include "gradcomp/dist/schemes.h"
#include "gradcomp/kernels/count_sketch.h"
#include "gradcomp/kernels/select.h"
#include "scheme_list.h"
#include "sketch_scheme_util.h"
#include "step_recorder.h"

namespace gradcomp::dist {

namespace {

using namespace sketch_scheme;

class SketchedSgdReducer final : public Reducer {
 public:
  SketchedSgdReducer(const Params& p, std::string spec, Communicator& comm,
                     std::span<const BucketShape> shapes)
      : spec_(std::move(spec)),
        comm_(comm),
        shapes_(shapes.begin(), shapes.end()),
        geo_(geometry_from(p)),
        p2_(static_cast<std::size_t>(p.get_int("p2"))),
        momentum_(static_cast<float>(p.get_float("momentum"))),
        mask_(p.get_bool("mask")) {
    std::size_t cap1 = 0, cap2 = 0, max_n = 0, max_k = 0;
    for (const BucketShape& s : shapes_) {
      State st;
      if (s.compressible && s.numel > 0) {
        st.on = true;
        st.cols = kernels::sketch_columns(s.numel, geo_.rows, geo_.cols, geo_.table);
        st.k = k_for(geo_, s.numel);
        st.kc = std::min(s.numel, p2_ * st.k);
        st.u.assign(s.numel, 0.0f);
        st.v.assign(s.numel, 0.0f);
        st.cand.resize(st.kc);
        cap1 += std::max(s.numel, std::size_t{geo_.rows} * st.cols);
        cap2 += st.kc;
        max_n = std::max(max_n, s.numel);
        max_k = std::max(max_k, st.k);
      } else {
        cap1 += s.numel;
      }
      state_.push_back(std::move(st));
    }
    packing_ = DensePacking(cap1);
    fused2_.resize(cap2);
    est_.resize(max_n);
    pos_.resize(max_k);
  }

  void reduce(std::span<const BucketRef> buckets, const StepContext& ctx) override {
    check_buckets(buckets, shapes_, "sketched-sgd reduce");
    StepRecorder rec(comm_, stats_);
    const float inv_w = 1.0f / static_cast<float>(comm_.world_size());

    // ---- encode: momentum, error accumulation, sketches (round-1 buffer, with the dense
    // buckets)
    packing_.begin(buckets.size());
    for (std::size_t b = 0; b < buckets.size(); ++b) {
      const BucketRef& bk = buckets[b];
      State& st = state_[b];
      if (!sketched(bk, st)) {
        packing_.add_dense(bk.grad);
        continue;
      }
      accumulate_momentum(st.u, st.v, bk.grad, momentum_);
      st.hash = sketched_sgd_hash(ctx.seed, ctx.step, bk.id, geo_.rows, st.cols);
      st.table = packing_.add_summed(st.hash.cells());
      std::fill(st.table.begin(), st.table.end(), 0.0f);
      kernels::sketch_accumulate(st.hash, st.v, 1.0f, st.table);
    }
    const std::span<float> fused1 = packing_.pack();
    rec.encoded();

    comm_.allreduce_sum(fused1);
    rec.communicated();

    // ---- candidates from the summed sketches; dense buckets' means (round-2 buffer)
    packing_.write_means(inv_w);
    std::size_t n2 = 0;
    for (std::size_t b = 0; b < buckets.size(); ++b) {
      const BucketRef& bk = buckets[b];
      State& st = state_[b];
      if (!sketched(bk, st)) continue;
      st.m = kernels::sketch_top_k(st.hash, st.table, std::span<float>(est_.data(), bk.grad.size()),
                                   st.kc, st.cand, "sketched-sgd candidates");
      const float* v = st.v.data();
      for (std::size_t t = 0; t < st.m; ++t) fused2_[n2 + t] = v[st.cand[t]];
      n2 += st.m;
    }
    rec.decoded();

    comm_.allreduce_sum(std::span<float>(fused2_.data(), n2));
    rec.communicated();

    // ---- top-k of the exact sums; the update; clear what was applied
    n2 = 0;
    for (std::size_t b = 0; b < buckets.size(); ++b) {
      const BucketRef& bk = buckets[b];
      State& st = state_[b];
      if (!sketched(bk, st)) continue;
      const std::span<const float> sums(fused2_.data() + n2, st.m);
      n2 += st.m;
      // Positions in C, ascending (C is ascending, so the indices are too); ties: lower
      // index first, as everywhere.
      const std::size_t kk =
          kernels::select_topk_exact(sums, st.k, std::span<std::uint32_t>(pos_), "sketched-sgd");
      float* g = bk.grad.data();
      std::fill(bk.grad.begin(), bk.grad.end(), 0.0f);
      for (std::size_t t = 0; t < kk; ++t) {
        const std::uint32_t i = st.cand[pos_[t]];
        g[i] = sums[pos_[t]] * inv_w;
        if (mask_) st.u[i] = 0.0f;
        st.v[i] = 0.0f;
      }
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
      out.push_back({"bucket" + id + ".momentum", st.u});
      out.push_back({"bucket" + id + ".error", st.v});
    }
    return out;
  }

  std::string describe() const override { return spec_; }
  bool momentum_in_memory() const override { return true; }

 private:
  struct State {
    bool on = false;  // compressible: has u, v
    std::uint32_t cols = 0;
    std::size_t k = 0;   // coordinates updated per step
    std::size_t kc = 0;  // candidates, min(n, p2 * k)
    std::size_t m = 0;   // candidates this step
    std::vector<float> u, v;
    std::vector<std::uint32_t> cand;
    kernels::SketchHash hash{0, 1, 1};
    std::span<float> table;  // this step, when sketched: its sketch in the round-1 allreduce
  };

  static bool sketched(const BucketRef& bk, const State& st) { return bk.compressed && st.on; }

  std::string spec_;
  Communicator& comm_;
  std::vector<BucketShape> shapes_;
  Geometry geo_;
  std::size_t p2_;
  float momentum_;
  bool mask_;
  std::vector<State> state_;
  DensePacking packing_;  // round 1: the sketches and the dense buckets
  std::vector<float> fused2_, est_;
  std::vector<std::uint32_t> pos_;
  ReduceStats stats_;
};

}  // namespace

// Parameters: declared in scheme_descriptions.cc.
SchemeInfo sketched_sgd_scheme() {
  return {described("sketched-sgd"),
          [](const Params& p, const std::string& spec, Communicator& comm,
             std::span<const BucketShape> buckets) -> std::unique_ptr<Reducer> {
            return std::make_unique<SketchedSgdReducer>(p, spec, comm, buckets);
          }};
}

}  // namespace gradcomp::dist
