// qsgd: stochastic uniform quantization (Alistarh et al., "QSGD: Communication-
// Efficient SGD via Gradient Quantization and Encoding", NeurIPS 2017),
// docs/algorithms/quantization.md.
//   Per bucket of d elements: nu = ||v||_2; a_i = s*|v_i|/nu, l = floor(a_i);
//   level_i = l + 1 with probability a_i - l, else l (rng.uniform(i) < a_i - l, i the
//   global element index, per-rank RNG); Q(v_i) = nu * sign(v_i) * level_i / s.
//   Unbiased; E||Q(v) - v||^2 <= min(d/s^2, sqrt(d)/s) * ||v||^2.
//
// Wire payload (after the 20-byte header), nb = ceil(n/d), m = ceil(log2(s+1)) =
// bit_width(s), w = m + 1 bits per element:
//   offset 0        4*nb bytes   nu of each bucket, float32 (finite, >= 0, sign bit clear)
//   offset 4*nb     stream       n codes of w bits, code i at stream bits [i*w, (i+1)*w)
//                                (LSB first, see detail/bitstream.h), zero-padded to a
//                                multiple of 4 bytes: 4*ceil(n*w/32) bytes
//   code = level | sign << m; level <= s; level 0 is always sent with sign 0 (a
//   "negative zero" is rejected), and every level of a bucket with nu = 0 is 0.
// The payload size depends on n only (fixed-rate code; Elias coding is not used).
//
// Numerics, fixed so that a message is a pure function of (input, seed, step, rank,
// bucket) whatever the thread count:
//   nu:  element j of a bucket goes into accumulator j % 32: acc = v_j * v_j + acc,
//        in float; then acc[k] += acc[k + h] for h = 16, 8, 4, 2, 1; nu = sqrt(acc[0]).
//        If that sum is outside [2^-60, 2^120] (tiny, huge or non-finite input), the
//        same in double (exact squares, no overflow for finite input), then rounded
//        to float.
//   a:   min((|v| * pre) * (s / nu), s) in float, pre = 1, or 2^64 with s / (nu * 2^64)
//        when s / nu overflows float (denormal norms).
//   decode: out[i] = alpha * (+-((nu / s) * level)) + out[i].
//   Each "x * y + z" is one fused multiply-add where the target has FMA, else two
//   roundings (see mul_add).
//
// Aggregation: not linear (norms differ per rank): gather, then decode_add each message.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <string>

#include "codecs.h"
#include "detail/bitstream.h"
#include "detail/scratch.h"
#include "gradcomp/error.h"
#include "gradcomp/rng.h"
#include "gradcomp/wire.h"

#if defined(GRADCOMP_OPENMP)
#include <omp.h>
#endif
#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace gradcomp {

