// DGC's memory on the device (dgc.h). The scheme is the host memory's (src/core/memory/
// dgc.cc, whose file comment states it); its parameters and per-step rules (k, the message
// bound, clipping's factor) are shared through detail::DgcOptions, the selection and the
// payload are top-k's on the device (codecs/topk.cc). What is written here is the step in
// ATen operations, each rounding as the host's loop rounds, so that on CPU tensors the
// messages and u, v are the host memory's bit for bit (tests/device/dgc_device_test.cc):
//   v <- v * (lr_prev / lr)     lr_rescale, when the rate changed (one float division, as
//                               the host computes it, then one multiply per entry)
//   g <- g * s                  clipping, s = min(1, clip W^-1/2 / ||g||) as a float
//   u <- fma(m, u, g); v <- v + u, or Nesterov's u <- m (u + g); v <- (v + u) + g, or
//   v <- v + g (correction=0)
//   I <- top-k(|v|) (sampled or exact, the host's indices); payload (I, v[I]);
//   v[I] <- +0; u[I] <- +0 (masking)
// What differs: clipping's ||g|| off the CPU is ATen's reduction in double, whose summation
// order is not the host's four fixed accumulators, so the factor s agrees to rounding
// there (on CPU tensors the host's own sum runs: exact). The host fuses the accumulation
// into the selection's first pass; the device makes it its own passes (same values).
// Device synchronisations beyond top-k's: clipping reads ||g|| (one per bucket and step,
// only with clip > 0; one per batch); the first step after append_state reads the learning
// rate back.
// A batch (compress_batch) runs each bucket's rescaling and accumulation as compress()
// does, then selects in every accumulator at once with top-k's batch (topk_batch.h), with
// each bucket's own k, and masks the momentum with one indexed write.
#include "device/dgc.h"

#include <span>

#include "codecs/codecs.h"
#include "codecs/topk_batch.h"
#include "device/momentum.h"

