// Error feedback (Seide et al. 2014; Stich et al. 2018; Karimireddy et al. 2019), as in
// docs/algorithms/error-feedback.md:
//   p <- g + e ;  msg <- encode(p) ;  e <- p - decode(msg)
// The residual buffer holds p during the step and e afterwards. Both memories hand the
// codec the residual and a ResidualUpdate (codec.h) and let Codec::encode_with_residual
// form p where it reads it: the streaming codecs (2bit with a fixed threshold, 1bit,
// signsgd) and top-k's sampled selection make one pass over g and e; codecs without a
// fused path add g in one pass and then run encode_feedback (e.g. top-k's exact
// selection, 2bit's adaptive threshold: see their files). Conservation holds exactly for
// integer-valued inputs: sum of decoded messages + e_final = sum of g.
// efm(...) (momentum correction, memory.h) feeds the momentum u into the same residual,
// through the same hook.
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
    return codec_->encode_with_residual(ResidualUpdate(grad), residual_, ctx, out);
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
    check_momentum(ctx);
    return codec_->encode_with_residual(ResidualUpdate(grad, momentum_, ctx.momentum, ctx.nesterov),
                                        residual_, ctx, out);
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
  static void check_momentum(const StepContext& ctx) {
    if (!(ctx.momentum >= 0.0f && ctx.momentum < 1.0f)) {
      throw InvalidArgument("efm compress: momentum " + std::to_string(ctx.momentum) +
                            " outside [0, 1)");
    }
  }

  // u <- m*u + g ; e <- e + u (Nesterov: u <- m*(u + g) ; e <- e + u + g).
  void accumulate(std::span<const float> grad, const StepContext& ctx) {
    check_momentum(ctx);
    ResidualUpdate(grad, momentum_, ctx.momentum, ctx.nesterov)
        .apply(residual_.data(), 0, residual_.size());
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
