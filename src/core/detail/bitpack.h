// Bit-packing kernels for the 1- and 2-bit quantizers (2bit, 1bit, terngrad, signsgd,
// efsign). Every fast kernel (AVX2 intrinsics when compiled with __AVX2__, OpenMP over
// word-aligned chunks for large n) has a scalar *_ref twin; tests hold them bit-equal.
//
// 2-bit layout (MXNet's "2bit"): four codes per byte, the FIRST value in the MOST
// significant bits (masks 0xC0, 0x30, 0x0C, 0x03), bytes in order: value i sits in byte
// i/4, bits (7 - 2(i%4)) .. (6 - 2(i%4)). Sixteen values per 32-bit word; the payload is
// 4*ceil(n/16) bytes and the codes after n are 00.
//
// 1-bit layout (MXNet 1.x "1bit"): eight values per byte, the first value in the MSB:
// value i is bit (7 - i%8) of byte i/8. The payload is 4*ceil(n/32) bytes, padding bits 0.
//
// Codes: 11 = +v, 10 = -v, 00 = 0, 01 invalid (2-bit); 1 = +v, 0 = -v (1-bit).
// Decoding adds lut[code] to out, where the codec fills lut with alpha * value: the same
// float ops as out += alpha * decode, so fused error feedback (lut built with alpha = -1)
// equals the generic encode-then-decode_add(-1) bit for bit.
//
// The kernels, one job a file: bitpack_2bit.cc (2-bit threshold codes and decoding),
// bitpack_ternary.cc (TernGrad's codes), bitpack_1bit.cc (sign bits and decoding) and
// bitpack_validate.cc (checks of untrusted payloads); bitpack_internal.h holds what they
// share. The reductions the quantizers scale by are in reductions.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "gradcomp/rng.h"