namespace gradcomp::device {

namespace {

constexpr const char* kOp = "dgc compress";  // the host memory's name in its errors

// ||g||_2 as clipping needs it (see the file comment).
double l2_norm(const at::Tensor& g) {
  if (g.is_cpu()) {
    return detail::dgc_l2_norm(
        std::span<const float>(g.data_ptr<float>(), static_cast<std::size_t>(g.numel())));
  }
  return at::linalg_vector_norm(g, 2, c10::nullopt, false, at::kDouble).item<double>();
}

// l2_norm of each gradient; off the CPU, all of them in one transfer.
std::vector<double> l2_norms(std::span<const at::Tensor> grads) {
  std::vector<double> out;
  if (grads.empty() || grads.front().is_cpu()) {
    for (const at::Tensor& g : grads) out.push_back(l2_norm(g));
    return out;
  }
  std::vector<at::Tensor> norms;
  for (const at::Tensor& g : grads) {
    norms.push_back(at::linalg_vector_norm(g, 2, c10::nullopt, false, at::kDouble));
  }
  const at::Tensor host = at::stack(norms).cpu();
  const double* p = host.data_ptr<double>();
  return {p, p + host.numel()};
}

}  // namespace

DgcMemory::DgcMemory(const detail::DgcOptions& options, std::size_t n,
                     const at::TensorOptions& floats)
    : o_(options), n_(n) {
  const auto size = static_cast<std::int64_t>(n);
  if (o_.correction) u_ = at::zeros({size}, floats);
  v_ = at::zeros({size}, floats);
  if (o_.lr_rescale) lr_ = at::zeros({1}, floats);
}

DgcMemory::DgcMemory(const detail::DgcOptions& options, at::Tensor momentum, at::Tensor accumulator)
    : o_(options),
      n_(static_cast<std::size_t>(accumulator.numel())),
      u_(std::move(momentum)),
      v_(std::move(accumulator)) {
  if (o_.lr_rescale) lr_ = at::zeros({1}, v_.options());
}

// The host's rescale_to: v's unsent updates, formed at lr_prev, scaled to lr; a rate that
// is not positive leaves v as it is.
void DgcMemory::rescale_to(float lr) {
  if (!o_.lr_rescale || !(lr > 0.0f)) return;
  if (!lr_known_) {
    lr_formed_ = lr_.item<float>();
    lr_known_ = true;
  }
  if (lr_formed_ == lr) return;
  if (lr_formed_ > 0.0f) {
    const float r = lr_formed_ / lr;  // a float, rounded once, as on the host
    v_.mul_(static_cast<double>(r));  // exact in double; ATen multiplies in float
  }
  lr_.fill_(static_cast<double>(lr));
  lr_formed_ = lr;
}

// The gradient, locally clipped: s * g in float, rounded once per entry, as the host's
// copy. grad itself is left as it is (the host's is const).
at::Tensor DgcMemory::clipped(const at::Tensor& grad, const StepContext& ctx) const {
  if (o_.clip <= 0.0) return grad;
  const float s = o_.clip_scale(l2_norm(grad), ctx.world);
  return s == 1.0f ? grad : grad.mul(static_cast<double>(s));
}

// The host's accumulate: m*u + g as one fused multiply-add (momentum.h). Nesterov's
// m*(u + g) rounds the sum, then the product, then (v + u) + g as written.
void DgcMemory::accumulate(const at::Tensor& g) {
  if (!o_.correction) {
    v_.add_(g);
    return;
  }
  const double m = o_.momentum;  // a float, exact in double
  if (o_.nesterov) {
    u_.add_(g).mul_(m);
    v_.add_(u_).add_(g);
  } else {
    add_momentum(u_, g, m);
    v_.add_(u_);
  }
}

at::Tensor DgcMemory::compress(const at::Tensor& grad, const StepContext& ctx) {
  rescale_to(ctx.lr);
  const auto k = static_cast<std::int64_t>(o_.count(n_, ctx));
  accumulate(clipped(grad, ctx));
  const at::Tensor idx = select_topk(v_, k, !o_.exact, o_.sample, ctx, kOp);
  const at::Tensor payload = sparse_fp32_payload(idx, v_.index_select(0, idx));
  // The sent values leave the accumulator; their momentum stops too (masking). +0, as the
  // host writes.
  if (idx.numel() > 0) {
    v_.index_fill_(0, idx, 0.0);
    if (o_.correction && o_.masking) u_.index_fill_(0, idx, 0.0);
  }
  return payload;
}

DeviceCodec::EncodedBatch DgcMemory::compress_batch(std::span<DgcMemory* const> memories,
                                                    std::span<const at::Tensor> grads,
                                                    std::span<const StepContext> ctxs,
                                                    const at::Tensor& momentum,
                                                    const at::Tensor& accumulator) {
  if (memories.empty()) return {};
  const detail::DgcOptions& o = memories.front()->o_;
  const std::vector<double> norms = o.clip > 0.0 ? l2_norms(grads) : std::vector<double>();
  topk_detail::BatchSelection selection;
  selection.sample = o.sample;
  selection.op = kOp;
  std::vector<std::int64_t> sizes;
  std::vector<at::Tensor> us, vs;
  for (std::size_t j = 0; j < memories.size(); ++j) {
    DgcMemory& d = *memories[j];
    d.rescale_to(ctxs[j].lr);
    selection.k.push_back(static_cast<std::int64_t>(o.count(d.n_, ctxs[j])));
    selection.sampled.push_back(o.exact ? 0 : 1);
    sizes.push_back(static_cast<std::int64_t>(d.n_));
    const float s = norms.empty() ? 1.0f : o.clip_scale(norms[j], ctxs[j].world);
    d.accumulate(s == 1.0f ? grads[j] : grads[j].mul(static_cast<double>(s)));
    us.push_back(d.u_);
    vs.push_back(d.v_);
  }
  const bool in_place = accumulator.defined();
  const bool masks = o.correction && o.masking;
  const at::Tensor v = in_place ? accumulator : at::cat(vs);
  at::Tensor selected;
  DeviceCodec::EncodedBatch out =
      topk_detail::encode_batch(selection, v, sizes, ctxs, /*feedback=*/true, &selected);
  // The sent values left v (zeroed by the batch's feedback); their momentum stops too.
  const at::Tensor u = !masks ? at::Tensor() : in_place ? momentum : at::cat(us);
  if (masks && selected.numel() > 0) u.index_fill_(0, selected, 0.0);
  if (!in_place) {
    std::int64_t at = 0;
    for (std::size_t j = 0; j < memories.size(); ++j) {
      vs[j].copy_(v.narrow(0, at, sizes[j]));
      if (masks) us[j].copy_(u.narrow(0, at, sizes[j]));
      at += sizes[j];
    }
  }
  return out;
}

void DgcMemory::compress_dense(const at::Tensor& grad, const StepContext& ctx) {
  rescale_to(ctx.lr);
  accumulate(clipped(grad, ctx));
  grad.copy_(v_);
  v_.zero_();
  if (o_.correction && o_.masking) u_.zero_();
}

std::size_t DgcMemory::step_max_encoded_bytes(const Codec& codec, const StepContext& ctx) const {
  return o_.step_max_encoded_bytes(codec, n_, ctx);
}

void DgcMemory::append_state(const std::string& prefix,
                             std::vector<std::pair<std::string, at::Tensor>>& out) {
  if (o_.correction) out.emplace_back(prefix + "momentum", u_);
  out.emplace_back(prefix + "accumulator", v_);
  if (o_.lr_rescale) {
    out.emplace_back(prefix + "learning_rate", lr_);
    lr_known_ = false;  // the caller may write it before the next step
  }
}

}  // namespace gradcomp::device
