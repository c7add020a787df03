// threshold: gradient dropping (Aji & Heafield, EMNLP 2017), as in the seed
// "DeepGradientCompression" README: one absolute threshold for the whole bucket.
//   thr = tau if tau > 0, else the percentile-th percentile of |p| (nearest rank,
//   default 99); send every nonzero p_i with |p_i| >= thr; error feedback keeps the rest.
// mask: the seed's "Masking" ablation: the same selection on the raw gradient g with
//   thr = tau, or the k-th largest |g| with k = ceil(ratio * n) (ties at thr are all
//   kept), and NO memory: dropped entries are gone, which is how the seed's accuracy
//   table was made (its 0.1% row collapses).
// Wire payload (both; detail/sparse_message.h):
//   [0,4) count c | [4, 4+4c) u32 indices, strictly increasing | [4+4c, 4+8c) fp32 values.
//   At most 4 + 8n bytes (ties or a low tau can select everything).
// Not linear: ranks allgather messages and scatter-add each.
// Zeros are never sent (an index costs 4 bytes and adds nothing), so an all-zero
// bucket gives an empty message whatever the threshold.
#include <algorithm>
#include <string>

#include "codecs.h"
#include "detail/scratch.h"
#include "detail/sparse_message.h"
#include "gradcomp/kernels/select.h"
#include "gradcomp/wire.h"

namespace gradcomp {

namespace {

using detail::SparseValues;

class ThresholdCodec final : public Codec {
 public:
  // rule: how thr is chosen when tau == 0 — the `fraction`-quantile (threshold) or the
  // k-th largest with k = ceil(fraction * n) (mask).
  enum class Rule : std::uint8_t { kPercentile, kKeepRatio };

  ThresholdCodec(CodecIdentity id, bool memory, double tau, Rule rule, double fraction)
      : Codec(std::move(id),
              CodecTraits{
                  .linear = false, .unbiased = false, .needs_memory = memory, .stochastic = false}),
        fixed_(tau > 0.0),
        tau_bits_(std::max<std::uint32_t>(kernels::abs_bits(static_cast<float>(tau)), 1)),
        rule_(rule),
        fraction_(fraction),
        op_encode_(name() + " encode"),
        op_decode_(name() + " decode") {}

 protected:
  std::size_t max_payload_bytes(std::size_t n) const override {
    return detail::sparse_payload_bytes(n, SparseValues::kFp32);
  }

  // The count the rule asks for (ties at the threshold, and zeros, change it a little);
  // a fixed tau gives no expectation, so the bound stands and a gathering reducer sends
  // such a bucket dense when the bound outweighs the dense allreduce.
  std::size_t planned_payload_bytes(std::size_t n, const StepContext& /*ctx*/) const override {
    if (fixed_ || n == 0) return max_payload_bytes(n);
    const std::size_t count = rule_ == Rule::kPercentile
                                  ? n - kernels::count_for_fraction(fraction_, n) + 1
                                  : kernels::count_for_fraction(fraction_, n);
    return detail::sparse_payload_bytes(std::min(count, n), SparseValues::kFp32);
  }

  std::size_t encode_payload(std::span<const float> in, const StepContext& /*ctx*/,
                             std::span<std::byte> payload,
                             PayloadCrc* /*payload_crc*/) const override {
    return detail::write_sparse(in, select(in), SparseValues::kFp32, payload);
  }

  std::size_t encode_payload_feedback(std::span<float> p, const StepContext& /*ctx*/,
                                      std::span<std::byte> payload,
                                      PayloadCrc* /*payload_crc*/) const override {
    const auto idx = select(p);
    const std::size_t bytes = detail::write_sparse(p, idx, SparseValues::kFp32, payload);
    detail::subtract_sent(p, idx, SparseValues::kFp32);
    return bytes;
  }

  void decode_payload_add(std::span<const std::byte> payload, std::span<float> out,
                          float alpha) const override {
    detail::decode_sparse_add(payload, out, alpha, SparseValues::kFp32, 0, out.size(), op_decode_);
  }

 private:
  // The threshold's bit pattern (see kernels::abs_bits).
  std::uint32_t threshold_bits(std::span<const float> x) const {
    if (fixed_) return tau_bits_;
    const std::size_t n = x.size();
    if (n == 0) return 1;
    std::size_t k = 0;
    if (rule_ == Rule::kPercentile) {
      // Nearest rank: the rank-th smallest with rank = ceil(R/100 * n), i.e. the
      // (n - rank + 1)-th largest.
      k = n - kernels::count_for_fraction(fraction_, n) + 1;
    } else {
      k = kernels::count_for_fraction(fraction_, n);
    }
    return kernels::kth_largest_abs_bits(x, k, op_encode_);
  }

  // Indices of the nonzero |x| >= thr, ascending, in scratch slot 0.
  std::span<const std::uint32_t> select(std::span<const float> x) const {
    const std::uint32_t thr = std::max<std::uint32_t>(threshold_bits(x), 1);
    const auto out = detail::scratch<std::uint32_t>(0, x.size());
    return out.first(kernels::select_at_least(x, thr, out, op_encode_));
  }

  bool fixed_;              // tau > 0
  std::uint32_t tau_bits_;  // |float(tau)|, at least the smallest subnormal
  Rule rule_;
  double fraction_;
  std::string op_encode_;
  std::string op_decode_;
};

constexpr double kMaxTau = 3.4028234663852886e38;  // FLT_MAX: tau is compared as a float

}  // namespace

void register_threshold(CodecRegistry& registry) {
  registry.add(
      {.name = "threshold",
       .wire_id = wire_id(WireId::kThreshold),
       .summary = "gradient dropping: every |p| >= thr (fixed, or a percentile of |p|)",
       .traits = {.linear = false, .unbiased = false, .needs_memory = true},
       .params = {float_param("tau", 0.0, 0.0, kMaxTau,
                              "fixed absolute threshold; 0 (default) = use the percentile"),
                  float_param("percentile", 99.0, 0.0, 100.0,
                              "when tau=0: thr = this percentile of |p| (nearest rank); "
                              "99 sends about 1% of the entries",
                              true)},
       .examples = {"threshold:tau=0.5", "threshold:percentile=50", "threshold:percentile=100"},
       .make = [](CodecIdentity id, const Params& p) -> std::unique_ptr<Codec> {
         return std::make_unique<ThresholdCodec>(std::move(id), true, p.get_float("tau"),
                                                 ThresholdCodec::Rule::kPercentile,
                                                 p.get_float("percentile") / 100.0);
       }});
  registry.add(
      {.name = "mask",
       .wire_id = wire_id(WireId::kMask),
       .summary = "masking ablation (no memory): keep |g| >= thr, drop the rest for good",
       .traits = {.linear = false, .unbiased = false, .needs_memory = false},
       .params = {float_param("ratio", 0.01, 0.0, 1.0,
                              "fraction kept when tau=0: thr = the ceil(ratio*n)-th largest "
                              "|g| (ties at thr are kept too)",
                              true),
                  float_param("tau", 0.0, 0.0, kMaxTau,
                              "fixed absolute threshold; 0 (default) = use ratio")},
       .examples = {"mask:ratio=0.1", "mask:ratio=1", "mask:tau=1.5"},
       .make = [](CodecIdentity id, const Params& p) -> std::unique_ptr<Codec> {
         return std::make_unique<ThresholdCodec>(std::move(id), false, p.get_float("tau"),
                                                 ThresholdCodec::Rule::kKeepRatio,
                                                 p.get_float("ratio"));
       }});
}

}  // namespace gradcomp
