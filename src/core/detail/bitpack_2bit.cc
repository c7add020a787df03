// The 2-bit layout's deterministic kernels (bitpack.h): pack2_ref, the threshold
// encoder of MXNet's "2bit" (with and without fused error feedback) and the decoder,
// each a scalar reference and an AVX2 / OpenMP fast path. TernGrad's stochastic codes
// share the layout; they are in bitpack_ternary.cc.
#include "detail/bitpack.h"

#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "detail/bitpack_internal.h"
#include "detail/pending.h"
#include "gradcomp/wire.h"

namespace gradcomp::detail {

using bitpack::encode2_scalar;
using bitpack::for_chunks;
#ifdef __AVX2__
using bitpack::as_int;
using bitpack::pack2_masks;
#endif

namespace {

inline unsigned threshold2_code(float v, float tau) {
  return v >= tau ? 3u : (v <= -tau ? 2u : 0u);
}

// ---- range kernels (begin on a word boundary) -----------------------------------------

// kCheck: also report whether every input was finite (false: some inf or NaN), for the
// sampled adaptive tau, which has not seen most of them. One fused multiply-add per vector:
// bad += x * 0 stays 0 for finite x and turns NaN for inf or NaN (the loop is close to
// compute-bound on one core: an and, a compare and an or per vector cost ~5%).
template <bool kFeedback, bool kCheck = false>
bool threshold2_range(const float* in, float* fb, std::size_t begin, std::size_t end, float tau,
                      const Lut2& lut, std::byte* out) {
  std::size_t i = begin;
  bool finite = true;
#ifdef __AVX2__
  const __m256 zero = _mm256_setzero_ps();
  __m256 bad_a = zero, bad_b = zero;
  const __m256 pos = _mm256_set1_ps(tau);
  const __m256 neg = _mm256_set1_ps(-tau);
  const __m256 l0 = _mm256_set1_ps(lut.v[0]);
  const __m256 l2 = _mm256_set1_ps(lut.v[2]);
  const __m256 l3 = _mm256_set1_ps(lut.v[3]);
  for (; i + 16 <= end; i += 16) {
    const __m256 a = _mm256_loadu_ps(in + i);
    const __m256 b = _mm256_loadu_ps(in + i + 8);
    const __m256 pa = _mm256_cmp_ps(a, pos, _CMP_GE_OQ);
    const __m256 na = _mm256_cmp_ps(a, neg, _CMP_LE_OQ);
    const __m256 pb = _mm256_cmp_ps(b, pos, _CMP_GE_OQ);
    const __m256 nb = _mm256_cmp_ps(b, neg, _CMP_LE_OQ);
    store_le<std::uint32_t>(out + i / 4,
                            pack2_masks(as_int(pa), as_int(pb), as_int(_mm256_or_ps(pa, na)),
                                        as_int(_mm256_or_ps(pb, nb))));
    if constexpr (kFeedback) {
      const __m256 da = _mm256_blendv_ps(_mm256_blendv_ps(l0, l2, na), l3, pa);
      const __m256 db = _mm256_blendv_ps(_mm256_blendv_ps(l0, l2, nb), l3, pb);
      _mm256_storeu_ps(fb + i, _mm256_add_ps(a, da));
      _mm256_storeu_ps(fb + i + 8, _mm256_add_ps(b, db));
    }
    if constexpr (kCheck) {
#ifdef __FMA__
      bad_a = _mm256_fmadd_ps(a, zero, bad_a);
      bad_b = _mm256_fmadd_ps(b, zero, bad_b);
#else
      bad_a = _mm256_add_ps(bad_a, _mm256_mul_ps(a, zero));
      bad_b = _mm256_add_ps(bad_b, _mm256_mul_ps(b, zero));
#endif
    }
  }
  if constexpr (kCheck) {
    finite = _mm256_movemask_ps(_mm256_cmp_ps(bad_a, bad_b, _CMP_UNORD_Q)) == 0;
  }
#endif
  encode2_scalar(i, end, out, [&](std::size_t k) {
    const float v = in[k];
    if constexpr (kCheck) finite = finite && std::isfinite(v);
    const unsigned c = threshold2_code(v, tau);
    if constexpr (kFeedback) fb[k] = v + lut.v[c];
    return c;
  });
  return finite;
}

void unpack2_range(const std::byte* in, std::size_t begin, std::size_t end, const Lut2& lut,
                   float* out) {
  std::size_t i = begin;
#ifdef __AVX2__
  const __m256 table = _mm256_setr_ps(lut.v[0], lut.v[1], lut.v[2], lut.v[3], lut.v[0], lut.v[1],
                                      lut.v[2], lut.v[3]);
  // Value j of a word sits at bits 8*(j/4) + 6 - 2*(j%4).
  const __m256i shift_a = _mm256_setr_epi32(6, 4, 2, 0, 14, 12, 10, 8);
  const __m256i shift_b = _mm256_setr_epi32(22, 20, 18, 16, 30, 28, 26, 24);
  const __m256i three = _mm256_set1_epi32(3);
  for (; i + 16 <= end; i += 16) {
    const __m256i w = _mm256_set1_epi32(load_le<std::int32_t>(in + i / 4));
    const __m256 va =
        _mm256_permutevar8x32_ps(table, _mm256_and_si256(_mm256_srlv_epi32(w, shift_a), three));
    const __m256 vb =
        _mm256_permutevar8x32_ps(table, _mm256_and_si256(_mm256_srlv_epi32(w, shift_b), three));
    _mm256_storeu_ps(out + i, _mm256_add_ps(_mm256_loadu_ps(out + i), va));
    _mm256_storeu_ps(out + i + 8, _mm256_add_ps(_mm256_loadu_ps(out + i + 8), vb));
  }
#endif
  for (; i < end; ++i) out[i] = out[i] + lut.v[code2_at(in, i)];
}

}  // namespace

// ---- format helpers ---------------------------------------------------------------------

void pack2_ref(const std::uint8_t* codes, std::size_t n, std::byte* out) {
  encode2_scalar(0, n, out, [&](std::size_t i) { return codes[i] & 3u; });
}

// ---- 2-bit threshold ----------------------------------------------------------------------

void threshold2_encode_ref(const float* p, std::size_t n, float tau, std::byte* out) {
  encode2_scalar(0, n, out, [&](std::size_t i) { return threshold2_code(p[i], tau); });
}

bool threshold2_encode(const float* p, std::size_t n, float tau, std::byte* out,
                       FiniteCheck check) {
  const Lut2 unused{};
  std::atomic<bool> finite{true};
  for_chunks(n, [&](std::size_t b, std::size_t e) {
    const bool ok = check == FiniteCheck::kYes
                        ? threshold2_range<false, true>(p, nullptr, b, e, tau, unused, out)
                        : threshold2_range<false>(p, nullptr, b, e, tau, unused, out);
    if (!ok) finite.store(false, std::memory_order_relaxed);
  });
  return finite.load();
}

void threshold2_encode_feedback_ref(float* p, std::size_t n, float tau, const Lut2& lut,
                                    std::byte* out) {
  encode2_scalar(0, n, out, [&](std::size_t i) {
    const unsigned c = threshold2_code(p[i], tau);
    p[i] = p[i] + lut.v[c];
    return c;
  });
}

bool threshold2_encode_feedback(float* p, std::size_t n, float tau, const Lut2& lut, std::byte* out,
                                const Pending* pending, FiniteCheck check) {
  const auto range = [&](std::size_t b, std::size_t e) {
    return check == FiniteCheck::kYes ? threshold2_range<true, true>(p, p, b, e, tau, lut, out)
                                      : threshold2_range<true>(p, p, b, e, tau, lut, out);
  };
  std::atomic<bool> finite{true};
  for_chunks(n, [&](std::size_t b, std::size_t e) {
    bool ok = true;
    if (pending == nullptr) {
      ok = range(b, e);
    } else {
      // Pieces start on kFillBlock (a multiple of 16) boundaries: whole packed words.
      pending->blocks(b, e, [&](std::size_t pb, std::size_t pe) { ok = range(pb, pe) && ok; });
    }
    if (!ok) finite.store(false, std::memory_order_relaxed);
  });
  return finite.load();
}

// ---- decoding -----------------------------------------------------------------------------

void unpack2_add_ref(const std::byte* in, std::size_t n, const Lut2& lut, float* out) {
  for (std::size_t i = 0; i < n; ++i) out[i] = out[i] + lut.v[code2_at(in, i)];
}

void unpack2_add(const std::byte* in, std::size_t n, const Lut2& lut, float* out) {
  for_chunks(n, [&](std::size_t b, std::size_t e) { unpack2_range(in, b, e, lut, out); });
}

}  // namespace gradcomp::detail
