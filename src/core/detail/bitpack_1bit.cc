// The 1-bit layout's kernels (bitpack.h): pack1_ref, the sign encoders of 1bit, signsgd
// and efsign (with and without fused error feedback, with and without the message's
// checksum folded in) and the decoder, each a scalar reference and an AVX2 / OpenMP
// fast path.
#include "detail/bitpack.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>

#ifdef GRADCOMP_OPENMP
#include <omp.h>
#endif

#include "detail/bitpack_internal.h"
#include "detail/pending.h"
#include "gradcomp/crc32c.h"
#include "gradcomp/wire.h"

namespace gradcomp::detail {

using bitpack::encode1_scalar;
using bitpack::for_chunks;
#ifdef __AVX2__
using bitpack::as_int;
using bitpack::pack1_masks;
#endif

namespace {

template <SignRule kRule>
inline unsigned sign_bit(float v, float t) {
  if constexpr (kRule == SignRule::kGreater) {
    return v > t ? 1u : 0u;
  } else {
    return v >= t ? 1u : 0u;
  }
}

// ---- range kernels (begin on a word boundary) -----------------------------------------

template <bool kFeedback, SignRule kRule>
void sign_range(const float* in, float* fb, std::size_t begin, std::size_t end, float t,
                const Lut1& lut, std::byte* out) {
  std::size_t i = begin;
#ifdef __AVX2__
  constexpr int kPredicate = kRule == SignRule::kGreater ? _CMP_GT_OQ : _CMP_GE_OQ;
  const __m256 t_v = _mm256_set1_ps(t);
  const __m256 l0 = _mm256_set1_ps(lut.v[0]);
  const __m256 l1 = _mm256_set1_ps(lut.v[1]);
  for (; i + 32 <= end; i += 32) {
    __m256 x[4], m[4];
    for (int k = 0; k < 4; ++k) {
      x[k] = _mm256_loadu_ps(in + i + 8 * k);
      m[k] = _mm256_cmp_ps(x[k], t_v, kPredicate);
    }
    store_le<std::uint32_t>(out + i / 8,
                            pack1_masks(as_int(m[0]), as_int(m[1]), as_int(m[2]), as_int(m[3])));
    if constexpr (kFeedback) {
      for (int k = 0; k < 4; ++k) {
        _mm256_storeu_ps(fb + i + 8 * k, _mm256_add_ps(x[k], _mm256_blendv_ps(l0, l1, m[k])));
      }
    }
  }
#endif
  encode1_scalar(i, end, out, [&](std::size_t k) {
    const unsigned b = sign_bit<kRule>(in[k], t);
    if constexpr (kFeedback) fb[k] = in[k] + lut.v[b];
    return b;
  });
}

void unpack1_range(const std::byte* in, std::size_t begin, std::size_t end, const Lut1& lut,
                   float* out) {
  std::size_t i = begin;
#ifdef __AVX2__
  const __m256 l0 = _mm256_set1_ps(lut.v[0]);
  const __m256 l1 = _mm256_set1_ps(lut.v[1]);
  // Value 8b + j is word bit 8b + 7 - j: shifting left by 24 - 8b + j moves it to the
  // sign bit, which blendvps reads.
  const __m256i shift[4] = {_mm256_setr_epi32(24, 25, 26, 27, 28, 29, 30, 31),
                            _mm256_setr_epi32(16, 17, 18, 19, 20, 21, 22, 23),
                            _mm256_setr_epi32(8, 9, 10, 11, 12, 13, 14, 15),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)};
  for (; i + 32 <= end; i += 32) {
    const __m256i w = _mm256_set1_epi32(load_le<std::int32_t>(in + i / 8));
    for (int k = 0; k < 4; ++k) {
      const __m256 sel = _mm256_castsi256_ps(_mm256_sllv_epi32(w, shift[k]));
      float* o = out + i + 8 * k;
      _mm256_storeu_ps(o, _mm256_add_ps(_mm256_loadu_ps(o), _mm256_blendv_ps(l0, l1, sel)));
    }
  }
#endif
  for (; i < end; ++i) out[i] = out[i] + lut.v[bit1_at(in, i)];
}

}  // namespace

// ---- format helpers ---------------------------------------------------------------------

void pack1_ref(const std::uint8_t* bits, std::size_t n, std::byte* out) {
  encode1_scalar(0, n, out, [&](std::size_t i) { return bits[i] & 1u; });
}

// ---- sign bits ----------------------------------------------------------------------------

