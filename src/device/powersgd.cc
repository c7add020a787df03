// PowerSGD (src/dist/powersgd.cc, docs/algorithms/low-rank.md) for gradients that live on a
// device: the buckets, the residual e and Q stay on the device, and only the P and Q
// factors and the dense buckets cross to the host, where Gloo sums them.
//
// One step, every rank in the same order, as the host scheme's:
//   refresh  Q's all-zero columns (every column without warm start) drawn on the host
//            from the run's shared seed, exactly as the host draws them (CounterRng,
//            kernels::lr_fill_normal), and copied in: so both paths start from the same
//            Q to the bit;
//   encode   M = g + e (e <- e + g: e holds M, as lr_project_accumulate leaves it), and
//            P = M Q into one device buffer beside the buckets that go dense this step,
//            in bucket order (the host's DensePacking order: a float's place in the
//            buffer decides its rounding in Gloo's ring); one copy to the host;
//   comm     ONE fp32 allreduce of that buffer;
//   host     each P checked finite and orthonormalised by the host's own Gram-Schmidt
//            (kernels::lr_orthonormalize: the same column order, drop rule and
//            tolerance, because it is that function), the dense sums * 1/W; one copy of
//            the buffer back to the device;
//   encode   Q = M^T P on the device; one copy of every Q to the host;
//   comm     ONE fp32 allreduce of the Q's; Q = sum * 1/W on the host; one copy back;
//   decode   g = P Q^T and e = M - g on the device; the dense means into their buckets.
// Buckets go dense exactly where the host's do: compressed[b] false, steps before
// warmup_steps, rows == 0, and matrices that kernels::low_rank_pays refuses.
//
// Launches: the residuals are updated by one multi-tensor add each way (_foreach_add_: a
// few launches on CUDA), the Q's lie back to back (each slot's a view) so that a step that
// compresses every matrix copies them back in one copy, and the dense buckets move into
// the fused buffer and back with one indexed copy each way (ViewScatter) instead of a copy
// per bucket: what is left per matrix is its three products (docs/measurements/gpu.md).
//
// Why Gram-Schmidt runs on the host: P is there anyway (the allreduce sums it in host
// memory) and has only rows * r elements, so orthonormalising it before the copy back
// costs no transfer and no device synchronisation; on the device it would be a chain of
// r^2 small dependent kernels per matrix. The products with M, which read the whole
// gradient, are the device's.
//
// What differs from the host: the three products (P = M Q, Q = M^T P, P Q^T) are ATen
// matrix multiplications (BLAS on the CPU, cuBLAS on CUDA, TF32 there where the process
// allows it: torch.backends.cuda.matmul.allow_tf32), whose summation order is not the
// host kernels' fixed one. Results agree to rounding, not to the bit
// (tests/device/powersgd_device_test.cc states the tolerance). Collectives, their sizes
// (so the bytes in ReduceStats), the drawn Q, the dense buckets and the state's names are
// the host's exactly.
//
// Device synchronisations: the copies are blocking (the host buffers are pageable), so
// each waits for the device work queued before it. The two copies to the host are where
// that costs (they wait for the products); the copies back find the device idle. No
// value is read back per tensor or per column: which Q columns are all zero is known on
// the host, which wrote every value Q holds, except after state() handed the tensors out
// writable: the next step then reads every Q's zero columns back in one copy.
#include <ATen/ATen.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "codecs/codecs.h"
#include "device/host_buffer.h"
#include "device/reducers.h"
#include "device/view_scatter.h"
#include "dist/dense_packing.h"
#include "dist/step_recorder.h"
#include "gradcomp/error.h"
#include "gradcomp/kernels/low_rank.h"
#include "gradcomp/rng.h"

