// Error feedback (Seide et al. 2014; Stich et al. 2018; Karimireddy et al. 2019), as in
// docs/algorithms/error-feedback.md:
//   p <- g + e ;  msg <- encode(p) ;  e <- p - decode(msg)
// The residual buffer holds p during the step and e afterwards, so a step costs one
// pass to add g plus the codec's fused encode_feedback (e.g. top-k only zeroes the k
// sent positions; 2-bit updates the residual while packing). Conservation holds
// exactly for integer-valued inputs: sum of decoded messages + e_final = sum of g.
// efm(...) (momentum correction, memory.h) feeds the momentum u into the same residual.
#include <string>
#include <utility>
#include <vector>

#include "gradcomp/error.h"
#include "gradcomp/memory.h"

namespace gradcomp {

namespace {

void check_sizes(const char* op, std::span<const float> grad, std::span<float> out, std::size_t n) {
  if (grad.size() != n || out.size() != n) {
    throw InvalidArgument(std::string(op) + " compress_dense: gradient of " +
                          std::to_string(grad.size()) + " and output of " +
                          std::to_string(out.size()) + " elements, memory holds " +
                          std::to_string(n));
  }
}

class ErrorFeedback final : public Memory {
 public:
  ErrorFeedback(std::shared_ptr<const Codec> codec, std::size_t n)
      : codec_(std::move(codec)), residual_(n, 0.0f) {}

  const Codec& codec() const override { return *codec_; }
  std::string spec() const override { return "ef(" + codec_->spec() + ")"; }
  std::size_t size() const override { return residual_.size(); }

  std::size_t compress(std::span<const float> grad, const StepContext& ctx,
                       std::span<std::byte> out) override {
    if (grad.size() != residual_.size()) {
      throw InvalidArgument("ef compress: gradient of " + std::to_string(grad.size()) +
                            " elements, memory holds " + std::to_string(residual_.size()));
    }
    float* e = residual_.data();
    const float* g = grad.data();
    const std::size_t n = residual_.size();
    for (std::size_t i = 0; i < n; ++i) e[i] += g[i];
    return codec_->encode_feedback(residual_, ctx, out);
  }

  void compress_dense(std::span<const float> grad, const StepContext& /*ctx*/,
                      std::span<float> out) override {
    check_sizes("ef", grad, out, residual_.size());
    float* e = residual_.data();
    for (std::size_t i = 0; i < residual_.size(); ++i) {
      out[i] = e[i] + grad[i];
      e[i] = 0.0f;
    }
  }

  std::vector<StateBuffer> state() override { return {{"residual", residual_}}; }

 private:
  std::shared_ptr<const Codec> codec_;
  std::vector<float> residual_;
};

class MomentumErrorFeedback final : public Memory {
 public:
  MomentumErrorFeedback(std::shared_ptr<const Codec> codec, std::size_t n)
      : codec_(std::move(codec)), momentum_(n, 0.0f), residual_(n, 0.0f) {}

  const Codec& codec() const override { return *codec_; }
  std::string spec() const override { return "efm(" + codec_->spec() + ")"; }
  std::size_t size() const override { return residual_.size(); }
  bool carries_momentum() const override { return true; }

  std::size_t compress(std::span<const float> grad, const StepContext& ctx,
                       std::span<std::byte> out) override {
    if (grad.size() != residual_.size()) {
      throw InvalidArgument("efm compress: gradient of " + std::to_string(grad.size()) +
                            " elements, memory holds " + std::to_string(residual_.size()));
    }
    accumulate(grad, ctx);
    return codec_->encode_feedback(residual_, ctx, out);
  }

  void compress_dense(std::span<const float> grad, const StepContext& ctx,
                      std::span<float> out) override {
    check_sizes("efm", grad, out, residual_.size());
    accumulate(grad, ctx);  // reads grad before out (which may alias it) is written
    float* e = residual_.data();
    for (std::size_t i = 0; i < residual_.size(); ++i) {
      out[i] = e[i];
      e[i] = 0.0f;
    }
  }

  std::vector<StateBuffer> state() override {
    return {{"momentum", momentum_}, {"residual", residual_}};
  }

 private:
  // u <- m*u + g ; e <- e + u (Nesterov: u <- m*(u + g) ; e <- e + u + g).
  void accumulate(std::span<const float> grad, const StepContext& ctx) {
    if (!(ctx.momentum >= 0.0f && ctx.momentum < 1.0f)) {
      throw InvalidArgument("efm compress: momentum " + std::to_string(ctx.momentum) +
                            " outside [0, 1)");
    }
    const float m = ctx.momentum;
    float* u = momentum_.data();
    float* e = residual_.data();
    const float* g = grad.data();
    const std::size_t n = residual_.size();
    if (ctx.nesterov) {
      for (std::size_t i = 0; i < n; ++i) {
        u[i] = m * (u[i] + g[i]);
        e[i] += u[i] + g[i];
      }
    } else {
      for (std::size_t i = 0; i < n; ++i) {
        u[i] = m * u[i] + g[i];
        e[i] += u[i];
      }
    }
  }

  std::shared_ptr<const Codec> codec_;
  std::vector<float> momentum_;
  std::vector<float> residual_;
};

}  // namespace

std::unique_ptr<Memory> make_momentum_error_feedback(std::shared_ptr<const Codec> codec,
                                                     std::size_t n) {
  return std::make_unique<MomentumErrorFeedback>(std::move(codec), n);
}

std::unique_ptr<Memory> make_error_feedback(std::shared_ptr<const Codec> codec, std::size_t n) {
  return std::make_unique<ErrorFeedback>(std::move(codec), n);
}

}  // namespace gradcomp
