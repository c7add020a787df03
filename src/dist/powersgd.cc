// PowerSGD (Vogels, Karimireddy and Jaggi, "PowerSGD: Practical Low-Rank Gradient
// Compression for Distributed Optimization", NeurIPS 2019; docs/algorithms/low-rank.md), a reducer
// scheme: "powersgd:rank=2".
//
// Algorithm (every rank, the same buckets in the same order; one power iteration per
// step, warm-started from the previous step's Q):
//   M = g + e                        (the bucket as a rows x cols matrix, rows = its
//                                     layer's first dimension; e = 0 without feedback)
//   P = M Q ;  allreduce-sum P       (fused with every dense bucket: ONE fp32 allreduce)
//   P = orthonormalise(P)            (Gram-Schmidt, detail/low_rank.h)
//   Q = M^T P ; allreduce-sum Q ; Q /= W      (ONE fp32 allreduce of every Q)
//   g = P Q^T  (the mean gradient's estimate, P P^T mean(M)) ;  e = M - g
// Q starts as N(0, 1) from the run's shared seed (CounterRng, RngScope::kShared, keyed
// by step and bucket id: the same on every rank) and is kept between steps (warm start);
// a column of Q that is all zero -- at the start, or after Gram-Schmidt dropped a
// dependent column of P -- is drawn afresh before use, the same way on every rank.
//
// Buckets exchanged dense (fp32 sum / W, e untouched): BucketRef.compressed == false
// (the trainer's --dense-steps), steps before warmup_steps (PyTorch's
// start_powerSGD_iter), fused buckets (BucketShape.rows == 0: no matrix view), and
// matrices that would not gain: rows * cols <= 2 r (rows + cols) (the paper's rule; PyTorch's
// min_compression_rate = 2).
//
// Wire: two fp32 allreduces per step, of r (rows + cols) floats per compressed matrix
// plus the dense buckets. Linear: the low-rank factors are summed by the allreduce.
//
// State (checkpoints): per compressed-capable bucket, in bucket order, its residual e
// ("bucket<id>.residual", numel floats, with error feedback) and Q ("bucket<id>.q",
// r columns of cols floats).
#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "dense_packing.h"
#include "gradcomp/dist/schemes.h"
#include "gradcomp/error.h"
#include "gradcomp/kernels/low_rank.h"
#include "gradcomp/rng.h"
#include "scheme_list.h"
#include "step_recorder.h"

namespace gradcomp::dist {

namespace {

class PowerSgdReducer final : public Reducer {
 public:
  PowerSgdReducer(const Params& params, std::string spec, Communicator& comm,
                  std::span<const BucketShape> shapes)
      : spec_(std::move(spec)),
        comm_(comm),
        rank_(static_cast<std::size_t>(params.get_int("rank"))),
        warmup_steps_(static_cast<std::uint64_t>(params.get_int("warmup_steps"))),
        error_feedback_(params.get_bool("error_feedback")),
        warm_start_(params.get_bool("warm_start")) {
    std::size_t fused_cap = 0;
    std::size_t q_cap = 0;
    slots_.reserve(shapes.size());
    for (const BucketShape& b : shapes) {
      Slot s;
      s.shape = b;
      if (const auto lr =
              kernels::powersgd_factorisation(b.id, b.numel, b.rows, b.compressible, rank_)) {
        s.low_rank = true;
        s.lr = *lr;
        s.q.assign(s.lr.q_size(), 0.0f);  // all-zero columns: drawn at first use
        if (error_feedback_) s.e.assign(b.numel, 0.0f);
        q_cap += s.lr.q_size();
      }
      fused_cap += std::max(b.numel, s.low_rank ? s.lr.p_size() : std::size_t{0});
      slots_.push_back(std::move(s));
    }
    packing_ = DensePacking(fused_cap);
    q_sum_.resize(q_cap);
    active_.resize(slots_.size());
  }