namespace gradcomp::device {

namespace {

std::int64_t i64(std::size_t n) { return static_cast<std::int64_t>(n); }

// A host float buffer as a CPU tensor (no copy): what device tensors are copied from and to.
at::Tensor host_view(std::vector<float>& v, std::size_t n) {
  return at::from_blob(v.data(), {i64(n)}, at::TensorOptions().dtype(at::kFloat));
}

class DevicePowerSgdReducer final : public Reducer {
 public:
  // `method` is powersgd (make_powersgd_reducer checks); its parameters as the host
  // scheme reads them.
  DevicePowerSgdReducer(const Method& method, dist::Communicator& comm,
                        std::span<const BucketShape> shapes, const at::Device& device)
      : describe_(method.canonical() + " on " + device.str()),
        comm_(comm),
        floats_(at::TensorOptions().dtype(at::kFloat).device(device)),
        rank_(static_cast<std::size_t>(method.scheme_params().get_int("rank"))),
        warmup_steps_(static_cast<std::uint64_t>(method.scheme_params().get_int("warmup_steps"))),
        error_feedback_(method.scheme_params().get_bool("error_feedback")),
        warm_start_(method.scheme_params().get_bool("warm_start")),
        fused_host_(at::kFloat, device),
        q_host_(at::kFloat, device) {
    slots_.reserve(shapes.size());
    std::size_t q_total = 0;
    for (const BucketShape& b : shapes) {
      Slot s;
      s.shape = b;
      if (const auto lr =
              kernels::powersgd_factorisation(b.id, b.numel, b.rows, b.compressible, rank_)) {
        s.low_rank = true;
        s.lr = *lr;
        s.q_zero.assign(rank_, 1);
        if (error_feedback_) s.e = at::zeros({i64(b.numel)}, floats_);
        q_total += s.lr.q_size();
        ++low_rank_;
      }
      slots_.push_back(std::move(s));
    }
    // The Q's back to back, each slot's a view (all-zero columns: drawn at first use).
    q_flat_ = at::zeros({i64(q_total)}, floats_);
    std::size_t q_at = 0;
    for (Slot& s : slots_) {
      if (!s.low_rank) continue;
      s.q = q_flat_.narrow(0, i64(q_at), i64(s.lr.q_size()));
      q_at += s.lr.q_size();
    }
  }

