// The outer optimizer of local-step training (local SGD, DiLoCo, SparseLoCo): what every
// worker does to its copy of the global weights with a round's mean pseudo-gradient.
//
// A round: each worker took H inner steps from the global weights x; its pseudo-gradient
// is d_r = x - x_r (global minus local). The exchange turns the d_r into their mean d
// (compressed, with error feedback per worker: gradcomp/dist/outer_loop.h), and every
// worker applies the same update to x:
//   average                     x <- x - d                  (= the mean of the x_r: local SGD)
//   sgd:lr=L,momentum=M          m <- M m + d ;  x <- x - L m
//   nesterov:lr=L,momentum=M     m <- M m + d ;  x <- x - L (d + M m)       (DiLoCo: 0.7, 0.9)
//   sparseloco:lr=L,decay=B      x <- x - L d, where each worker's error-feedback residual
//                                decays by B before it is added to the next round's d_r
//                                (SparseLoCo's local accumulator e <- B e + d_r)
// The sgd and nesterov rules are torch.optim.SGD's with dampening 0 (tests check them
// against it), so DiLoCo's published outer optimizer is what runs.
//
// Torch-free and communication-free: the exchange lives in gradcomp_dist.
#pragma once

#include <span>
#include <string>
#include <string_view>

namespace gradcomp {

class OuterOptimizer {
 public:
  // DiLoCo's outer optimizer, the default: Nesterov momentum 0.9, learning rate 0.7.
  static constexpr std::string_view kDefaultSpec = "nesterov:lr=0.7,momentum=0.9";

  // "average", "sgd:lr=1,momentum=0", "nesterov:lr=0.7,momentum=0.9",
  // "sparseloco:lr=1,decay=0.95"; missing parameters take those defaults. InvalidArgument
  // (one line naming the spec) for anything else.
  static OuterOptimizer parse(std::string_view spec);

  // The spec with every parameter written out, e.g. "nesterov:lr=0.7,momentum=0.9".
  const std::string& spec() const { return spec_; }
  double lr() const { return lr_; }
  double momentum() const { return momentum_; }
  bool nesterov() const { return nesterov_; }
  // The factor each worker's error-feedback residual is scaled by before a round's
  // compression: 1 except for sparseloco. A rule with decay < 1 needs a compressor with
  // error feedback (ef(...)); the outer loop refuses one without.
  double residual_decay() const { return residual_decay_; }
  // Whether update() reads and writes a momentum buffer (one float per weight).
  bool has_momentum() const { return momentum_ > 0.0; }

  // x <- the rule above, with mean_delta the round's mean pseudo-gradient d. momentum
  // holds m (zeros before the first round) when has_momentum(), and may be empty
  // otherwise. Spans of equal length (InvalidArgument otherwise).
  void update(std::span<float> weights, std::span<const float> mean_delta,
              std::span<float> momentum) const;

 private:
  std::string spec_;
  double lr_ = 1.0;
  double momentum_ = 0.0;
  bool nesterov_ = false;
  double residual_decay_ = 1.0;
};

}  // namespace gradcomp