namespace {

// Elements per block of codes: a multiple of 32, so every block starts on a word of
// the code stream and blocks pack independently; 8 KB of codes stays in L1.
constexpr std::size_t kBlock = 2048;
[[maybe_unused]] constexpr std::size_t kParallelMin = std::size_t{1} << 16;
constexpr std::size_t kPrefetchAhead = 2048;  // floats (8 KB)

bool use_parallel(std::size_t n) {
#if defined(GRADCOMP_OPENMP)
  return n > kParallelMin && omp_get_max_threads() > 1 && !omp_in_parallel();
#else
  (void)n;
  return false;
#endif
}

// a * b + c with one rounding where the target has FMA (what vectorises, and what
// -ffp-contract could otherwise produce in some loops and not others); without FMA
// hardware std::fma is a library call per element, so there it is the plain
// product and sum, which the compiler then cannot contract either. Messages are a
// pure function of the input on a given build; decoders read the norms from the
// message, so builds with and without FMA interoperate.
template <class T>
inline T mul_add(T a, T b, T c) {
#if defined(__FMA__)
  return std::fma(a, b, c);
#else
  return a * b + c;
#endif
}

// The bucket norm, in the fixed order described at the top of the file. 32
// accumulators: four independent 8-wide FMA chains keep both FMA pipes busy.
constexpr std::size_t kNormLanes = 32;

template <class T>
T sum_of_squares(const float* v, std::size_t len) {
  T acc[kNormLanes] = {};
  std::size_t j = 0;
  for (; j + kNormLanes <= len; j += kNormLanes) {
    for (std::size_t k = 0; k < kNormLanes; ++k) {
      const T x = v[j + k];
      acc[k] = mul_add(x, x, acc[k]);
    }
  }
  for (std::size_t k = 0; j + k < len; ++k) {
    const T x = v[j + k];
    acc[k] = mul_add(x, x, acc[k]);
  }
  for (std::size_t h = kNormLanes / 2; h >= 1; h /= 2) {
    for (std::size_t k = 0; k < h; ++k) acc[k] += acc[k + h];
  }
  return acc[0];
}

float bucket_norm(const float* v, std::size_t len) {
  const float sum = sum_of_squares<float>(v, len);
  // In this range no partial sum overflowed and underflowed squares are negligible.
  if (sum >= 0x1p-60f && sum <= 0x1p120f) return std::sqrt(sum);
  // Tiny, huge or non-finite input: squares of floats are exact in double.
  return static_cast<float>(std::sqrt(sum_of_squares<double>(v, len)));
}

// a = min((|v| * pre) * scale, s) for a bucket of norm nu.
struct Scaling {
  float pre = 1.0f;
  float scale = 0.0f;  // 0 for nu = 0: every level is 0
};

Scaling scaling_for(float nu, float s) {
  if (nu == 0.0f) return {};
  Scaling sc{1.0f, s / nu};
  if (std::isinf(sc.scale)) sc = {0x1p64f, s / (nu * 0x1p64f)};  // exact rescaling by 2^64
  return sc;
}

// Codes of v[0, len), whose first element has global index `first`. Written so that
// GCC vectorises it (8 lanes with AVX2): no branches, 32-bit lanes throughout (a
// 32-bit counter: a 64-bit one costs a widening shuffle per vector).
template <bool kPrescale>
void quantize(const float* v, std::uint32_t len, std::uint32_t first, Scaling sc, float s,
              unsigned m, CounterRng rng, std::uint32_t* codes) {
  for (std::uint32_t j = 0; j < len; ++j) {
    const float x = v[j];
    const std::uint32_t sign = std::bit_cast<std::uint32_t>(x) >> 31;
    const float ax = kPrescale ? std::fabs(x) * sc.pre : std::fabs(x);  // pre = 1: exact
    const float a = std::min(ax * sc.scale, s);
    const auto l = static_cast<std::int32_t>(a);  // floor: a >= 0
    const float frac = a - static_cast<float>(l);
    // rng.uniform(i), spelled with a signed conversion (exact: < 2^24) that vectorises.
    const auto r = static_cast<std::int32_t>(rng.bits(first + j) >> 8);
    const float u = static_cast<float>(r) * 0x1p-24f;
    // Round UP with probability a - l (u < frac), so that E[level] = a.
    const std::uint32_t level = static_cast<std::uint32_t>(l) + (u < frac ? 1u : 0u);
    codes[j] = level == 0 ? 0u : (level | sign << m);
  }
}

#if defined(__AVX2__)
// quantize<false> by hand, 8 elements per step (~38 instructions where GCC's own
// vectorisation of the loop above takes ~46): the tests hold it to the portable loop
// (and to an independent scalar encoder) bit for bit.
void quantize_avx2(const float* v, std::uint32_t len, std::uint32_t first, float scale, float s,
                   unsigned m, CounterRng rng, std::uint32_t* codes) {
  const __m256 vscale = _mm256_set1_ps(scale);
  const __m256 vs = _mm256_set1_ps(s);
  const __m256 k2m24 = _mm256_set1_ps(0x1p-24f);
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256i k0 = _mm256_set1_epi32(static_cast<int>(static_cast<std::uint32_t>(rng.key())));
  const __m256i k1 =
      _mm256_set1_epi32(static_cast<int>(static_cast<std::uint32_t>(rng.key() >> 32)));
  const __m256i c1 = _mm256_set1_epi32(0x7FEB352D);
  const __m256i c2 = _mm256_set1_epi32(static_cast<int>(0x846CA68Bu));
  const __m128i sign_shift = _mm_cvtsi32_si128(static_cast<int>(31 - m));
  const auto lowbias32 = [&](__m256i x) {  // detail::lowbias32, 8 lanes
    x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
    x = _mm256_mullo_epi32(x, c1);
    x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 15));
    x = _mm256_mullo_epi32(x, c2);
    return _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
  };
  __m256i idx = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(first)),
                                 _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  std::uint32_t j = 0;
  for (; j + 8 <= len; j += 8) {
    // Streams the input a few buckets ahead while this one is compute-bound (the
    // norm pass is what first touches memory). Prefetches never fault.
    _mm_prefetch(
        reinterpret_cast<const char*>(reinterpret_cast<std::uintptr_t>(v + j) + 4 * kPrefetchAhead),
        _MM_HINT_T0);
    const __m256 x = _mm256_loadu_ps(v + j);
    const __m256 ax = _mm256_and_ps(x, abs_mask);
    const __m256 a = _mm256_min_ps(_mm256_mul_ps(ax, vscale), vs);  // a is never NaN
    const __m256i l = _mm256_cvttps_epi32(a);
    const __m256 frac = _mm256_sub_ps(a, _mm256_cvtepi32_ps(l));
    const __m256i h = lowbias32(_mm256_add_epi32(lowbias32(_mm256_xor_si256(idx, k0)), k1));
    const __m256 u = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(h, 8)), k2m24);
    const __m256i up = _mm256_castps_si256(_mm256_cmp_ps(u, frac, _CMP_LT_OQ));  // -1: round up
    const __m256i level = _mm256_sub_epi32(l, up);
    // Sign bit (x ^ |x|), dropped where level == 0 (vpsignd by level >= 0), moved to bit m.
    const __m256i sign = _mm256_sign_epi32(_mm256_castps_si256(_mm256_xor_ps(x, ax)), level);
    const __m256i code = _mm256_or_si256(level, _mm256_srl_epi32(sign, sign_shift));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes + j), code);
    idx = _mm256_add_epi32(idx, _mm256_set1_epi32(8));
  }
  quantize<false>(v + j, len - j, first + j, {1.0f, scale}, s, m, rng, codes + j);
}
#endif