  void reduce(std::span<const at::Tensor> grads, std::span<const bool> compressed,
              const StepContext& ctx) override {
    check_buckets(grads, compressed);
    dist::StepRecorder rec(comm_, stats_);
    const float inv_w = 1.0f / static_cast<float>(comm_.world_size());
    const bool warming_up = ctx.step < warmup_steps_;

    // ---- encode: the Q columns due drawn; M = g + e; P = M Q beside the dense buckets
    std::size_t fused_size = 0;
    std::size_t q_total = 0;
    for (std::size_t b = 0; b < slots_.size(); ++b) {
      Slot& s = slots_[b];
      s.active = s.low_rank && compressed[b] && !warming_up;
      s.at = fused_size;
      fused_size += s.active ? s.lr.p_size() : s.shape.numel;
      if (s.active) {
        s.q_at = q_total;
        q_total += s.lr.q_size();
      }
    }
    refresh_q(ctx);
    const at::Tensor fused_dev = at::empty({i64(fused_size)}, floats_);
    // This step's low-rank gradients, and the dense ones with their places in fused_dev.
    std::vector<at::Tensor> mats, dense, dense_slots;
    for (std::size_t b = 0; b < slots_.size(); ++b) {
      const Slot& s = slots_[b];
      if (s.active) {
        mats.push_back(grads[b]);
      } else if (s.shape.numel > 0) {
        dense.push_back(grads[b]);
        dense_slots.push_back(fused_dev.narrow(0, i64(s.at), i64(s.shape.numel)));
      }
    }
    // Every low-rank bucket compressed (the usual step): q_flat_ holds this step's Q's in
    // slot order, so they come back in one copy, not one a bucket.
    const bool every = !mats.empty() && mats.size() == low_rank_;
    if (error_feedback_) add_to_residuals(mats, 1.0);
    for (std::size_t b = 0; b < slots_.size(); ++b) {
      Slot& s = slots_[b];
      if (!s.active) continue;
      at::Tensor p = p_of(s, fused_dev);
      at::mm_out(p, q_of(s, s.q), m_of(s, grads[b]).t());  // P^T = Q^T M^T
    }
    if (!dense.empty()) dense_in_(dense_slots, at::cat(dense));
    const at::Tensor fused_host = fused_host_.take(i64(fused_size));
    float* const fused = fused_host.data_ptr<float>();
    if (fused_size > 0) fused_host.copy_(fused_dev);  // waits for the device
    rec.encoded();

    comm_.allreduce_sum(std::span<float>(fused, fused_size));
    rec.communicated();

    // ---- on the host: orthonormalise each P (the host's kernel), dense sums to means;
    // then all of it back to the device in one copy
    for (Slot& s : slots_) {
      if (!s.active) continue;
      const std::span<float> p(fused + s.at, s.lr.p_size());
      kernels::check_projection_finite(p, s.shape.id, ctx.step);
      kernels::lr_orthonormalize(p, s.lr.rows, s.lr.rank);
    }
    for (Slot& s : slots_) {
      if (!s.active) dist::sum_to_mean({fused + s.at, s.shape.numel}, inv_w);
    }
    if (fused_size > 0) fused_dev.copy_(fused_host);

    // ---- encode, second half: Q = M^T P on the device, to the host
    const at::Tensor q_dev = at::empty({i64(q_total)}, floats_);
    for (std::size_t b = 0; b < slots_.size(); ++b) {
      Slot& s = slots_[b];
      if (!s.active) continue;
      at::Tensor q = q_of(s, q_dev.narrow(0, i64(s.q_at), i64(s.lr.q_size())));
      at::mm_out(q, p_of(s, fused_dev), m_of(s, grads[b]));  // Q^T = P^T M
    }
    const at::Tensor q_host = q_host_.take(i64(q_total));
    const std::span<float> q_sum(q_host.data_ptr<float>(), q_total);
    if (q_total > 0) q_host.copy_(q_dev);  // waits for the device
    rec.encoded();

    comm_.allreduce_sum(q_sum);
    rec.communicated();

    // ---- decode: Q = sum / W (kept: warm start), g = P Q^T, e = M - g; dense: the means
    for (float& x : q_sum) x *= inv_w;
    for (Slot& s : slots_) {
      if (s.active) note_zero_columns(s, q_sum.data() + s.q_at);
    }
    if (every) {
      q_flat_.copy_(q_host);  // q_dev's layout is q_flat_'s
    } else if (q_total > 0) {
      q_dev.copy_(q_host);
      for (Slot& s : slots_) {
        if (s.active) s.q.copy_(q_dev.narrow(0, i64(s.q_at), i64(s.lr.q_size())));
      }
    }
    for (std::size_t b = 0; b < slots_.size(); ++b) {
      Slot& s = slots_[b];
      if (!s.active) continue;
      at::Tensor out = grads[b].view({i64(s.lr.rows), i64(s.lr.cols)});
      at::mm_out(out, p_of(s, fused_dev).t(), q_of(s, s.q));  // P Q^T
    }
    if (error_feedback_) add_to_residuals(mats, -1.0);  // e = M - P Q^T
    if (!dense.empty()) dense_out_(dense, at::cat(dense_slots));
    rec.decoded();

    rec.finish();
  }

  ReduceStats take_stats() override { return std::exchange(stats_, {}); }

