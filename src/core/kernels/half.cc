// Bulk fp32 <-> fp16 / bf16 kernels (see half.h). The SIMD paths process 16 elements
// per iteration and leave the remainder to the scalar reference, so every size
// exercises both.
//
// fp16 uses F16C's vcvtps2ph with round-to-nearest-even after clamping to +-65504:
// values in [65504, 65520) round to 65504 anyway and everything above saturates there,
// exactly the reference's rule. bf16 has no conversion instruction on AVX2: the same
// integer rounding as the reference, 8 lanes at a time, packed with packus (values are
// <= 0xFFFF) and a lane fix-up permute.
#include "gradcomp/kernels/half.h"

#include <cstring>

#if defined(__F16C__) && defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define GRADCOMP_HALF_SIMD 1
#endif

namespace gradcomp::kernels {

namespace {

inline std::uint16_t load_u16(const std::byte* p) {
  std::uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
inline void store_u16(std::byte* p, std::uint16_t v) { std::memcpy(p, &v, 2); }

constexpr std::uint32_t kAbsMask = 0x7FFFFFFFu;
constexpr std::uint32_t kMaxFinite = 0x7F7FFFFFu;

std::size_t first_nonfinite(const float* x, std::size_t from, std::size_t n) {
  for (std::size_t i = from; i < n; ++i) {
    if ((std::bit_cast<std::uint32_t>(x[i]) & kAbsMask) > kMaxFinite) return i;
  }
  return n;
}

#ifdef GRADCOMP_HALF_SIMD

// 8 floats -> 8 halves (format F), saturating. Non-finite lanes give garbage: the
// caller checks them first.
template <HalfFormat F>
inline __m128i to_half8(__m256 v) {
  if constexpr (F == HalfFormat::kFp16) {
    const __m256 c =
        _mm256_max_ps(_mm256_min_ps(v, _mm256_set1_ps(65504.0f)), _mm256_set1_ps(-65504.0f));
    return _mm256_cvtps_ph(c, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  } else {
    const __m256i u = _mm256_castps_si256(v);
    const __m256i a = _mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF));
    const __m256i hi = _mm256_srli_epi32(u, 16);
    const __m256i lsb = _mm256_and_si256(hi, _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(
        _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7FFF)), lsb), 16);
    const __m256i sat = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7F7F7FFF));
    const __m256i sat_val =
        _mm256_or_si256(_mm256_and_si256(hi, _mm256_set1_epi32(0x8000)), _mm256_set1_epi32(0x7F7F));
    r = _mm256_blendv_epi8(r, sat_val, sat);
    // packus packs within 128-bit lanes: [r.lo4, r.lo4, r.hi4, r.hi4]; take lane 0 and 2.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
    return _mm256_castsi256_si128(packed);
  }
}

template <HalfFormat F>
inline __m256 from_half8(__m128i h) {
  if constexpr (F == HalfFormat::kFp16) {
    return _mm256_cvtph_ps(h);
  } else {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
}

inline bool any_nonfinite16(__m256 v0, __m256 v1) {
  const __m256i abs_mask = _mm256_set1_epi32(0x7FFFFFFF);
  const __m256i max_finite = _mm256_set1_epi32(0x7F7FFFFF);
  const __m256i bad = _mm256_or_si256(
      _mm256_cmpgt_epi32(_mm256_and_si256(_mm256_castps_si256(v0), abs_mask), max_finite),
      _mm256_cmpgt_epi32(_mm256_and_si256(_mm256_castps_si256(v1), abs_mask), max_finite));
  return !_mm256_testz_si256(bad, bad);
}

template <HalfFormat F, bool kFeedback>
std::size_t encode_simd(float* p, const float* in, std::size_t n, std::byte* out,
                        std::size_t* done) {
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 v0 = _mm256_loadu_ps(in + i);
    const __m256 v1 = _mm256_loadu_ps(in + i + 8);
    if (any_nonfinite16(v0, v1)) return first_nonfinite(in, i, n);
    const __m128i h0 = to_half8<F>(v0);
    const __m128i h1 = to_half8<F>(v1);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * i), h0);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * i + 16), h1);
    if constexpr (kFeedback) {
      _mm256_storeu_ps(p + i, _mm256_sub_ps(v0, from_half8<F>(h0)));
      _mm256_storeu_ps(p + i + 8, _mm256_sub_ps(v1, from_half8<F>(h1)));
    }
  }
  *done = i;
  return n;
}