void quantize_segment(const float* v, std::size_t len, std::size_t first, Scaling sc, float s,
                      unsigned m, CounterRng rng, std::uint32_t* codes) {
  const auto len32 = static_cast<std::uint32_t>(len);      // a segment lies within a block
  const auto first32 = static_cast<std::uint32_t>(first);  // n <= 2^32 - 1
  if (sc.pre != 1.0f) {
    quantize<true>(v, len32, first32, sc, s, m, rng, codes);
    return;
  }
#if defined(__AVX2__)
  quantize_avx2(v, len32, first32, sc.scale, s, m, rng, codes);
#else
  quantize<false>(v, len32, first32, sc, s, m, rng, codes);
#endif
}

// out[j] += alpha * decode(codes[j]) for one bucket's segment, unit = nu / s.
void dequantize_add(const std::uint32_t* codes, std::size_t len, float unit, unsigned m,
                    float alpha, float* out) {
  const std::uint32_t mask = (std::uint32_t{1} << m) - 1;
  for (std::size_t j = 0; j < len; ++j) {
    const std::uint32_t c = codes[j];
    const float mag = unit * static_cast<float>(static_cast<std::int32_t>(c & mask));
    const float val = std::bit_cast<float>(std::bit_cast<std::uint32_t>(mag) ^ (c >> m << 31));
    out[j] = mul_add(alpha, val, out[j]);
  }
}