void sign_encode_ref(const float* p, std::size_t n, float t, SignRule rule, std::byte* out) {
  encode1_scalar(0, n, out, [&](std::size_t i) {
    return rule == SignRule::kGreater ? sign_bit<SignRule::kGreater>(p[i], t)
                                      : sign_bit<SignRule::kGreaterEqual>(p[i], t);
  });
}

namespace {

// Packs [b, e) of p into out with the rule's sign bits (no feedback).
auto sign_ranges(const float* p, float t, SignRule rule, std::byte* out) {
  return [=](std::size_t b, std::size_t e) {
    const Lut1 unused{};
    if (rule == SignRule::kGreater) {
      sign_range<false, SignRule::kGreater>(p, nullptr, b, e, t, unused, out);
    } else {
      sign_range<false, SignRule::kGreaterEqual>(p, nullptr, b, e, t, unused, out);
    }
  };
}

// The same with p[i] += lut.v[bit_i], p formed block by block from `pending` if given.
auto sign_feedback_ranges(float* p, float t, SignRule rule, const Lut1& lut, std::byte* out,
                          const Pending* pending) {
  return [=](std::size_t b, std::size_t e) {
    const auto range = [&](std::size_t bb, std::size_t ee) {
      if (rule == SignRule::kGreater) {
        sign_range<true, SignRule::kGreater>(p, p, bb, ee, t, lut, out);
      } else {
        sign_range<true, SignRule::kGreaterEqual>(p, p, bb, ee, t, lut, out);
      }
    };
    if (pending == nullptr) {
      range(b, e);
    } else {
      pending->blocks(b, e, range);  // pieces start on multiples of 32: whole words
    }
  };
}

// Whether for_chunks spreads n values over several threads.
bool runs_parallel(std::size_t n) {
#ifdef GRADCOMP_OPENMP
  return n > bitpack::kParallelMin && omp_get_max_threads() > 1 && !omp_in_parallel();
#else
  (void)n;
  return false;
#endif
}

// encode(b, e) over [0, n) and the CRC-32C of the packed bytes: piece by piece, each
// piece's bytes checksummed right after they are written (one thread), or the pieces in
// parallel and then one pass (several).
template <class Encode>
std::uint32_t encode_checksummed(std::size_t n, std::byte* out, const Encode& encode) {
  if (runs_parallel(n)) {
    for_chunks(n, encode);
    return crc32c(std::span<const std::byte>(out, packed1_bytes(n)));
  }
  std::uint32_t crc = 0;
  for (std::size_t b = 0; b < n; b += kSignCrcPiece) {
    const std::size_t e = std::min(n, b + kSignCrcPiece);
    encode(b, e);
    crc = crc32c(std::span<const std::byte>(out + b / 8, packed1_bytes(e) - b / 8), crc);
  }
  return crc;
}

}  // namespace

void sign_encode(const float* p, std::size_t n, float t, SignRule rule, std::byte* out) {
  for_chunks(n, sign_ranges(p, t, rule, out));
}

std::uint32_t sign_encode_crc(const float* p, std::size_t n, float t, SignRule rule,
                              std::byte* out) {
  return encode_checksummed(n, out, sign_ranges(p, t, rule, out));
}

void sign_encode_feedback_ref(float* p, std::size_t n, float t, SignRule rule, const Lut1& lut,
                              std::byte* out) {
  encode1_scalar(0, n, out, [&](std::size_t i) {
    const unsigned b = rule == SignRule::kGreater ? sign_bit<SignRule::kGreater>(p[i], t)
                                                  : sign_bit<SignRule::kGreaterEqual>(p[i], t);
    p[i] = p[i] + lut.v[b];
    return b;
  });
}

void sign_encode_feedback(float* p, std::size_t n, float t, SignRule rule, const Lut1& lut,
                          std::byte* out, const Pending* pending) {
  for_chunks(n, sign_feedback_ranges(p, t, rule, lut, out, pending));
}

std::uint32_t sign_encode_feedback_crc(float* p, std::size_t n, float t, SignRule rule,
                                       const Lut1& lut, std::byte* out, const Pending* pending) {
  return encode_checksummed(n, out, sign_feedback_ranges(p, t, rule, lut, out, pending));
}

// ---- decoding -----------------------------------------------------------------------------

void unpack1_add_ref(const std::byte* in, std::size_t n, const Lut1& lut, float* out) {
  for (std::size_t i = 0; i < n; ++i) out[i] = out[i] + lut.v[bit1_at(in, i)];
}

void unpack1_add(const std::byte* in, std::size_t n, const Lut1& lut, float* out) {
  for_chunks(n, [&](std::size_t b, std::size_t e) { unpack1_range(in, b, e, lut, out); });
}

}  // namespace gradcomp::detail