#endif  // GRADCOMP_HALF_SIMD

template <bool kFeedback>
std::size_t encode_impl(HalfFormat f, float* p, const float* in, std::size_t n, std::byte* out) {
  std::size_t i = 0;
#ifdef GRADCOMP_HALF_SIMD
  const std::size_t r = f == HalfFormat::kFp16
                            ? encode_simd<HalfFormat::kFp16, kFeedback>(p, in, n, out, &i)
                            : encode_simd<HalfFormat::kBf16, kFeedback>(p, in, n, out, &i);
  if (r != n) return r;
#endif
  for (; i < n; ++i) {
    const float v = in[i];
    if ((std::bit_cast<std::uint32_t>(v) & kAbsMask) > kMaxFinite) return i;
    const std::uint16_t h = float_to_half_ref(f, v);
    store_u16(out + 2 * i, h);
    if constexpr (kFeedback) p[i] = std::fma(-1.0f, half_to_float_ref(f, h), v);
  }
  return n;
}

}  // namespace

std::size_t encode_halves(HalfFormat f, std::span<const float> in, std::byte* out) {
  return encode_impl<false>(f, nullptr, in.data(), in.size(), out);
}

std::size_t encode_halves_feedback(HalfFormat f, std::span<float> p, std::byte* out) {
  return encode_impl<true>(f, p.data(), p.data(), p.size(), out);
}

std::size_t find_nonfinite_half(HalfFormat f, const std::byte* in, std::size_t n) {
  const std::uint16_t exp_mask = f == HalfFormat::kFp16 ? 0x7C00 : 0x7F80;
  std::size_t i = 0;
#ifdef GRADCOMP_HALF_SIMD
  const __m256i m = _mm256_set1_epi16(static_cast<short>(exp_mask));
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + 2 * i));
    const __m256i bad = _mm256_cmpeq_epi16(_mm256_and_si256(h, m), m);
    if (!_mm256_testz_si256(bad, bad)) break;  // the scalar loop finds the lane
  }
#endif
  for (; i < n; ++i) {
    if ((load_u16(in + 2 * i) & exp_mask) == exp_mask) return i;
  }
  return n;
}

void decode_add_halves(HalfFormat f, const std::byte* in, std::span<float> out, float alpha) {
  float* o = out.data();
  const std::size_t n = out.size();
  std::size_t i = 0;
#ifdef GRADCOMP_HALF_SIMD
  const __m256 a = _mm256_set1_ps(alpha);
  const auto run = [&]<HalfFormat F>() {
    for (; i + 16 <= n; i += 16) {
      const __m128i h0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 2 * i));
      const __m128i h1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 2 * i + 16));
      _mm256_storeu_ps(o + i, _mm256_fmadd_ps(a, from_half8<F>(h0), _mm256_loadu_ps(o + i)));
      _mm256_storeu_ps(o + i + 8,
                       _mm256_fmadd_ps(a, from_half8<F>(h1), _mm256_loadu_ps(o + i + 8)));
    }
  };
  if (f == HalfFormat::kFp16) {
    run.template operator()<HalfFormat::kFp16>();
  } else {
    run.template operator()<HalfFormat::kBf16>();
  }
#endif
  for (; i < n; ++i) o[i] = std::fma(alpha, half_to_float_ref(f, load_u16(in + 2 * i)), o[i]);
}

void decode_halves(HalfFormat f, const std::byte* in, std::span<float> out) {
  float* o = out.data();
  const std::size_t n = out.size();
  std::size_t i = 0;
#ifdef GRADCOMP_HALF_SIMD
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 2 * i));
    _mm256_storeu_ps(o + i, f == HalfFormat::kFp16 ? from_half8<HalfFormat::kFp16>(h)
                                                   : from_half8<HalfFormat::kBf16>(h));
  }
#endif
  for (; i < n; ++i) o[i] = half_to_float_ref(f, load_u16(in + 2 * i));
}

}  // namespace gradcomp::kernels