// Nonzero if some code of a segment is invalid: level > max_level, or a negative zero.
std::uint32_t invalid_codes(const std::uint32_t* codes, std::size_t len, std::uint32_t max_level,
                            unsigned m) {
  const std::uint32_t neg_zero = std::uint32_t{1} << m;
  const std::uint32_t mask = neg_zero - 1;
  std::uint32_t bad = 0;
  for (std::size_t j = 0; j < len; ++j) {
    const std::uint32_t c = codes[j];
    bad |= static_cast<std::uint32_t>((c & mask) > max_level) |
           static_cast<std::uint32_t>(c == neg_zero);
  }
  return bad;
}

class QsgdCodec final : public Codec {
 public:
  QsgdCodec(CodecIdentity id, std::uint32_t levels, std::size_t bucket)
      : Codec(std::move(id), CodecTraits{.unbiased = true, .stochastic = true}),
        s_(levels),
        sf_(static_cast<float>(levels)),
        d_(bucket),
        m_(static_cast<unsigned>(std::bit_width(levels))),
        w_(m_ + 1) {}

 protected:
  std::size_t max_payload_bytes(std::size_t n) const override { return payload_bytes(n); }

  std::size_t encode_payload(std::span<const float> in, const StepContext& ctx,
                             std::span<std::byte> payload,
                             PayloadCrc* /*payload_crc*/) const override {
    encode_impl(in.data(), in.size(), ctx, payload.data(), nullptr);
    return payload_bytes(in.size());
  }

  // Fused: each block of p is quantized, packed, then p -= decode(block) while the
  // codes are in L1. All norms are computed first, so a non-finite input throws
  // before p is touched (as the generic form leaves p unchanged when encode throws).
  std::size_t encode_payload_feedback(std::span<float> p, const StepContext& ctx,
                                      std::span<std::byte> payload,
                                      PayloadCrc* /*payload_crc*/) const override {
    encode_impl(p.data(), p.size(), ctx, payload.data(), p.data());
    return payload_bytes(p.size());
  }

  void decode_payload_add(std::span<const std::byte> payload, std::span<float> out,
                          float alpha) const override {
    const std::size_t n = out.size();
    expect_payload_bytes(payload, payload_bytes(n), "qsgd decode", n);
    const std::size_t nb = buckets(n);
    const std::byte* norms = payload.data();
    const std::byte* stream = norms + 4 * nb;

    // 1. Norms: finite, >= 0, no sign bit (one encoding per value: -0 is rejected).
    for (std::size_t b = 0; b < nb; ++b) {
      const float nu = load_le<float>(norms + 4 * b);
      if (!std::isfinite(nu) || std::signbit(nu)) {
        throw CorruptMessage("qsgd decode: bucket " + std::to_string(b) + " has norm " +
                             std::to_string(nu) + ", expected a finite value >= 0");
      }
    }
    // 2. Padding bits after the last code.
    if (!detail::padding_is_zero(stream, n, w_)) {
      throw CorruptMessage("qsgd decode: nonzero padding bits after " + std::to_string(n) +
                           " codes of " + std::to_string(w_) + " bits");
    }
    // 3. Codes, block by block (unpacked again below: the stream is small, and
    //    nothing may be written before everything is checked).
    const std::size_t blocks = (n + kBlock - 1) / kBlock;
    [[maybe_unused]] const bool parallel = use_parallel(n);  // read by OpenMP only
    std::uint32_t bad = 0;
#if defined(GRADCOMP_OPENMP)
#pragma omp parallel for if (parallel) schedule(static) reduction(| : bad)
#endif
    for (std::size_t blk = 0; blk < blocks; ++blk) {
      bad |= check_block(stream, norms, blk, n);
    }
    if (bad != 0) report_invalid_code(stream, norms, n);

      // 4. Apply.
#if defined(GRADCOMP_OPENMP)
#pragma omp parallel for if (parallel) schedule(static)
#endif
    for (std::size_t blk = 0; blk < blocks; ++blk) {
      const std::size_t i0 = blk * kBlock;
      const std::size_t i1 = std::min(n, i0 + kBlock);
      auto codes = detail::scratch<std::uint32_t>(0, kBlock);
      detail::unpack_codes(stream + i0 * w_ / 8, i1 - i0, w_, codes.data());
      for_each_segment(i0, i1, [&](std::size_t b, std::size_t j0, std::size_t j1) {
        const float unit = load_le<float>(norms + 4 * b) / sf_;
        dequantize_add(codes.data() + (j0 - i0), j1 - j0, unit, m_, alpha, out.data() + j0);
      });
    }
  }