  // The host's order and names: per low-rank bucket its residual (with error feedback),
  // then its Q.
  std::vector<std::pair<std::string, at::Tensor>> state() override {
    q_zero_known_ = false;  // the tensors may be written before the next step
    std::vector<std::pair<std::string, at::Tensor>> out;
    for (Slot& s : slots_) {
      if (!s.low_rank) continue;
      const std::string prefix = "bucket" + std::to_string(s.shape.id) + ".";
      if (error_feedback_) out.emplace_back(prefix + "residual", s.e);
      out.emplace_back(prefix + "q", s.q);
    }
    return out;
  }

  std::string describe() const override { return describe_; }

 private:
  struct Slot {
    BucketShape shape;
    bool low_rank = false;  // a matrix that passes the size rule
    kernels::LowRankShape lr;
    at::Tensor e;  // M - P Q^T of the last compressed step (error feedback), on the device
    at::Tensor q;  // Q, r columns of cols floats (kernels/low_rank.h's layout), on the device
    // Which columns of q are all zero (1) as the host last wrote them: the ones to draw.
    std::vector<char> q_zero;
    // This step:
    bool active = false;   // goes low-rank
    std::size_t at = 0;    // P's or the dense bucket's offset in the fused buffer
    std::size_t q_at = 0;  // Q's offset in the Q buffer
  };

  // e += sign * g for this step's low-rank buckets (their gradients `mats`, in slot order):
  // one multi-tensor operation (a few launches on CUDA for all of them; a loop on the CPU).
  void add_to_residuals(const std::vector<at::Tensor>& mats, double sign) {
    std::vector<at::Tensor> residuals;
    for (const Slot& s : slots_) {
      if (s.active) residuals.push_back(s.e);
    }
    if (!residuals.empty()) at::_foreach_add_(residuals, mats, sign);
  }

  // Views in the layouts of kernels/low_rank.h: M row-major rows x cols; P and Q stored
  // column after column, so as matrices they are P^T (r x rows) and Q^T (r x cols).
  at::Tensor m_of(const Slot& s, const at::Tensor& grad) const {
    return (error_feedback_ ? s.e : grad).view({i64(s.lr.rows), i64(s.lr.cols)});
  }
  static at::Tensor p_of(const Slot& s, const at::Tensor& fused) {
    return fused.narrow(0, i64(s.at), i64(s.lr.p_size())).view({i64(s.lr.rank), i64(s.lr.rows)});
  }
  static at::Tensor q_of(const Slot& s, const at::Tensor& q) {
    return q.view({i64(s.lr.rank), i64(s.lr.cols)});
  }

  static void note_zero_columns(Slot& s, const float* q) {
    for (std::size_t k = 0; k < s.lr.rank; ++k) {
      bool zero = true;
      for (std::size_t j = 0; j < s.lr.cols; ++j) zero = zero && q[k * s.lr.cols + j] == 0.0f;
      s.q_zero[k] = zero ? 1 : 0;
    }
  }

  // The host's refresh_q for this step's low-rank buckets: Q's all-zero columns (every
  // column without warm start) drawn from the shared seed, the same on every rank. The
  // values are drawn here on the host, by the host's function, and copied in at once.
  void refresh_q(const StepContext& ctx) {
    if (warm_start_ && !q_zero_known_) read_zero_columns();
    // Until the drawn columns are in Q, the flags say more than Q holds.
    q_zero_known_ = false;
    fresh_.clear();
    draws_.clear();
    for (std::size_t i = 0; i < slots_.size(); ++i) {
      Slot& s = slots_[i];
      if (!s.active) continue;
      StepContext c = ctx;
      c.bucket = s.shape.id;
      const CounterRng rng = CounterRng::for_step(c, RngScope::kShared);
      const std::size_t cols = s.lr.cols;
      for (std::size_t k = 0; k < s.lr.rank; ++k) {
        if (warm_start_ && !s.q_zero[k]) continue;
        const std::size_t at = fresh_.size();
        fresh_.resize(at + cols);
        const std::span<float> col(fresh_.data() + at, cols);
        kernels::lr_fill_normal(rng, static_cast<std::uint32_t>(k * cols), col);
        bool zero = true;
        for (float v : col) zero = zero && v == 0.0f;
        s.q_zero[k] = zero ? 1 : 0;
        draws_.emplace_back(i, k);
      }
    }
    if (fresh_.empty()) {
      q_zero_known_ = true;
      return;
    }
    const at::Tensor drawn = host_view(fresh_, fresh_.size()).to(floats_.device());
    std::size_t at = 0;
    for (std::size_t d = 0; d < draws_.size();) {
      const auto [i, k] = draws_[d];
      // Adjacent columns of one Q (all of them, without warm start) in one copy.
      std::size_t n = 1;
      while (d + n < draws_.size() && draws_[d + n].first == i && draws_[d + n].second == k + n) {
        ++n;
      }
      const std::size_t cols = slots_[i].lr.cols;
      slots_[i]
          .q.narrow(0, i64(k * cols), i64(n * cols))
          .copy_(drawn.narrow(0, i64(at), i64(n * cols)));
      at += n * cols;
      d += n;
    }
    q_zero_known_ = true;
  }

