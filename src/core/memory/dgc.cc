// dgc: Deep Gradient Compression (Lin et al., ICLR 2018, arXiv 1712.01887),
// docs/algorithms/sparsification.md. A named memory ("dgc:density=0.001"): per bucket a momentum u
// and an accumulator v, both zero at the start. One step with gradient g:
//   g <- g * min(1, clip * W^-1/2 / ||g||_2)     local clipping (clip=0: off)
//   u <- m*u + g ;  v <- v + u                   momentum correction
//        (nesterov=1: u <- m*(u + g) ; v <- v + u + g; correction=0: v <- v + g, no u)
//   I <- top-k(|v|), k = ceil(density(step) * n) (sampled threshold or exact radix select)
//   send (I, v[I]) ;  u[I] <- 0 (momentum factor masking; masking=0: off) ;  v[I] <- 0
// lr_rescale=1 (the default): before the step, v <- v * lr_prev / lr when the learning
// rate changed since v was last formed, so that what v holds still moves the weights as far
// as it would have at the rate it was computed with (error feedback in parameter space):
// under a decaying schedule the paper's form applies long-delayed entries at the smaller
// rate of the step that sends them, which costs short runs most (measured in
// docs/measurements/accuracy.md, "DGC on short runs").
// density(step) ramps 0.25, 0.0625, 0.015625, 0.0039 -> target over warmup_epochs,
// at most 1/8 of the run when its length is known (StepContext::total_steps; memory/dgc.h). The
// optimizer then applies the mean of the W decoded messages without its own momentum for these
// parameters (carries_momentum()), with weight decay outside the compressed path; dense buckets
// keep the optimizer's momentum.
//
// Wire format: exactly topk's (detail/sparse_message.h), fp32 values:
//   [0,4) count c | [4, 4+4c) u32 indices, strictly increasing | [4+4c, 4+8c) fp32 values
// behind the header of the codec "topk:ratio=R,select=sampled,values=fp32,sample=S",
// R = the largest density of the schedule (0.25 while a warm-up is configured, else the
// target). Why one codec for every step: the header's config tag is the hash of the
// codec's spec, and receivers decode with the single codec make_codec_of(spec) builds,
// so every message of a run must carry one spec even though k shrinks during warm-up.
// topk's select=sampled decoder accepts any count in [0, max(k_R, floor(1.3 k_R))]
// (k_R = ceil(R n)) with strictly increasing indices < n, and DGC never sends more:
// exact selection sends k(step) <= k_R, sampled at most floor(1.3 k(step)). The codec's
// select/sample only matter to its own encode, which DGC does not use (it selects on v
// itself); they are spelled out so that the spec is one a user could build.
// Not linear: ranks allgather messages and scatter-add them, then divide by W.
#include "memory/dgc.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "detail/pending.h"
#include "detail/run_text.h"
#include "detail/scratch.h"
#include "detail/sparse_message.h"
#include "gradcomp/error.h"
#include "gradcomp/kernels/select.h"
#include "gradcomp/memory.h"
#include "gradcomp/rng.h"
#include "gradcomp/wire.h"