 private:
  std::size_t buckets(std::size_t n) const { return (n + d_ - 1) / d_; }
  std::size_t payload_bytes(std::size_t n) const {
    return 4 * buckets(n) + detail::packed_bytes(n, w_);
  }

  // Calls f(bucket, j0, j1) for each bucket's part [j0, j1) of [i0, i1).
  template <class F>
  void for_each_segment(std::size_t i0, std::size_t i1, F&& f) const {
    for (std::size_t j0 = i0; j0 < i1;) {
      const std::size_t b = j0 / d_;
      const std::size_t j1 = std::min(i1, (b + 1) * d_);
      f(b, j0, j1);
      j0 = j1;
    }
  }

  [[noreturn]] void throw_bad_norm(std::size_t b, float nu) const {
    throw InvalidArgument("qsgd encode: bucket " + std::to_string(b) + " has norm " +
                          std::to_string(nu) +
                          " (non-finite input, or a norm beyond float32's range)");
  }

  // Encodes in[0, n) into payload; if fb is set (fb == in), also fb -= decode(msg).
  void encode_impl(const float* in, std::size_t n, const StepContext& ctx, std::byte* payload,
                   float* fb) const {
    const CounterRng rng = CounterRng::for_step(ctx, RngScope::kPerRank);
    const std::size_t nb = buckets(n);
    std::byte* norms = payload;
    std::byte* stream = payload + 4 * nb;
    const std::size_t blocks = (n + kBlock - 1) / kBlock;
    const bool parallel = use_parallel(n);

    if (!parallel && fb == nullptr) {
      // One pass: a bucket's norm is computed when its first block is reached (reading
      // ahead to the bucket's end), then its elements are quantized while in cache.
      for (std::size_t blk = 0; blk < blocks; ++blk) {
        const std::size_t i0 = blk * kBlock;
        const std::size_t i1 = std::min(n, i0 + kBlock);
        for_each_segment(i0, i1, [&](std::size_t b, std::size_t j0, std::size_t) {
          if (j0 != b * d_) return;
          const float nu = bucket_norm(in + j0, std::min(d_, n - j0));
          if (!std::isfinite(nu)) throw_bad_norm(b, nu);
          store_le<float>(norms + 4 * b, nu);
        });
        encode_block(in, n, blk, rng, norms, stream, fb);
      }
      return;
    }

    // Norms first (also what makes blocks independent for threads), then blocks.
#if defined(GRADCOMP_OPENMP)
#pragma omp parallel for if (parallel) schedule(static)
#endif
    for (std::size_t b = 0; b < nb; ++b) {
      store_le<float>(norms + 4 * b, bucket_norm(in + b * d_, std::min(d_, n - b * d_)));
    }
    for (std::size_t b = 0; b < nb; ++b) {
      const float nu = load_le<float>(norms + 4 * b);
      if (!std::isfinite(nu)) throw_bad_norm(b, nu);
    }
#if defined(GRADCOMP_OPENMP)
#pragma omp parallel for if (parallel) schedule(static)
#endif
    for (std::size_t blk = 0; blk < blocks; ++blk) {
      encode_block(in, n, blk, rng, norms, stream, fb);
    }
  }

  void encode_block(const float* in, std::size_t n, std::size_t blk, CounterRng rng,
                    const std::byte* norms, std::byte* stream, float* fb) const {
    const std::size_t i0 = blk * kBlock;
    const std::size_t i1 = std::min(n, i0 + kBlock);
    auto codes = detail::scratch<std::uint32_t>(0, kBlock);
    for_each_segment(i0, i1, [&](std::size_t b, std::size_t j0, std::size_t j1) {
      const float nu = load_le<float>(norms + 4 * b);
      quantize_segment(in + j0, j1 - j0, j0, scaling_for(nu, sf_), sf_, m_, rng,
                       codes.data() + (j0 - i0));
    });
    detail::pack_codes(codes.data(), i1 - i0, w_, stream + i0 * w_ / 8);
    if (fb == nullptr) return;
    for_each_segment(i0, i1, [&](std::size_t b, std::size_t j0, std::size_t j1) {
      const float unit = load_le<float>(norms + 4 * b) / sf_;
      dequantize_add(codes.data() + (j0 - i0), j1 - j0, unit, m_, -1.0f, fb + j0);
    });
  }

