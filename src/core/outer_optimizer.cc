#include "gradcomp/outer_optimizer.h"

#include <vector>

#include "gradcomp/error.h"
#include "gradcomp/registry.h"

namespace gradcomp {

namespace {

constexpr std::string_view kKnown = "average, sgd, nesterov, sparseloco";

std::vector<ParamDef> param_defs(std::string_view rule) {
  const ParamDef lr = float_param("lr", rule == "nesterov" ? 0.7 : 1.0, 0.0, 1e6,
                                  "outer learning rate", /*min_exclusive=*/true);
  if (rule == "average") return {};
  if (rule == "sgd")
    return {lr, float_param("momentum", 0.0, 0.0, 0.999999, "heavy-ball momentum")};
  if (rule == "nesterov") {
    return {lr, float_param("momentum", 0.9, 0.0, 0.999999, "Nesterov momentum",
                            /*min_exclusive=*/true)};
  }
  if (rule == "sparseloco") {
    return {lr, float_param("decay", 0.95, 0.0, 1.0, "decay of each worker's error feedback")};
  }
  throw InvalidArgument("outer optimizer '" + std::string(rule) +
                        "' is unknown; known: " + std::string(kKnown));
}

}  // namespace

OuterOptimizer OuterOptimizer::parse(std::string_view spec) {
  const SpecNode node = parse_spec(spec);
  if (node.inner) {
    throw InvalidArgument("outer optimizer '" + std::string(spec) +
                          "': takes no inner spec; known: " + std::string(kKnown));
  }
  const std::vector<ParamDef> defs = param_defs(node.name);
  const Params params = resolve_params("outer optimizer " + node.name, defs, node);
  OuterOptimizer o;
  if (node.name != "average") o.lr_ = params.get_float("lr");
  if (node.name == "sgd" || node.name == "nesterov") o.momentum_ = params.get_float("momentum");
  o.nesterov_ = node.name == "nesterov";
  if (node.name == "sparseloco") o.residual_decay_ = params.get_float("decay");
  const std::string canonical = params.canonical();
  o.spec_ = canonical.empty() ? node.name : node.name + ":" + canonical;
  return o;
}

void OuterOptimizer::update(std::span<float> weights, std::span<const float> mean_delta,
                            std::span<float> momentum) const {
  if (mean_delta.size() != weights.size() ||
      (has_momentum() && momentum.size() != weights.size())) {
    throw InvalidArgument("outer optimizer " + spec_ + ": " + std::to_string(weights.size()) +
                          " weights, " + std::to_string(mean_delta.size()) + " deltas, " +
                          std::to_string(momentum.size()) + " momenta");
  }
  // float arithmetic in torch.optim.SGD's order, so that its results are matched.
  const auto lr = static_cast<float>(lr_);
  const std::size_t n = weights.size();
  if (!has_momentum()) {
    for (std::size_t i = 0; i < n; ++i) weights[i] -= lr * mean_delta[i];
    return;
  }
  const auto mu = static_cast<float>(momentum_);
  for (std::size_t i = 0; i < n; ++i) {
    const float m = mu * momentum[i] + mean_delta[i];
    momentum[i] = m;
    const float d = nesterov_ ? mean_delta[i] + mu * m : m;
    weights[i] -= lr * d;
  }
}

}  // namespace gradcomp
