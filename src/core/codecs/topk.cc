// topk: top-k sparsification with error feedback (Stich et al., NeurIPS 2018; the
// selection DGC uses, Lin et al., ICLR 2018, arXiv 1712.01887).
//   k = ceil(ratio * n); send the k entries of p = g + e with the largest |p| (ties: lower
//   index) as (index, value) pairs; error feedback keeps e = p with the sent entries
//   zeroed. select=exact: radix select, exactly k entries. select=sampled: DGC's sampled
//   threshold, between 0.8k and max(k, floor(1.3k)) entries. auto: sampled for n >= 2^18.
// Wire payload (detail/sparse_message.h):
//   [0,4) count c | [4, 4+4c) u32 indices, strictly increasing | values: c fp32, or c fp16
//   (u16, saturating at +-65504) with values=fp16. 4 + 8c (or 4 + 6c) bytes.
// Not linear: ranks allgather messages and scatter-add each (decode_add), then divide by W.
#include <string>

#include "codecs.h"
#include "detail/pending.h"
#include "detail/scratch.h"
#include "detail/sparse_message.h"
#include "gradcomp/kernels/select.h"
#include "gradcomp/rng.h"
#include "gradcomp/wire.h"

namespace gradcomp {

namespace {

using detail::SparseValues;

enum class Select : std::uint8_t { kAuto, kExact, kSampled };

// select=auto switches to the sampled threshold from this size on: below it the exact
// radix select is already only a few microseconds per 64k elements.
constexpr std::size_t kAutoSampledFrom = 262144;

class TopkCodec final : public Codec {
 public:
  TopkCodec(CodecIdentity id, double ratio, Select select, SparseValues values, double sample)
      : Codec(std::move(id), CodecTraits{.linear = false,
                                         .unbiased = false,
                                         .needs_memory = true,
                                         .stochastic = select != Select::kExact}),
        ratio_(ratio),
        select_(select),
        values_(values),
        sample_(sample) {}

 protected:
  std::size_t max_payload_bytes(std::size_t n) const override {
    return detail::sparse_payload_bytes(max_count(n), values_);
  }

  std::size_t encode_payload(std::span<const float> in, const StepContext& ctx,
                             std::span<std::byte> payload,
                             PayloadCrc* /*payload_crc*/) const override {
    return detail::write_sparse(in, select(in, ctx), values_, payload);
  }

  // e <- p, then the sent positions lose what was sent: zero (fp32 values) or the
  // fp16 rounding error. Touches only the k sent entries.
  std::size_t encode_payload_feedback(std::span<float> p, const StepContext& ctx,
                                      std::span<std::byte> payload,
                                      PayloadCrc* /*payload_crc*/) const override {
    const auto idx = select(p, ctx);
    const std::size_t bytes = detail::write_sparse(p, idx, values_, payload);
    detail::subtract_sent(p, idx, values_);
    return bytes;
  }

  // ef(topk) / efm(topk) with p formed inside the selection's first pass. Full passes
  // over memory, sampled selection (select=auto from 2^18, select=sampled):
  //   1. forms p = g + e in e block by block, and in the same pass collects every index
  //      with |p| >= the sampled threshold (the sample of ~1% of p is peeked from g and e
  //      before the pass); reads g and e, writes e;
  //   then only the <= 1.3k selected entries are touched: their values go into the message
  //   and e keeps p with them zeroed (e = p - decode(msg)).
  // That is one pass where the unfused path made two (e += g, then the selection over p).
  // The rare corrections (threshold too low: one more read of p per retry; too many
  // candidates: exact selection, two reads) are as before. Exact selection: pass 1 forms
  // p and builds the histogram, pass 2 reads p to gather the candidates (was three).
  std::size_t encode_payload_with_residual(const ResidualUpdate& update, std::span<float> e,
                                           const StepContext& ctx, std::span<std::byte> payload,
                                           PayloadCrc* /*payload_crc*/) const override {
    const detail::Pending pending = detail::residual_pending(update, e);
    const auto idx = select(e, ctx, &pending);
    const std::size_t bytes = detail::write_sparse(e, idx, values_, payload);
    detail::subtract_sent(e, idx, values_);
    return bytes;
  }