  void reduce(std::span<const BucketRef> buckets, const StepContext& ctx) override {
    check_buckets(buckets);
    StepRecorder rec(comm_, stats_);
    const float inv_w = 1.0f / static_cast<float>(comm_.world_size());
    const bool warming_up = ctx.step < warmup_steps_;

    // ---- encode: M = g + e, P = M Q; dense buckets packed next to the P's
    packing_.begin(buckets.size());
    for (std::size_t b = 0; b < buckets.size(); ++b) {
      const BucketRef& bk = buckets[b];
      Slot& s = slots_[b];
      active_[b] = s.low_rank && bk.compressed && !warming_up;
      if (active_[b]) {
        refresh_q(s, ctx);
        s.p = packing_.add_summed(s.lr.p_size());
        if (error_feedback_) {
          kernels::lr_project_accumulate(s.lr, bk.grad, s.e, s.q, s.p);
        } else {
          kernels::lr_project(s.lr, bk.grad, s.q, s.p);
        }
      } else {
        packing_.add_dense(bk.grad);
      }
    }
    const std::span<float> fused = packing_.pack();
    rec.encoded();

    comm_.allreduce_sum(fused);
    rec.communicated();

    // ---- encode, second half: orthonormalise P, Q = M^T P
    std::size_t nq = 0;
    for (std::size_t b = 0; b < buckets.size(); ++b) {
      if (!active_[b]) continue;
      Slot& s = slots_[b];
      const std::span<float> p = s.p;
      kernels::check_projection_finite(p, s.shape.id, ctx.step);
      kernels::lr_orthonormalize(p, s.lr.rows, s.lr.rank);
      const std::span<const float> m =
          error_feedback_ ? std::span<const float>(s.e) : std::span<const float>(buckets[b].grad);
      kernels::lr_back_project(s.lr, m, p, std::span<float>(q_sum_.data() + nq, s.lr.q_size()));
      nq += s.lr.q_size();
    }
    rec.encoded();

    comm_.allreduce_sum(std::span<float>(q_sum_.data(), nq));
    rec.communicated();

    // ---- decode: Q = sum / W (kept: warm start), g = P Q^T, e = M - g; dense: sum / W
    nq = 0;
    for (std::size_t b = 0; b < buckets.size(); ++b) {
      if (!active_[b]) continue;
      const BucketRef& bk = buckets[b];
      Slot& s = slots_[b];
      const float* qs = q_sum_.data() + nq;
      for (std::size_t i = 0; i < s.q.size(); ++i) s.q[i] = qs[i] * inv_w;
      nq += s.q.size();
      if (error_feedback_) {
        kernels::lr_reconstruct_residual(s.lr, s.p, s.q, s.e, bk.grad);
      } else {
        kernels::lr_reconstruct(s.lr, s.p, s.q, bk.grad);
      }
    }
    packing_.write_means(inv_w);
    rec.decoded();

    rec.finish();
  }

  ReduceStats take_stats() override { return std::exchange(stats_, {}); }

  std::vector<StateBuffer> state() override {
    std::vector<StateBuffer> out;
    for (Slot& s : slots_) {
      if (!s.low_rank) continue;
      const std::string prefix = "bucket" + std::to_string(s.shape.id) + ".";
      if (error_feedback_) out.push_back({prefix + "residual", s.e});
      out.push_back({prefix + "q", s.q});
    }
    return out;
  }

  std::string describe() const override { return spec_; }

 private:
  struct Slot {
    BucketShape shape;
    bool low_rank = false;  // a matrix that passes the size rule
    kernels::LowRankShape lr;
    std::vector<float> e;  // M - P Q^T of the last compressed step (error feedback)
    std::vector<float> q;  // Q, r columns of cols floats (warm start)
    std::span<float> p;    // this step, when low-rank: its P in the fused allreduce
  };

  // Draws Q's all-zero columns (every column without warm start) from the shared seed.
  // Q is identical on every rank (it came out of an allreduce), so every rank redraws
  // the same columns with the same values.
  void refresh_q(Slot& s, const StepContext& ctx) const {
    StepContext c = ctx;
    c.bucket = s.shape.id;
    const CounterRng rng = CounterRng::for_step(c, RngScope::kShared);
    const std::size_t cols = s.lr.cols;
    for (std::size_t k = 0; k < s.lr.rank; ++k) {
      const std::span<float> col(s.q.data() + k * cols, cols);
      bool zero = true;
      if (warm_start_) {
        for (float v : col) zero = zero && v == 0.0f;
      }
      if (zero) kernels::lr_fill_normal(rng, static_cast<std::uint32_t>(k * cols), col);
    }
  }

  void check_buckets(std::span<const BucketRef> buckets) const {
    if (buckets.size() != slots_.size()) {
      throw InvalidArgument("powersgd reduce: " + std::to_string(buckets.size()) +
                            " buckets, reducer built for " + std::to_string(slots_.size()));
    }
    for (std::size_t b = 0; b < buckets.size(); ++b) {
      const BucketShape& s = slots_[b].shape;
      if (buckets[b].id != s.id || buckets[b].grad.size() != s.numel) {
        throw InvalidArgument("powersgd reduce: bucket " + std::to_string(buckets[b].id) + " of " +
                              std::to_string(buckets[b].grad.size()) +
                              " elements, expected bucket " + std::to_string(s.id) + " of " +
                              std::to_string(s.numel));
      }
    }
  }

  std::string spec_;
  Communicator& comm_;
  std::size_t rank_;
  std::uint64_t warmup_steps_;
  bool error_feedback_;
  bool warm_start_;
  std::vector<Slot> slots_;
  DensePacking packing_;      // P's and dense buckets, one allreduce
  std::vector<float> q_sum_;  // Q's, the second allreduce
  std::vector<char> active_;  // this step: bucket b goes low-rank
  ReduceStats stats_;
};

}  // namespace

// The parameters this reads ("rank", "warmup_steps", "error_feedback", "warm_start") are
// declared in scheme_descriptions.cc.
SchemeInfo powersgd_scheme() {
  return {described("powersgd"),
          [](const Params& params, const std::string& spec, Communicator& comm,
             std::span<const BucketShape> buckets) -> std::unique_ptr<Reducer> {
            return std::make_unique<PowerSgdReducer>(params, spec, comm, buckets);
          }};
}

}  // namespace gradcomp::dist