namespace gradcomp::detail {

struct Pending;  // detail/pending.h

inline constexpr std::size_t kNoIndex = static_cast<std::size_t>(-1);

// Payload bytes of n packed codes (n <= 2^32 - 1, so no overflow on 64-bit size_t).
constexpr std::size_t packed2_bytes(std::size_t n) { return 4 * ((n + 15) / 16); }
constexpr std::size_t packed1_bytes(std::size_t n) { return 4 * ((n + 31) / 32); }

// Code of value i (the format's definition; used by references, tests and error paths).
inline unsigned code2_at(const std::byte* packed, std::size_t i) {
  return (std::to_integer<unsigned>(packed[i / 4]) >> (6 - 2 * (i % 4))) & 3u;
}
inline unsigned bit1_at(const std::byte* packed, std::size_t i) {
  return (std::to_integer<unsigned>(packed[i / 8]) >> (7 - i % 8)) & 1u;
}

// Packs arbitrary codes (each 0..3, resp. 0..1) into the layouts above, padding included.
void pack2_ref(const std::uint8_t* codes, std::size_t n, std::byte* out);
void pack1_ref(const std::uint8_t* bits, std::size_t n, std::byte* out);

// Values added to out per code: v[code] = alpha * decoded value.
struct Lut2 {
  float v[4];  // codes 00, 01 (invalid: never reached after validation), 10, 11
};
struct Lut1 {
  float v[2];  // bits 0, 1
};

// ---- 2-bit threshold quantisation (MXNet / Strom 2015) --------------------------------
// code 11 if p >= tau, 10 if p <= -tau, else 00 (NaN: 00). tau > 0.
// The fast paths return false when asked to check (FiniteCheck::kYes) and some p_i is inf
// or NaN (encoded as above all the same); true otherwise. 2bit's sampled adaptive tau
// needs the check: its sample has not seen most of p.
enum class FiniteCheck : bool { kNo, kYes };
void threshold2_encode_ref(const float* p, std::size_t n, float tau, std::byte* out);
bool threshold2_encode(const float* p, std::size_t n, float tau, std::byte* out,
                       FiniteCheck check = FiniteCheck::kNo);
// The same codes, and p[i] += lut.v[code_i] in the same pass (error feedback). With a
// pending (detail/pending.h), p is formed block by block inside that pass.
void threshold2_encode_feedback_ref(float* p, std::size_t n, float tau, const Lut2& lut,
                                    std::byte* out);
bool threshold2_encode_feedback(float* p, std::size_t n, float tau, const Lut2& lut, std::byte* out,
                                const Pending* pending = nullptr,
                                FiniteCheck check = FiniteCheck::kNo);

// ---- stochastic ternary codes (TernGrad) ----------------------------------------------
// a_i = min(|g_i|, bound); code 11 (g_i > 0) or 10 (g_i < 0) if rng.uniform(i) < a_i / s,
// else 00. Requires s > 0 finite and every g_i finite; bound may be +inf (no clipping).
void ternary_encode_ref(const float* g, std::size_t n, float s, float bound, const CounterRng& rng,
                        std::byte* out);
void ternary_encode(const float* g, std::size_t n, float s, float bound, const CounterRng& rng,
                    std::byte* out);

// ---- sign bits (1bit, signsgd, efsign) ------------------------------------------------
enum class SignRule : std::uint8_t {
  kGreater,       // bit = p > t   (MXNet 1bit)
  kGreaterEqual,  // bit = p >= t  (signSGD with t = 0: sign(0) := +1)
};
void sign_encode_ref(const float* p, std::size_t n, float t, SignRule rule, std::byte* out);
void sign_encode(const float* p, std::size_t n, float t, SignRule rule, std::byte* out);
// The same bits, and p[i] += lut.v[bit_i] in the same pass (p formed in it with a pending).
void sign_encode_feedback_ref(float* p, std::size_t n, float t, SignRule rule, const Lut1& lut,
                              std::byte* out);
void sign_encode_feedback(float* p, std::size_t n, float t, SignRule rule, const Lut1& lut,
                          std::byte* out, const Pending* pending = nullptr);
// The same encoders, returning the CRC-32C (crc32c(), from 0) of the packed1_bytes(n)
// bytes they write: each piece of kSignCrcPiece values is checksummed right after it is
// packed, while its bytes are in L1, so the carry-less multiplies overlap the next
// piece's loads instead of taking a pass of their own (docs/measurements/codec-speed.md).
// With several threads the pieces run in parallel and the CRC is a pass after them.
inline constexpr std::size_t kSignCrcPiece = 4096;
std::uint32_t sign_encode_crc(const float* p, std::size_t n, float t, SignRule rule,
                              std::byte* out);
std::uint32_t sign_encode_feedback_crc(float* p, std::size_t n, float t, SignRule rule,
                                       const Lut1& lut, std::byte* out,
                                       const Pending* pending = nullptr);

// ---- decoding: out[i] += lut.v[code_i] ------------------------------------------------
void unpack2_add_ref(const std::byte* in, std::size_t n, const Lut2& lut, float* out);
void unpack2_add(const std::byte* in, std::size_t n, const Lut2& lut, float* out);
void unpack1_add_ref(const std::byte* in, std::size_t n, const Lut1& lut, float* out);
void unpack1_add(const std::byte* in, std::size_t n, const Lut1& lut, float* out);

// ---- validation of untrusted packed payloads (packed2_bytes(n) / packed1_bytes(n)) ----
struct Packed2Scan {
  std::size_t first_invalid = kNoIndex;  // first i < n with code 01
  bool any_nonzero = false;              // some code among the first n is not 00
  bool padding_clean = true;             // every code after n is 00
};
Packed2Scan scan_packed2_ref(const std::byte* in, std::size_t n);
Packed2Scan scan_packed2(const std::byte* in, std::size_t n);
bool packed1_padding_clean(const std::byte* in, std::size_t n);

// Throw CorruptMessage "<op>: ..." naming the element / n. validate_packed2 returns
// whether any code is nonzero.
bool validate_packed2(const std::byte* in, std::size_t n, std::string_view op);
void validate_packed1(const std::byte* in, std::size_t n, std::string_view op);
// A float scale from the wire: finite and >= +0 (a negative zero is rejected too:
// encoders never write one).
void validate_scale(float s, std::string_view op, std::string_view what);

}  // namespace gradcomp::detail
