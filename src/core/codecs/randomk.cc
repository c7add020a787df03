// randomk: random-k sparsification with a shared seed (docs/algorithms/sparsification.md; Stich et
// al., "Sparsified SGD with Memory", NeurIPS 2018; Wangni et al. 2018 for the rescaled, unbiased
// form).
//   k = ceil(ratio * n) indices drawn without replacement from the RNG shared by all
//   ranks for (seed, step, bucket), so every rank picks the same indices and only the
//   values travel; rescale=1 sends p_i * n/k (unbiased, no memory needed), rescale=0
//   sends p_i (biased: run under error feedback; the fused form zeroes the sent p_i).
//
// Index generation (a pure function of (key, n, k)): Floyd's algorithm marks k
// indices in an n-bit bitmap -- for j = n-k .. n-1: t = rng.below(j, j+1); if t is
// taken, take j instead -- then a scan of the bitmap lists them in ascending order.
// O(k + n/64) time, n/8 bytes of per-thread scratch, no per-call allocation.
//
// Wire payload (after the 20-byte header):
//   offset 0   8 bytes    u64 RNG key (CounterRng::key() of the shared generator)
//   offset 8   4k bytes   float32 values at the selected indices, ascending index order
// Decode regenerates the indices from the key in the message; no context is needed.
//
// rescale=1 needs no error feedback, and should not get it unless n/k < 2: the
// residual of a sent entry becomes p * (1 - n/k), so with |1 - n/k| > 1 it grows
// geometrically each time the entry is drawn (conserved in exact arithmetic, lost to
// float rounding in practice).
//
// Aggregation: linear. For a given (seed, step, bucket) and n, header and key are the
// same on every rank; ranks sum the k values (linear_region) with an fp32 allreduce.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <string>

#include "codecs.h"
#include "detail/scratch.h"
#include "gradcomp/error.h"
#include "gradcomp/kernels/select.h"
#include "gradcomp/rng.h"
#include "gradcomp/wire.h"

namespace gradcomp {

namespace {

constexpr std::size_t kKeyBytes = 8;

// Marks k distinct indices of [0, n) (Floyd's algorithm) in a bitmap of n bits from
// scratch slot 0. Every k-subset is equally likely (up to below()'s 2^-32 bias).
std::span<const std::uint64_t> sample_bitmap(CounterRng rng, std::size_t n, std::size_t k) {
  auto bits = detail::scratch<std::uint64_t>(0, (n + 63) / 64);
  if (!bits.empty()) std::memset(bits.data(), 0, 8 * bits.size());
  for (std::size_t j = n - k; j < n; ++j) {
    const auto jj = static_cast<std::uint32_t>(j);  // n <= 2^32 - 1, so j + 1 fits
    std::uint32_t t = rng.below(jj, jj + 1);        // uniform in [0, j]
    if ((bits[t >> 6] >> (t & 63)) & 1u) t = jj;    // taken: j itself is new
    bits[t >> 6] |= std::uint64_t{1} << (t & 63);
  }
  return bits;
}

// Calls f(rank, index) for the marked indices in ascending order (rank = 0, 1, ...).
template <class F>
void for_each_marked(std::span<const std::uint64_t> bits, F&& f) {
  std::size_t rank = 0;
  for (std::size_t wi = 0; wi < bits.size(); ++wi) {
    for (std::uint64_t w = bits[wi]; w != 0; w &= w - 1) {
      f(rank++, 64 * wi + static_cast<std::size_t>(std::countr_zero(w)));
    }
  }
}

CodecTraits traits_for(bool rescale) {
  if (rescale) return {.linear = true, .unbiased = true, .stochastic = true};
  return {.linear = true, .needs_memory = true, .stochastic = true};
}

class RandomkCodec final : public Codec {
 public:
  RandomkCodec(CodecIdentity id, double ratio, bool rescale)
      : Codec(std::move(id), traits_for(rescale)), ratio_(ratio), rescale_(rescale) {}

  LinearRegion linear_region(std::size_t n) const override {
    return {kHeaderBytes + kKeyBytes, kernels::count_for_fraction(ratio_, n), WireDType::kFloat32};
  }

 protected:
  std::size_t max_payload_bytes(std::size_t n) const override {
    return kKeyBytes + 4 * kernels::count_for_fraction(ratio_, n);
  }

  std::size_t encode_payload(std::span<const float> in, const StepContext& ctx,
                             std::span<std::byte> payload,
                             PayloadCrc* /*payload_crc*/) const override {
    encode_impl(in, ctx, payload.data());
    return max_payload_bytes(in.size());
  }

