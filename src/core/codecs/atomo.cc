// atomo: unbiased atomic sparsification (Wang et al., "ATOMO: Communication-efficient
// Learning via Atomic Sparsification", NeurIPS 2018), docs/algorithms/low-rank.md.
//   Write g = sum_i lambda_i a_i over unit atoms; keep atom i with probability p_i (the
//   variance-minimising water-filling of detail/atomo_probabilities.h, sum p = budget s)
//   and send lambda_i / p_i: E[decode] = g. Every atom is an independent Bernoulli draw;
//   a draw that keeps nothing is a valid (zero) message (no resampling: that biases).
//   atoms=spectral: M = U S V^T (detail/thin_svd.h), atoms u_i v_i^T, lambda_i = sigma_i.
//   atoms=entry:    atoms e_i, lambda_i = g_i (a QSGD-like unbiased sparsifier).
//
// The matrix view (spectral): M is rows x cols, row-major over the bucket, with rows =
// StepContext::rows when that is nonzero and divides n (a layer's first dimension; a conv
// kernel (o,i,k,k) is o x i*k*k). Otherwise (a fused or flat bucket, rows = 0) M is the
// 1 x n matrix: one atom, sigma = ||g||, v = g/||g||, kept with p = min(1, s). Reshaping
// a fused bucket into some other matrix would be arbitrary (its rows mix layers) and
// would make it full-rank, hence a full SVD per step; per-layer buckets (the default,
// --bucket-mb 0) are what ATOMO is meant for.
//
// Randomness: per-rank counter RNG, one 64-bit uniform x_i per atom i (the high word from
// stream 0, the low word from stream 1, drawn only when the high word ties), kept iff
// x_i < p_i * 2^64 (detail::atomo_keep; a 24-bit uniform would bias atoms of small p,
// and entrywise atoms routinely have p ~ 1e-7). Atom i is the i-th singular triplet
// (spectral) or element i (entry).
//
// Wire payload (after the 20-byte header), little-endian:
//   spectral, rows r, cols c, count k (kept atoms, ascending atom index):
//     offset 0   4 bytes  r (u32)            r * c == n
//     offset 4   4 bytes  c (u32)
//     offset 8   4 bytes  k (u32)            k <= min(r, c)
//     offset 12  per kept atom, 4 * (1 + r + c) bytes:
//                scale sigma_i / p_i (fp32, finite, > 0), u_i (r fp32), v_i (c fp32)
//     12 + 4k(1 + r + c) bytes. Decode: out[i*c + j] += alpha * sum_k (scale_k u_k[i]) v_k[j].
//   entry: the sparse (index, value) layout of detail/sparse_message.h with fp32 values
//     g_i / p_i: count k (u32) | k u32 indices, strictly increasing, < n | k fp32 values.
//     4 + 8k bytes, k <= n.
// Aggregation: not linear (every rank sends other atoms): allgather, decode_add each.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "codecs.h"
#include "detail/atomo_probabilities.h"
#include "detail/scratch.h"
#include "detail/sparse_message.h"
#include "detail/thin_svd.h"
#include "gradcomp/error.h"
#include "gradcomp/rng.h"
#include "gradcomp/wire.h"

namespace gradcomp {

namespace {

enum class Atoms : std::uint8_t { kSpectral, kEntry };

constexpr std::size_t kSpectralHeader = 12;  // rows, cols, count

// The per-rank keep draws: the high words from stream 0, the low words from stream 1.
class Bernoulli {
 public:
  explicit Bernoulli(const StepContext& ctx)
      : hi_(CounterRng::for_step(ctx, RngScope::kPerRank, 0)),
        lo_(CounterRng::for_step(ctx, RngScope::kPerRank, 1)) {}
  bool keep(std::uint32_t i, double p) const { return detail::atomo_keep(hi_, lo_, i, p); }