  void decode_payload_add(std::span<const std::byte> payload, std::span<float> out,
                          float alpha) const override {
    const std::size_t n = out.size();
    // Exact mode promises exactly k entries; sampled mode at most max(k, floor(1.3k)).
    const std::size_t min = sampled(n) ? 0 : k(n);
    detail::decode_sparse_add(payload, out, alpha, values_, min, max_count(n), "topk decode");
  }

 private:
  std::size_t k(std::size_t n) const { return kernels::count_for_fraction(ratio_, n); }
  bool sampled(std::size_t n) const {
    return select_ == Select::kSampled || (select_ == Select::kAuto && n >= kAutoSampledFrom);
  }
  std::size_t max_count(std::size_t n) const {
    return sampled(n) ? kernels::sampled_max_count(k(n)) : k(n);
  }

  // The selected indices, ascending, in scratch slot 0 (x formed by pending if given).
  std::span<const std::uint32_t> select(std::span<const float> x, const StepContext& ctx,
                                        const detail::Pending* pending = nullptr) const {
    const std::size_t n = x.size();
    const auto out = detail::scratch<std::uint32_t>(0, max_count(n));
    std::size_t c = 0;
    if (sampled(n)) {
      const CounterRng rng = CounterRng::for_step(ctx, RngScope::kPerRank);
      c = kernels::select_topk_sampled(x, k(n), sample_, rng, out, "topk encode", pending);
    } else {
      c = kernels::select_topk_exact(x, k(n), out, "topk encode", pending);
    }
    return out.first(c);
  }

  double ratio_;
  Select select_;
  SparseValues values_;
  double sample_;
};

}  // namespace

void register_topk(CodecRegistry& registry) {
  registry.add(
      {.name = "topk",
       .wire_id = wire_id(WireId::kTopk),
       .summary = "top-k sparsification: the ceil(ratio*n) largest |p| as (index, value) pairs",
       .traits = {.linear = false, .unbiased = false, .needs_memory = true, .stochastic = true},
       .params = {float_param("ratio", 0.01, 0.0, 1.0,
                              "fraction of entries sent, k = ceil(ratio*n)", true),
                  choice_param("select", "auto", {"auto", "exact", "sampled"},
                               "exact: radix select, exactly k; sampled: DGC's sampled "
                               "threshold, 0.8k..1.3k entries; auto: sampled when "
                               "n >= 262144"),
                  choice_param("values", "fp32", {"fp32", "fp16"},
                               "value precision on the wire (fp16 saturates at 65504; "
                               "error feedback keeps the rounding error)"),
                  float_param("sample", 0.01, 0.0, 1.0,
                              "sampled mode: fraction of |p| sampled for the threshold "
                              "(at least 2/ratio values)",
                              true)},
       .examples = {"topk:ratio=0.5,select=exact", "topk:ratio=0.07,select=exact",
                    "topk:ratio=0.001,select=sampled", "topk:ratio=0.05,select=sampled,sample=0.1",
                    "topk:values=fp16", "topk:ratio=1,values=fp16",
                    "topk:ratio=0.02,select=sampled,values=fp16"},
       .make = [](CodecIdentity id, const Params& p) -> std::unique_ptr<Codec> {
         const std::string& s = p.get_choice("select");
         const Select select = s == "exact"     ? Select::kExact
                               : s == "sampled" ? Select::kSampled
                                                : Select::kAuto;
         const SparseValues values =
             p.get_choice("values") == "fp16" ? SparseValues::kFp16 : SparseValues::kFp32;
         return std::make_unique<TopkCodec>(std::move(id), p.get_float("ratio"), select, values,
                                            p.get_float("sample"));
       }});
}

}  // namespace gradcomp