namespace gradcomp {

namespace detail {

namespace {
// The paper's four warm-up densities: 1 - 0.75, 1 - 0.9375, 1 - 0.984375, 1 - 0.996.
// The last is 4^-4 = 0.00390625 (the paper rounds sparsity to 99.6%).
constexpr double kWarmupFirst = 0.25;
constexpr int kWarmupStages = 4;
}  // namespace

double dgc_warmup_steps(double warmup_epochs, std::uint64_t steps_per_epoch,
                        std::uint64_t total_steps) {
  if (!(warmup_epochs > 0.0) || steps_per_epoch == 0) return 0.0;
  const double asked = warmup_epochs * static_cast<double>(steps_per_epoch);
  if (total_steps == 0) return asked;
  return std::min(asked, kDgcWarmupMaxShare * static_cast<double>(total_steps));
}

double dgc_stage_density(int stage) { return std::ldexp(kWarmupFirst, -2 * stage); }

double dgc_density(double target, double warmup_epochs, std::uint64_t step,
                   std::uint64_t steps_per_epoch, std::uint64_t total_steps) {
  const double total = dgc_warmup_steps(warmup_epochs, steps_per_epoch, total_steps);
  if (!(total > 0.0)) return target;
  const double pos = static_cast<double>(kWarmupStages) * static_cast<double>(step) / total;
  if (!(pos < kWarmupStages)) return target;
  const int stage = static_cast<int>(pos);  // pos >= 0: truncation is floor
  return std::max(target, dgc_stage_density(stage));
}

double dgc_max_density(double target, double warmup_epochs) {
  return warmup_epochs > 0.0 ? std::max(target, kWarmupFirst) : target;
}

DgcOptions DgcOptions::from(const Params& p) {
  DgcOptions o;
  o.density = p.get_float("density");
  o.momentum = static_cast<float>(p.get_float("momentum"));
  o.nesterov = p.get_bool("nesterov");
  o.clip = p.get_float("clip");
  o.warmup_epochs = p.get_float("warmup_epochs");
  o.exact = p.get_choice("select") == "exact";
  o.sample = p.get_float("sample");
  o.masking = p.get_bool("masking");
  o.correction = p.get_bool("correction");
  o.lr_rescale = p.get_bool("lr_rescale");
  return o;
}

std::size_t DgcOptions::count(std::size_t n, const StepContext& ctx) const {
  const double d =
      dgc_density(density, warmup_epochs, ctx.step, ctx.steps_per_epoch, ctx.total_steps);
  return kernels::count_for_fraction(d, n);
}

std::size_t DgcOptions::step_max_encoded_bytes(const Codec& codec, std::size_t n,
                                               const StepContext& ctx) const {
  const std::size_t k = count(n, ctx);
  const std::size_t c = std::min(n, exact ? k : kernels::sampled_max_count(k));
  return std::min(codec.max_encoded_bytes(n),
                  kHeaderBytes + sparse_payload_bytes(c, SparseValues::kFp32));
}

float DgcOptions::clip_scale(double norm, std::uint32_t world) const {
  if (clip <= 0.0) return 1.0f;
  const double thr = clip / std::sqrt(static_cast<double>(std::max<std::uint32_t>(world, 1)));
  if (!(norm > thr)) return 1.0f;  // also for a non-finite norm: selection reports it
  return static_cast<float>(thr / norm);
}

double dgc_l2_norm(std::span<const float> g) {
  double acc[4] = {0, 0, 0, 0};
  const std::size_t n = g.size();
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    for (int j = 0; j < 4; ++j) {
      const double x = g[i + j];
      acc[j] += x * x;
    }
  }
  for (; i < n; ++i) acc[0] += static_cast<double>(g[i]) * g[i];
  return std::sqrt((acc[0] + acc[1]) + (acc[2] + acc[3]));
}

}  // namespace detail

