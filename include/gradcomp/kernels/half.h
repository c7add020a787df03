// fp32 <-> 16-bit float conversion (IEEE binary16 "fp16" and bfloat16 "bf16").
//
// Encoding rounds to nearest, ties to even, and SATURATES finite values beyond the
// format's range to +-max finite (fp16 65504, bf16 0x7F7F = 3.39e38) instead of
// producing inf: one inf in a message poisons the whole sum on every rank, while the
// saturated part of a huge value is still seen by error feedback (p - decode) and sent
// later. Non-finite inputs (inf, NaN) have no such remainder (inf - max = inf) and are
// rejected by the callers; the kernels report where they are.
//
// Each bulk kernel has a scalar reference (the *_ref functions, one element at a time)
// and, when compiled with F16C/AVX2/FMA (-march=native here), a SIMD path that the
// tests hold bit for bit to the reference. Decoding accumulates with a fused
// multiply-add, out = fma(alpha, h, out), in both paths.
#pragma once

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>

namespace gradcomp::kernels {

enum class HalfFormat : std::uint8_t { kFp16, kBf16 };

// ---- scalar references --------------------------------------------------------------

// fp32 -> fp16, round to nearest even, saturating. Precondition: x finite.
constexpr std::uint16_t float_to_fp16_ref(float x) {
  const std::uint32_t f = std::bit_cast<std::uint32_t>(x);
  const auto sign = static_cast<std::uint16_t>((f >> 16) & 0x8000u);
  const std::uint32_t a = f & 0x7FFFFFFFu;
  if (a >= 0x477FF000u) return sign | 0x7BFFu;  // >= 65520 would round to inf: saturate
  if (a >= 0x38800000u) {                       // >= 2^-14: a normal half
    // Round the 13 dropped mantissa bits to nearest even; a carry moves into the
    // exponent, which is what rounding up to the next binade needs. Rebias 127 -> 15.
    const std::uint32_t r = a + 0x0FFFu + ((a >> 13) & 1u);
    return static_cast<std::uint16_t>(sign | ((r - 0x38000000u) >> 13));
  }
  if (a <= 0x33000000u) return sign;  // <= 2^-25 (a tie at 2^-25 goes to even: zero)
  // Subnormal half: value / 2^-24 rounded to nearest even. a >= 2^-25 + ulp, so the
  // float is normal (exponent e in [102, 112]) and the shift is in [14, 24].
  const std::uint32_t e = a >> 23;
  const std::uint32_t m = (a & 0x7FFFFFu) | 0x800000u;
  const std::uint32_t shift = 126 - e;
  std::uint32_t q = m >> shift;
  const std::uint32_t rem = m & ((1u << shift) - 1);
  const std::uint32_t halfway = 1u << (shift - 1);
  if (rem > halfway || (rem == halfway && (q & 1u) != 0)) ++q;
  return static_cast<std::uint16_t>(sign | q);
}

// fp16 -> fp32, exact for every finite pattern; inf stays inf; NaNs come back quiet
// with their payload, as F16C's vcvtph2ps returns them.
constexpr float fp16_to_float_ref(std::uint16_t h) {
  const std::uint32_t sign = std::uint32_t{h & 0x8000u} << 16;
  const std::uint32_t e = (h >> 10) & 0x1Fu;
  const std::uint32_t m = h & 0x3FFu;
  if (e == 0x1F) {
    return std::bit_cast<float>(sign | 0x7F800000u | (m << 13) | (m != 0 ? 0x400000u : 0u));
  }
  if (e != 0) return std::bit_cast<float>(sign | ((e + 112) << 23) | (m << 13));
  // Zero or subnormal: m * 2^-24, exact in fp32.
  const float mag = static_cast<float>(m) * 0x1.0p-24f;
  return std::bit_cast<float>(sign | std::bit_cast<std::uint32_t>(mag));
}

// fp32 -> bf16, round to nearest even, saturating. Precondition: x finite.
constexpr std::uint16_t float_to_bf16_ref(float x) {
  const std::uint32_t f = std::bit_cast<std::uint32_t>(x);
  if ((f & 0x7FFFFFFFu) >= 0x7F7F8000u) {  // would round to inf: saturate
    return static_cast<std::uint16_t>(((f >> 16) & 0x8000u) | 0x7F7Fu);
  }
  return static_cast<std::uint16_t>((f + 0x7FFFu + ((f >> 16) & 1u)) >> 16);
}

constexpr float bf16_to_float_ref(std::uint16_t h) {
  return std::bit_cast<float>(std::uint32_t{h} << 16);
}

constexpr bool half_is_finite(HalfFormat f, std::uint16_t h) {
  return f == HalfFormat::kFp16 ? (h & 0x7C00u) != 0x7C00u : (h & 0x7F80u) != 0x7F80u;
}

constexpr std::uint16_t float_to_half_ref(HalfFormat f, float x) {
  return f == HalfFormat::kFp16 ? float_to_fp16_ref(x) : float_to_bf16_ref(x);
}
constexpr float half_to_float_ref(HalfFormat f, std::uint16_t h) {
  return f == HalfFormat::kFp16 ? fp16_to_float_ref(h) : bf16_to_float_ref(h);
}

// ---- bulk kernels (SIMD where available; `out`/`in` byte buffers: little-endian u16,
// any alignment) ----------------------------------------------------------------------

// Writes n halves of in to out. Returns n, or the index of the first non-finite input
// (out's contents are then unspecified).
std::size_t encode_halves(HalfFormat f, std::span<const float> in, std::byte* out);

// Error-feedback form: writes the halves of p to out and p[i] -= decode(half(p[i]))
// (bit-identical to fma(-1, h, p)). Returns n, or the index of the first non-finite
// input; p is then partially updated (it held a NaN or inf anyway).
std::size_t encode_halves_feedback(HalfFormat f, std::span<float> p, std::byte* out);

// Returns n if all n halves in `in` are finite, else the index of the first that is not.
std::size_t find_nonfinite_half(HalfFormat f, const std::byte* in, std::size_t n);

// out[i] = fma(alpha, decode(in[i]), out[i]) for i < out.size(). No validation.
void decode_add_halves(HalfFormat f, const std::byte* in, std::span<float> out, float alpha);

// out[i] = decode(in[i]) (plain conversion; every pattern, non-finite included).
void decode_halves(HalfFormat f, const std::byte* in, std::span<float> out);

}  // namespace gradcomp::kernels