  // After state(): which Q columns are all zero, read from the device for every low-rank
  // bucket in one copy (the one synchronisation this costs, once per state() call).
  void read_zero_columns() {
    std::vector<at::Tensor> flags;
    for (Slot& s : slots_) {
      if (s.low_rank) flags.push_back(q_of(s, s.q).eq(0).all(1));
    }
    if (!flags.empty()) {
      const at::Tensor host = at::cat(flags).to(at::kCPU);
      const bool* z = host.data_ptr<bool>();
      for (Slot& s : slots_) {
        if (!s.low_rank) continue;
        for (std::size_t k = 0; k < s.lr.rank; ++k) s.q_zero[k] = *z++ ? 1 : 0;
      }
    }
    q_zero_known_ = true;
  }

  void check_buckets(std::span<const at::Tensor> grads, std::span<const bool> compressed) const {
    check_reduce_args("device powersgd reduce", grads, compressed, slots_.size(),
                      [&](std::size_t b) { return slots_[b].shape.numel; });
  }

  std::string describe_;
  dist::Communicator& comm_;
  at::TensorOptions floats_;
  std::size_t rank_;
  std::uint64_t warmup_steps_;
  bool error_feedback_;
  bool warm_start_;
  std::vector<Slot> slots_;
  std::size_t low_rank_ = 0;  // slots that pass the size rule
  // Every low-rank slot's Q, back to back in slot order.
  at::Tensor q_flat_;
  // The dense buckets into the fused buffer and back: one indexed copy each way where the
  // buckets are views of one tensor (a DDP bucket's slots), not one copy per bucket.
  ViewScatter dense_in_;
  ViewScatter dense_out_;
  bool q_zero_known_ = true;  // Slot::q_zero says what the device's Q holds
  // What crosses PCIe each step (host_buffer.h: pinned on CUDA, reused across steps): P's
  // and dense buckets (the first allreduce), Q's (the second), both ways.
  HostBuffer fused_host_;
  HostBuffer q_host_;
  std::vector<float> fresh_;  // Q columns drawn this step (pageable: drawn column by column)
  std::vector<std::pair<std::size_t, std::size_t>> draws_;  // (slot, column) of fresh_'s columns
  ReduceStats stats_;
};

}  // namespace

bool powersgd_runs(const Method& method) {
  return method.is_scheme() && method.name() == "powersgd";
}

std::unique_ptr<Reducer> make_powersgd_reducer(const Method& method, dist::Communicator& comm,
                                               std::span<const BucketShape> shapes,
                                               const at::Device& device) {
  if (!powersgd_runs(method)) {
    throw InvalidArgument("device powersgd reducer: " + method.canonical() + " is not powersgd");
  }
  return std::make_unique<DevicePowerSgdReducer>(method, comm, shapes, device);
}

}  // namespace gradcomp::device