  // Generic form: p[i] += -1 * value for the sent i (so p[i] = +0 with rescale=0).
  // Done only after every value was checked, so a throwing encode leaves p as it was.
  std::size_t encode_payload_feedback(std::span<float> p, const StepContext& ctx,
                                      std::span<std::byte> payload,
                                      PayloadCrc* /*payload_crc*/) const override {
    const auto bits = encode_impl(p, ctx, payload.data());
    const std::byte* vals = payload.data() + kKeyBytes;
    float* dst = p.data();
    for_each_marked(bits, [&](std::size_t r, std::size_t i) {
      dst[i] += -1.0f * load_le<float>(vals + 4 * r);
    });
    return max_payload_bytes(p.size());
  }

  void decode_payload_add(std::span<const std::byte> payload, std::span<float> out,
                          float alpha) const override {
    const std::size_t n = out.size();
    const std::size_t k = kernels::count_for_fraction(ratio_, n);
    expect_payload_bytes(payload, kKeyBytes + 4 * k, "randomk decode", n);
    const std::byte* vals = payload.data() + kKeyBytes;
    std::uint32_t bad = 0;
    for (std::size_t r = 0; r < k; ++r) {
      bad |= static_cast<std::uint32_t>(!finite_bits(load_le<std::uint32_t>(vals + 4 * r)));
    }
    if (bad != 0) {
      for (std::size_t r = 0; r < k; ++r) {
        const float v = load_le<float>(vals + 4 * r);
        if (!std::isfinite(v)) {
          throw CorruptMessage("randomk decode: value " + std::to_string(r) + " of " +
                               std::to_string(k) + " is " + std::to_string(v) +
                               ", expected a finite number");
        }
      }
    }
    const auto bits = sample_bitmap(CounterRng(load_le<std::uint64_t>(payload.data())), n, k);
    float* dst = out.data();
    for_each_marked(bits, [&](std::size_t r, std::size_t i) {
      dst[i] += alpha * load_le<float>(vals + 4 * r);
    });
  }

 private:
  static bool finite_bits(std::uint32_t u) { return (u & 0x7F800000u) != 0x7F800000u; }

  // Writes key and values; returns the bitmap of sent indices (scratch slot 0).
  std::span<const std::uint64_t> encode_impl(std::span<const float> in, const StepContext& ctx,
                                             std::byte* payload) const {
    const std::size_t n = in.size();
    const std::size_t k = kernels::count_for_fraction(ratio_, n);
    const CounterRng rng = CounterRng::for_step(ctx, RngScope::kShared);
    store_le<std::uint64_t>(payload, rng.key());
    std::byte* vals = payload + kKeyBytes;
    const auto bits = sample_bitmap(rng, n, k);
    const float* src = in.data();
    std::size_t first_bad = n;
    if (rescale_) {
      // E[sent] = (k/n) * p * (n/k) = p.
      const auto scale = static_cast<float>(static_cast<double>(n) / static_cast<double>(k));
      for_each_marked(bits, [&](std::size_t r, std::size_t i) {
        const float v = src[i] * scale;
        if (!std::isfinite(v) && first_bad == n) first_bad = i;
        store_le<float>(vals + 4 * r, v);
      });
    } else {
      for_each_marked(bits, [&](std::size_t r, std::size_t i) {
        const float v = src[i];
        if (!std::isfinite(v) && first_bad == n) first_bad = i;
        store_le<float>(vals + 4 * r, v);
      });
    }
    if (first_bad != n) {
      throw InvalidArgument("randomk encode: element " + std::to_string(first_bad) + " = " +
                            std::to_string(src[first_bad]) + " gives a non-finite value" +
                            (rescale_ ? " after rescaling by n/k" : "") +
                            "; a message carries finite values only");
    }
    return bits;
  }

  double ratio_;
  bool rescale_;
};

}  // namespace

void register_randomk(CodecRegistry& registry) {
  registry.add({.name = "randomk",
                .wire_id = wire_id(WireId::kRandomk),
                .summary = "k = ceil(ratio*n) random entries, indices from a shared seed (linear)",
                .traits = traits_for(false),
                .params = {float_param("ratio", 0.01, 0.0, 1.0, "fraction of entries sent",
                                       /*min_exclusive=*/true),
                           bool_param("rescale", false,
                                      "send values times n/k: unbiased, no error feedback needed")},
                // ratio=0.5 for rescale=1: the contract tests also run every example under
                // error feedback, which is only stable for n/k < 2 (see the top comment).
                .examples = {"randomk:ratio=0.5", "randomk:ratio=0.5,rescale=1", "randomk:ratio=1",
                             "randomk:ratio=0.07"},
                .make = [](CodecIdentity id, const Params& p) -> std::unique_ptr<Codec> {
                  return std::make_unique<RandomkCodec>(std::move(id), p.get_float("ratio"),
                                                        p.get_bool("rescale"));
                }});
}

}  // namespace gradcomp