 private:
  CounterRng hi_;
  CounterRng lo_;
};

[[noreturn]] void corrupt(const std::string& what) {
  throw CorruptMessage("atomo decode: " + what);
}

bool finite_bits(std::uint32_t u) { return (u & 0x7F800000u) != 0x7F800000u; }

// The first non-finite element (n if none).
std::size_t first_non_finite(std::span<const float> x) {
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (!std::isfinite(x[i])) return i;
  }
  return x.size();
}

// Largest min(r,c) * (1 + r + c) over the factorisations r * c == n (with min(r,c) = d
// a divisor <= sqrt(n): d * (1 + d + n/d)); the 1 x n view gives n + 2.
std::size_t max_spectral_floats(std::size_t n) {
  std::size_t best = 0;
  for (std::size_t d = 1; d <= n / d; ++d) {
    if (n % d == 0) best = std::max(best, d * (1 + d + n / d));
  }
  return best;
}

// The rows of the spectral view (the header comment): the layer's, or 1.
std::size_t view_rows(std::size_t n, const StepContext& ctx) {
  return ctx.rows != 0 && n % ctx.rows == 0 ? ctx.rows : 1;
}

class AtomoCodec final : public Codec {
 public:
  AtomoCodec(CodecIdentity id, Atoms atoms, double budget)
      : Codec(std::move(id), CodecTraits{.unbiased = true, .stochastic = true}),
        atoms_(atoms),
        budget_(budget) {}

 protected:
  std::size_t max_payload_bytes(std::size_t n) const override {
    if (atoms_ == Atoms::kEntry)
      return detail::sparse_payload_bytes(n, detail::SparseValues::kFp32);
    return kSpectralHeader + 4 * max_spectral_floats(n);
  }

  // The expected message: sum p_i = s, so ceil(s) atoms (at most the rank) for this
  // step's matrix view, where the bound above allows every atom of the worst view.
  std::size_t planned_payload_bytes(std::size_t n, const StepContext& ctx) const override {
    const auto atoms = static_cast<std::size_t>(std::ceil(budget_));
    if (atoms_ == Atoms::kEntry) {
      return detail::sparse_payload_bytes(std::min(atoms, n), detail::SparseValues::kFp32);
    }
    const std::size_t rows = view_rows(n, ctx);
    const std::size_t cols = rows == 0 ? 0 : n / rows;
    return kSpectralHeader + 4 * std::min(atoms, std::min(rows, cols)) * (1 + rows + cols);
  }

  std::size_t encode_payload(std::span<const float> in, const StepContext& ctx,
                             std::span<std::byte> payload,
                             PayloadCrc* /*payload_crc*/) const override {
    const std::size_t bad = first_non_finite(in);
    if (bad != in.size()) {
      throw InvalidArgument("atomo encode: element " + std::to_string(bad) + " is " +
                            std::to_string(in[bad]) + "; atoms need finite gradients");
    }
    return atoms_ == Atoms::kEntry ? encode_entry(in, ctx, payload.data())
                                   : encode_spectral(in, ctx, payload.data());
  }

  void decode_payload_add(std::span<const std::byte> payload, std::span<float> out,
                          float alpha) const override {
    if (atoms_ == Atoms::kEntry) {
      detail::decode_sparse_add(payload, out, alpha, detail::SparseValues::kFp32, 0, out.size(),
                                "atomo decode");
    } else {
      decode_spectral(payload, out, alpha);
    }
  }

 private:
  // Entrywise atoms: indices straight into the payload, values via scratch slot 0 (they
  // follow all indices on the wire). atomo_cut holds slots 2 and 3.
  std::size_t encode_entry(std::span<const float> in, const StepContext& ctx,
                           std::byte* payload) const {
    const std::size_t n = in.size();
    const detail::AtomoCut cut = detail::atomo_cut(in, budget_);
    const auto values = detail::scratch<float>(0, n);
    const Bernoulli draw(ctx);
    std::byte* idx = payload + 4;
    std::size_t count = 0, next_sat = 0;
    for (std::size_t i = 0; i < n; ++i) {
      double p;
      if (next_sat < cut.saturated.size() && cut.saturated[next_sat] == i) {
        p = 1.0;
        ++next_sat;
      } else {
        p = cut.unsaturated_p(std::fabs(double(in[i])));
      }
      const auto i32 = static_cast<std::uint32_t>(i);
      if (!draw.keep(i32, p)) continue;
      const float v = p == 1.0 ? in[i] : static_cast<float>(double(in[i]) / p);
      if (!std::isfinite(v)) {
        throw InvalidArgument("atomo encode: element " + std::to_string(i) + " = " +
                              std::to_string(in[i]) + " over p " + std::to_string(p) +
                              " overflows fp32");
      }
      store_le<std::uint32_t>(idx + 4 * count, i32);
      values[count++] = v;
    }
    store_le<std::uint32_t>(payload, static_cast<std::uint32_t>(count));
    if (count != 0) std::memcpy(idx + 4 * count, values.data(), 4 * count);
    return detail::sparse_payload_bytes(count, detail::SparseValues::kFp32);
  }