  std::uint32_t check_block(const std::byte* stream, const std::byte* norms, std::size_t blk,
                            std::size_t n) const {
    const std::size_t i0 = blk * kBlock;
    const std::size_t i1 = std::min(n, i0 + kBlock);
    auto codes = detail::scratch<std::uint32_t>(0, kBlock);
    detail::unpack_codes(stream + i0 * w_ / 8, i1 - i0, w_, codes.data());
    std::uint32_t bad = 0;
    for_each_segment(i0, i1, [&](std::size_t b, std::size_t j0, std::size_t j1) {
      const std::uint32_t max_level = load_le<float>(norms + 4 * b) == 0.0f ? 0 : s_;
      bad |= invalid_codes(codes.data() + (j0 - i0), j1 - j0, max_level, m_);
    });
    return bad;
  }

  // Slow path after a failed check: find the first invalid code and name it.
  [[noreturn]] void report_invalid_code(const std::byte* stream, const std::byte* norms,
                                        std::size_t n) const {
    auto codes = detail::scratch<std::uint32_t>(0, kBlock);
    for (std::size_t i0 = 0; i0 < n; i0 += kBlock) {
      const std::size_t i1 = std::min(n, i0 + kBlock);
      detail::unpack_codes(stream + i0 * w_ / 8, i1 - i0, w_, codes.data());
      for (std::size_t i = i0; i < i1; ++i) {
        const std::uint32_t c = codes[i - i0];
        const std::uint32_t level = c & ((std::uint32_t{1} << m_) - 1);
        const std::size_t b = i / d_;
        const std::string where = "qsgd decode: element " + std::to_string(i);
        if (level > s_) {
          throw CorruptMessage(where + " has level " + std::to_string(level) + " > levels " +
                               std::to_string(s_));
        }
        if (c == (std::uint32_t{1} << m_)) {
          throw CorruptMessage(where + " is a negative zero (sign set, level 0)");
        }
        if (level != 0 && load_le<float>(norms + 4 * b) == 0.0f) {
          throw CorruptMessage(where + " has level " + std::to_string(level) + " but bucket " +
                               std::to_string(b) + " has norm 0");
        }
      }
    }
    throw CorruptMessage("qsgd decode: invalid code");  // unreachable if checks agree
  }

  std::uint32_t s_;
  float sf_;
  std::size_t d_;
  unsigned m_;  // magnitude bits
  unsigned w_;  // code bits: sign + magnitude
};

}  // namespace

void register_qsgd(CodecRegistry& registry) {
  registry.add({.name = "qsgd",
                .wire_id = wire_id(WireId::kQsgd),
                .summary = "QSGD stochastic quantization to s levels per bucket (unbiased)",
                .traits = {.unbiased = true, .stochastic = true},
                .params = {int_param("levels", 16, 1, 65535, "quantization levels s"),
                           int_param("bucket", 512, 1, std::int64_t{1} << 24,
                                     "elements per bucket d (one float32 norm each)")},
                .examples = {"qsgd:levels=1,bucket=7", "qsgd:levels=255,bucket=64",
                             "qsgd:levels=4,bucket=100000", "qsgd:levels=65535,bucket=33",
                             "qsgd:levels=2,bucket=1"},
                .make = [](CodecIdentity id, const Params& p) -> std::unique_ptr<Codec> {
                  return std::make_unique<QsgdCodec>(
                      std::move(id), static_cast<std::uint32_t>(p.get_int("levels")),
                      static_cast<std::size_t>(p.get_int("bucket")));
                }});
}

}  // namespace gradcomp