namespace {

constexpr const char* kOp = "dgc compress";

using detail::DgcOptions;

std::string format_double(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

// The plain codec whose decoder accepts every message of a DGC memory with these
// parameters (see the file comment).
std::string message_codec_spec(const Params& p) {
  const double r = detail::dgc_max_density(p.get_float("density"), p.get_float("warmup_epochs"));
  return "topk:ratio=" + format_double(r) +
         ",select=sampled,values=fp32,sample=" + format_double(p.get_float("sample"));
}

class Dgc final : public Memory {
 public:
  Dgc(std::string spec, const DgcOptions& o, std::shared_ptr<const Codec> codec, std::size_t n)
      : spec_(std::move(spec)), o_(o), codec_(std::move(codec)), n_(n) {
    if (n > kMaxElements) {
      throw InvalidArgument("dgc: bucket of " + std::to_string(n) +
                            " elements > the wire format's limit " + std::to_string(kMaxElements));
    }
    if (o_.correction) u_.assign(n, 0.0f);
    v_.assign(n, 0.0f);
    // Worst-case selection size over the schedule, so the index scratch is sized once.
    max_count_ = kernels::sampled_max_count(
        kernels::count_for_fraction(detail::dgc_max_density(o_.density, o_.warmup_epochs), n));
  }

  const Codec& codec() const override { return *codec_; }
  std::string spec() const override { return spec_; }
  std::size_t size() const override { return n_; }

  std::size_t compress(std::span<const float> grad, const StepContext& ctx,
                       std::span<std::byte> out) override {
    if (grad.size() != n_) {
      throw InvalidArgument(std::string(kOp) + ": gradient of " + std::to_string(grad.size()) +
                            " elements, memory holds " + std::to_string(n_));
    }
    if (out.size() < max_encoded_bytes()) {
      throw InvalidArgument(std::string(kOp) + ": output buffer of " + std::to_string(out.size()) +
                            " bytes < max_encoded_bytes " + std::to_string(max_encoded_bytes()));
    }
    rescale_to(ctx.lr);
    const std::size_t k = o_.count(n_, ctx);
    // Without clipping (the default), the accumulation is fused into the selection's
    // first pass (detail/pending.h): the sampled selection then reads g, u and v once,
    // as error feedback's top-k does (topk.cc). Clipping needs ||g|| before any update,
    // and its clipped copy lives in scratch slot 1, which the selection uses: separate
    // passes then.
    std::span<const std::uint32_t> idx;
    const float scale = clip_scale(grad, ctx.world);
    if (scale == 1.0f) {
      const detail::Pending pending{
          [&](std::size_t b, std::size_t e) { accumulate(grad, b, e); },
          [&](std::size_t b, std::size_t e, float* dst) { peek(grad, b, e, dst); }};
      idx = select(k, ctx, &pending);
    } else {
      accumulate(clipped(grad, scale));
      idx = select(k, ctx);
    }
    const std::size_t payload =
        detail::write_sparse(v_, idx, detail::SparseValues::kFp32, out.subspan(kHeaderBytes));
    write_header(out, codec_->wire_id(), codec_->config_tag(), n_, payload);

    // The sent values leave the accumulator; their momentum stops too (masking).
    float* v = v_.data();
    for (const std::uint32_t i : idx) v[i] = 0.0f;
    if (o_.correction && o_.masking) {
      float* u = u_.data();
      for (const std::uint32_t i : idx) u[i] = 0.0f;
    }
    return kHeaderBytes + payload;
  }

  // This step's density: the sampled selection's largest count of fp32 entries.
  std::size_t step_max_encoded_bytes(const StepContext& ctx) const override {
    return o_.step_max_encoded_bytes(*codec_, n_, ctx);
  }

  // DGC selecting everything: clip, accumulate, send all of v, clear it, and (masking)
  // clear the momentum of every sent entry, i.e. all of it.
  void compress_dense(std::span<const float> grad, const StepContext& ctx,
                      std::span<float> out) override {
    if (grad.size() != n_ || out.size() != n_) {
      throw InvalidArgument(std::string(kOp) + " compress_dense: gradient of " +
                            std::to_string(grad.size()) + " and output of " +
                            std::to_string(out.size()) + " elements, memory holds " +
                            std::to_string(n_));
    }
    rescale_to(ctx.lr);
    accumulate(clipped(grad, ctx));
    std::copy(v_.begin(), v_.end(), out.begin());
    std::fill(v_.begin(), v_.end(), 0.0f);
    if (o_.correction && o_.masking) std::fill(u_.begin(), u_.end(), 0.0f);
  }

  std::vector<StateBuffer> state() override {
    std::vector<StateBuffer> out;
    if (o_.correction) out.push_back({"momentum", u_});
    out.push_back({"accumulator", v_});
    if (o_.lr_rescale) out.push_back({"learning_rate", lr_});
    return out;
  }

  // Without momentum correction the velocity is the optimizer's (on the sparse mean):
  // the paper's "gradient dropping + momentum" baseline.
  bool carries_momentum() const override { return o_.correction; }

 private:
  // lr_rescale: v's unsent updates, formed at the rate lr_[0], scaled to `lr`. A rate
  // that is not positive (a caller that gives none) leaves v as it is.
  void rescale_to(float lr) {
    if (!o_.lr_rescale || !(lr > 0.0f)) return;
    const float formed_at = lr_[0];
    if (formed_at > 0.0f && formed_at != lr) {
      const float r = formed_at / lr;
      for (float& x : v_) x *= r;
    }
    lr_[0] = lr;
  }

  // The gradient, locally clipped when clipping is on. The clipped gradient goes through
  // memory, so that s*g is rounded once on its own whatever the compiler contracts
  // (scratch slot 1 is free until select()).
  std::span<const float> clipped(std::span<const float> grad, const StepContext& ctx) const {
    return clipped(grad, clip_scale(grad, ctx.world));
  }
  std::span<const float> clipped(std::span<const float> grad, float s) const {
    if (s == 1.0f) return grad;
    const auto out = detail::scratch<float>(1, n_);
    for (std::size_t i = 0; i < n_; ++i) out[i] = s * grad[i];
    return out;
  }

  // min(1, clip * W^-1/2 / ||g||) as a float factor; 1 when clipping is off.
  float clip_scale(std::span<const float> g, std::uint32_t world) const {
    if (o_.clip <= 0.0) return 1.0f;
    return o_.clip_scale(detail::dgc_l2_norm(g), world);
  }

  // u, v update with the (clipped) gradient. m*u + g is an explicit fma, so the result
  // does not depend on whether the compiler contracts (tests replay it with std::fma);
  // Nesterov's m*(u+g) is stored to u, which keeps GCC from fusing it into v's sum.
  void accumulate(std::span<const float> grad) { accumulate(grad, 0, n_); }

  // The same on [begin, end) (the fused path forms v range by range).
  void accumulate(std::span<const float> grad, std::size_t begin, std::size_t end) {
    const float* g = grad.data();
    float* v = v_.data();
    if (!o_.correction) {
      for (std::size_t i = begin; i < end; ++i) v[i] += g[i];
      return;
    }
    float* u = u_.data();
    const float m = o_.momentum;
    if (o_.nesterov) {
      for (std::size_t i = begin; i < end; ++i) {
        const float ui = m * (u[i] + g[i]);
        u[i] = ui;
        v[i] = (v[i] + ui) + g[i];
      }
    } else {
      for (std::size_t i = begin; i < end; ++i) {
        const float ui = std::fma(m, u[i], g[i]);
        u[i] = ui;
        v[i] += ui;
      }
    }
  }

  // What accumulate would make v[begin, end), into dst, changing nothing.
  void peek(std::span<const float> grad, std::size_t begin, std::size_t end, float* dst) const {
    const float* g = grad.data();
    const float* v = v_.data();
    if (!o_.correction) {
      for (std::size_t i = begin; i < end; ++i) dst[i - begin] = v[i] + g[i];
      return;
    }
    const float* u = u_.data();
    const float m = o_.momentum;
    for (std::size_t i = begin; i < end; ++i) {
      if (o_.nesterov) {
        float ui = m * (u[i] + g[i]);
        asm("" : "+x"(ui));  // as accumulate's store to u: no contraction into the sum
        dst[i - begin] = (v[i] + ui) + g[i];
      } else {
        dst[i - begin] = v[i] + std::fma(m, u[i], g[i]);
      }
    }
  }

  // The selected indices of |v|, ascending, in scratch slot 0.
  // (v formed by pending if given)
  std::span<const std::uint32_t> select(std::size_t k, const StepContext& ctx,
                                        const detail::Pending* pending = nullptr) const {
    const std::size_t cap = o_.exact ? k : kernels::sampled_max_count(k);
    const auto out = detail::scratch<std::uint32_t>(0, cap, max_count_);
    std::size_t c = 0;
    if (!o_.exact) {
      const CounterRng rng = CounterRng::for_step(ctx, RngScope::kPerRank);
      c = kernels::select_topk_sampled(v_, k, o_.sample, rng, out, kOp, pending);
    } else {
      c = kernels::select_topk_exact(v_, k, out, kOp, pending);
    }
    return out.first(c);
  }

  std::string spec_;
  DgcOptions o_;
  std::shared_ptr<const Codec> codec_;
  std::size_t n_;
  std::size_t max_count_ = 0;
  std::vector<float> u_;  // momentum (empty with correction=0)
  std::vector<float> v_;  // accumulated velocity
  // lr_rescale: the learning rate v's contents are formed at (0: none yet). A vector so
  // that it is checkpointed with u and v (state()).
  std::vector<float> lr_ = std::vector<float>(1, 0.0f);
};

// The run's header line: the warm-up's stages, bounded by the run's length.
std::string dgc_schedule(const Params& p, const RunShape& run) {
  using detail::number_text;
  using detail::steps_text;
  const double target = p.get_float("density");
  const double warmup_epochs = p.get_float("warmup_epochs");
  if (!(warmup_epochs > 0.0) || target >= detail::dgc_stage_density(0)) {
    return "dgc: density " + number_text(target, 6) + " from the first step (no warm-up)";
  }
  const double steps =
      detail::dgc_warmup_steps(warmup_epochs, run.steps_per_epoch, run.total_steps);
  if (!(steps > 0.0)) {
    return "dgc: density " + number_text(target, 6) +
           " from the first step (warm-up off: steps per epoch unknown)";
  }
  const double asked = warmup_epochs * static_cast<double>(run.steps_per_epoch);
  std::string line = "dgc warm-up: " + steps_text(steps) + " steps";
  if (run.total_steps > 0) line += " of " + std::to_string(run.total_steps);
  line += " (" + number_text(warmup_epochs) + " epochs";
  if (steps < asked) {
    line += " capped at 1/" + number_text(1.0 / detail::kDgcWarmupMaxShare) + " of the run";
  }
  line += "), 4 stages of " + steps_text(steps / 4) + " steps at density ";
  for (int j = 0; j < 4; ++j) {
    line += number_text(std::max(target, detail::dgc_stage_density(j)), 6) + ", ";
  }
  line += "then " + number_text(target, 6);
  return line;
}

// A warm-up the run cannot hold as asked: capped, or off for want of an epoch's length.
std::vector<std::string> dgc_warnings(const Params& p, const RunShape& run) {
  using detail::number_text;
  using detail::steps_text;
  const double density = p.get_float("density");
  const double warmup_epochs = p.get_float("warmup_epochs");
  const bool warms_up = warmup_epochs > 0.0 && density < detail::dgc_stage_density(0);
  if (warms_up && run.steps_per_epoch == 0) {
    return {"warning: dgc: warmup_epochs=" + number_text(warmup_epochs) +
            " but the steps per epoch are unknown: no warm-up, density " + number_text(density, 6) +
            " from the first step"};
  }
  if (!warms_up || run.total_steps == 0) return {};
  const double asked = warmup_epochs * static_cast<double>(run.steps_per_epoch);
  const double steps =
      detail::dgc_warmup_steps(warmup_epochs, run.steps_per_epoch, run.total_steps);
  if (!(steps < asked)) return {};
  return {"warning: dgc: warmup_epochs=" + number_text(warmup_epochs) + " (" + steps_text(asked) +
          " steps) " +
          (asked >= static_cast<double>(run.total_steps) ? "covers the whole run of "
                                                         : "is more than 1/8 of the run's ") +
          std::to_string(run.total_steps) + " steps; capped at " + steps_text(steps) +
          " steps so that density " + number_text(density, 6) + " holds for 7/8 of the run"};
}

}  // namespace

void register_dgc(CodecRegistry& registry) {
  registry.add_memory(
      {.name = "dgc",
       .summary = "Deep Gradient Compression: momentum correction and masking, local clipping, "
                  "density warm-up, sampled top-k of the accumulated velocity (topk messages)",
       .params = {float_param("density", 0.001, 0.0, 1.0,
                              "fraction of entries sent after warm-up, k = ceil(density*n)", true),
                  float_param("momentum", 0.9, 0.0, 1.0,
                              "momentum m of the correction; must equal the optimizer's --momentum "
                              "(which then skips momentum for compressed tensors)"),
                  bool_param("nesterov", false, "Nesterov momentum: u = m*(u+g); v = v + u + g"),
                  float_param("clip", 0.0, 0.0, 1e30,
                              "local gradient clipping: L2 norm clipped at clip*W^-1/2 per bucket "
                              "(clip = the global clip norm; 0 = off)"),
                  float_param(
                      "warmup_epochs", 4.0, 0.0, 1e6,
                      "density warm-up 0.25, 0.0625, 0.015625, 0.0039 -> density in four equal "
                      "stages over this many epochs, at most 1/8 of the run's steps when the "
                      "run's length is known (fractions allowed; paper: 4; 0 = off)"),
                  choice_param("select", "sampled", {"sampled", "exact"},
                               "sampled: DGC's sampled threshold, 0.8k..1.3k entries; exact: radix "
                               "select, exactly k"),
                  float_param("sample", 0.01, 0.0, 1.0,
                              "sampled: fraction of |v| sampled for the threshold (at least "
                              "2/density values)",
                              true),
                  bool_param("masking", true, "momentum factor masking: zero u where v was sent"),
                  bool_param("correction", true,
                             "momentum correction; 0: v = v + g and the optimizer keeps its own "
                             "momentum (gradient dropping with momentum, the paper's baseline)"),
                  bool_param("lr_rescale", true,
                             "keep v's unsent updates at the learning rate they were formed at: "
                             "v = v * lr_prev / lr when the rate changes (0: as in the paper)")},
       .examples = {"dgc:density=0.01", "dgc:density=0.001,warmup_epochs=0.5",
                    "dgc:density=0.05,select=exact,warmup_epochs=0",
                    "dgc:density=0.01,nesterov=1,clip=5", "dgc:masking=0",
                    "dgc:correction=0,warmup_epochs=0"},
       .codec_spec = message_codec_spec,
       .make = [](const Params& p, std::shared_ptr<const Codec> codec,
                  std::size_t n) -> std::unique_ptr<Memory> {
         return std::make_unique<Dgc>("dgc:" + p.canonical(), DgcOptions::from(p), std::move(codec),
                                      n);
       },
       .schedule = dgc_schedule,
       .warnings = dgc_warnings});
}

}  // namespace gradcomp