  std::size_t encode_spectral(std::span<const float> in, const StepContext& ctx,
                              std::byte* payload) const {
    const std::size_t n = in.size();
    const std::size_t rows = view_rows(n, ctx);
    const std::size_t cols = n / rows;
    thread_local detail::ThinSvd svd;
    try {
      detail::thin_svd(in, rows, cols, svd);
    } catch (const InvalidArgument& e) {
      throw EncodeError(ctx.bucket, "atomo encode: bucket " + std::to_string(ctx.bucket) + " (" +
                                        std::to_string(rows) + " x " + std::to_string(cols) +
                                        "): " + e.what());
    }

    const std::size_t atoms = svd.rank;
    const std::span<const float> sigma(svd.sigma.data(), atoms);
    const detail::AtomoCut cut = detail::atomo_cut(sigma, budget_);
    const auto p = detail::scratch<double>(0, atoms);
    detail::atomo_probabilities(sigma, cut, p);

    store_le<std::uint32_t>(payload, static_cast<std::uint32_t>(rows));
    store_le<std::uint32_t>(payload + 4, static_cast<std::uint32_t>(cols));
    const Bernoulli draw(ctx);
    std::byte* dst = payload + kSpectralHeader;
    std::size_t count = 0;
    for (std::size_t i = 0; i < atoms; ++i) {
      if (!draw.keep(static_cast<std::uint32_t>(i), p[i])) continue;
      const auto scale = static_cast<float>(double(sigma[i]) / p[i]);
      const float* u = svd.u.data() + i * rows;
      const float* v = svd.v.data() + i * cols;
      if (!std::isfinite(scale) || first_non_finite({u, rows}) != rows ||
          first_non_finite({v, cols}) != cols) {
        throw InvalidArgument("atomo encode: atom " + std::to_string(i) + " (sigma " +
                              std::to_string(sigma[i]) + ", p " + std::to_string(p[i]) +
                              ") is not representable in fp32");
      }
      store_le<float>(dst, scale);
      std::memcpy(dst + 4, u, 4 * rows);
      std::memcpy(dst + 4 + 4 * rows, v, 4 * cols);
      dst += 4 * (1 + rows + cols);
      ++count;
    }
    store_le<std::uint32_t>(payload + 8, static_cast<std::uint32_t>(count));
    return static_cast<std::size_t>(dst - payload);
  }

  void decode_spectral(std::span<const std::byte> payload, std::span<float> out,
                       float alpha) const {
    const std::size_t n = out.size();
    if (payload.size() < kSpectralHeader) {
      corrupt("payload of " + std::to_string(payload.size()) + " bytes < " +
              std::to_string(kSpectralHeader) + " (rows, cols, count)");
    }
    const std::byte* p = payload.data();
    const std::size_t rows = load_le<std::uint32_t>(p);
    const std::size_t cols = load_le<std::uint32_t>(p + 4);
    const std::size_t count = load_le<std::uint32_t>(p + 8);
    // u32 * u32 fits in 64 bits.
    if (std::uint64_t{rows} * std::uint64_t{cols} != n) {
      corrupt("rows " + std::to_string(rows) + " x cols " + std::to_string(cols) + " = " +
              std::to_string(std::uint64_t{rows} * std::uint64_t{cols}) + " != n " +
              std::to_string(n));
    }
    if (count > std::min(rows, cols)) {
      corrupt("count " + std::to_string(count) + " > min(rows " + std::to_string(rows) + ", cols " +
              std::to_string(cols) + ")");
    }
    // rows * cols == n < 2^32, so min(rows, cols) < 2^16 and rows + cols <= n + 1: the
    // product below stays under 2^51.
    const std::size_t atom_bytes = 4 * (1 + rows + cols);
    expect_payload_bytes(payload, kSpectralHeader + count * atom_bytes, "atomo decode", n);

    const std::byte* atoms = p + kSpectralHeader;
    std::uint32_t bad = 0;
    for (std::size_t k = 0; k < count; ++k) {
      const std::byte* a = atoms + k * atom_bytes;
      const float scale = load_le<float>(a);
      if (!(std::isfinite(scale) && scale > 0.0f)) {
        corrupt("scale of atom " + std::to_string(k) + " is " + std::to_string(scale) +
                ", expected a finite number > 0");
      }
      for (std::size_t j = 1; j < 1 + rows + cols; ++j) {
        bad |= static_cast<std::uint32_t>(!finite_bits(load_le<std::uint32_t>(a + 4 * j)));
      }
    }
    if (bad != 0) {
      for (std::size_t k = 0; k < count; ++k) {
        const std::byte* a = atoms + k * atom_bytes;
        for (std::size_t j = 1; j < 1 + rows + cols; ++j) {
          if (!finite_bits(load_le<std::uint32_t>(a + 4 * j))) {
            corrupt("atom " + std::to_string(k) + ": non-finite " +
                    (j <= rows ? "u[" + std::to_string(j - 1) + "]"
                               : "v[" + std::to_string(j - 1 - rows) + "]"));
          }
        }
      }
    }
    if (count == 0 || n == 0) return;

    // Valid: out[i*c + j] = fma(alpha, x_ij, out), x_ij = sum over k ascending of
    // fma(scale_k * u_k[i], v_k[j], x), from 0. V is copied out of the payload (slot 0)
    // so the row loop runs on aligned floats; slot 1 holds the row being summed.
    const auto v = detail::scratch<float>(0, count * cols);
    for (std::size_t k = 0; k < count; ++k) {
      std::memcpy(v.data() + k * cols, atoms + k * atom_bytes + 4 * (1 + rows), 4 * cols);
    }
    const auto x = detail::scratch<float>(1, cols);
    float* o = out.data();
    for (std::size_t i = 0; i < rows; ++i) {
      std::fill(x.begin(), x.end(), 0.0f);
      for (std::size_t k = 0; k < count; ++k) {
        const std::byte* a = atoms + k * atom_bytes;
        const float coef = load_le<float>(a) * load_le<float>(a + 4 * (1 + i));
        const float* vk = v.data() + k * cols;
        float* xs = x.data();
        for (std::size_t j = 0; j < cols; ++j) xs[j] = std::fma(coef, vk[j], xs[j]);
      }
      float* row = o + i * cols;
      const float* xs = x.data();
      for (std::size_t j = 0; j < cols; ++j) row[j] = std::fma(alpha, xs[j], row[j]);
    }
  }

  Atoms atoms_;
  double budget_;
};

}  // namespace

void register_atomo(CodecRegistry& registry) {
  registry.add(
      {.name = "atomo",
       .wire_id = wire_id(WireId::kAtomo),
       .summary = "ATOMO: unbiased sampling of spectral (SVD) or entrywise atoms, budget s",
       .traits = {.unbiased = true, .stochastic = true},
       .params = {choice_param("atoms", "spectral", {"spectral", "entry"},
                               "spectral: singular triplets of the layer's matrix (rows from "
                               "the bucket; 1 x n when unknown); entry: single entries"),
                  float_param("budget", 3.0, 0.0, 4294967295.0,
                              "s, the expected number of atoms sent (sum of the keep "
                              "probabilities)",
                              /*min_exclusive=*/true)},
       .examples = {"atomo:atoms=entry,budget=8", "atomo:atoms=entry,budget=40", "atomo:budget=0.5",
                    "atomo:atoms=entry,budget=100000"},
       .make = [](CodecIdentity id, const Params& p) -> std::unique_ptr<Codec> {
         const Atoms atoms = p.get_choice("atoms") == "entry" ? Atoms::kEntry : Atoms::kSpectral;
         return std::make_unique<AtomoCodec>(std::move(id), atoms, p.get_float("budget"));
       }});
}

}  // namespace gradcomp
