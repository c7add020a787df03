// CRC-32C: portable, SSE4.2, and carry-less-multiply folding (see gradcomp/crc32c.h).
//
// sse4.2 follows Mark Adler's crc32c.c: the crc32 instruction has a latency
// of 3 cycles and a throughput of 1 per cycle, so one dependent chain runs at a third
// of the unit's speed. Long inputs are therefore cut into three equal blocks whose
// CRCs run as three independent chains in one loop, then combined: the CRC register
// is linear over GF(2), so the state after blocks A then B is shift(state_A, |B|) XOR
// state_B-from-zero, where shift() feeds |B| zero bytes. shift() for the two block
// sizes used is precomputed as four 256-entry tables (one per byte of the state).
//
// The folding paths follow Gopal et al., "Fast CRC Computation for Generic Polynomials
// Using PCLMULQDQ Instruction" (Intel, 2009). The input is read as one polynomial M
// over GF(2); the CRC register is M(x) * x^32 mod P(x). A 128-bit block A followed, D
// bits later, by block B contributes A * x^D + B, and A * x^D can be replaced by any
// polynomial congruent to it mod P without changing the CRC. Splitting A into its two
// 64-bit halves, A * x^D == A_hi * (x^(D+64) mod P) + A_lo * (x^D mod P): two
// 64x32-bit carry-less products of at most 96 bits, XORed into B. So accumulators
// spanning several 128-bit lanes each absorb the block D bits ahead of them (D = the
// bytes consumed per round), independently, at the multiplier's throughput; at the
// end they fold into one another (D = their distance), then lane by lane into one
// 128-bit value F congruent to everything read so far. F's CRC from a zero register,
// two crc32 instructions, is then the CRC of the whole prefix; the tail (< 16 bytes)
// continues with crc32. The initial register is XORed into the first 4 bytes, which
// is what the register does with them anyway.
//
// Bit order: the CRC is reflected, so byte 0 bit 0 is the highest-degree coefficient,
// and a little-endian 128-bit load holds x^(127-m) in bit m: the low qword is A_hi.
// PCLMULQDQ of two such reflected 64-bit operands (bit i = x^(63-i)) returns bit k =
// x^(126-k), i.e. the reflected 128-bit product times x. The constants below are
// therefore x^(D+63) mod P (for the low qword) and x^(D-1) mod P (for the high one),
// bit-reversed into the top 32 bits of a qword. They are computed at compile time.
#include "gradcomp/crc32c.h"

#include <array>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <string>

#include "gradcomp/error.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
#define GRADCOMP_CRC32C_X86 1
#endif

namespace gradcomp {

namespace {

constexpr std::uint32_t kPoly = 0x82F63B78u;  // reflected Castagnoli polynomial

// Slicing-by-8 tables: table[0] is the classic byte table; table[k][b] is the CRC
// register contribution of byte b followed by k zero bytes.
struct PortableTables {
  std::array<std::array<std::uint32_t, 256>, 8> t{};
  PortableTables() {
    for (std::uint32_t b = 0; b < 256; ++b) {
      std::uint32_t c = b;
      for (int i = 0; i < 8; ++i) c = (c & 1) ? (c >> 1) ^ kPoly : c >> 1;
      t[0][b] = c;
    }
    for (std::uint32_t b = 0; b < 256; ++b) {
      for (std::size_t k = 1; k < 8; ++k) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xFF];
    }
  }
};

const PortableTables& portable_tables() {
  static const PortableTables tables;
  return tables;
}

// Raw register update (no pre/post inversion).
std::uint32_t update_portable(std::uint32_t c, const unsigned char* p, std::size_t n) {
  const auto& t = portable_tables().t;
  while (n > 0 && (reinterpret_cast<std::uintptr_t>(p) & 7) != 0) {
    c = t[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
    --n;
  }
  while (n >= 8) {
    std::uint64_t w;
    std::memcpy(&w, p, 8);
    w ^= c;
    c = t[7][w & 0xFF] ^ t[6][(w >> 8) & 0xFF] ^ t[5][(w >> 16) & 0xFF] ^ t[4][(w >> 24) & 0xFF] ^
        t[3][(w >> 32) & 0xFF] ^ t[2][(w >> 40) & 0xFF] ^ t[1][(w >> 48) & 0xFF] ^ t[0][w >> 56];
    p += 8;
    n -= 8;
  }
  while (n-- > 0) c = t[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
  return c;
}

#ifdef GRADCOMP_CRC32C_X86

// Block sizes of the three-stream loop: long blocks for the bulk, short ones for what
// remains (a 64 KiB message is 2 long rounds, then short rounds, then a single tail).
constexpr std::size_t kLongBlock = 8192;
constexpr std::size_t kShortBlock = 256;

// shift(state) = the register after `bytes` zero bytes, as four byte-indexed tables.
struct ShiftTable {
  std::array<std::array<std::uint32_t, 256>, 4> t{};
  explicit ShiftTable(std::size_t bytes) {
    // The image of each basis vector, by feeding zero bytes through the byte table
    // (once, at first use: 32 * 8192 table steps for the long block).
    std::array<std::uint32_t, 32> image{};
    const auto& byte_table = portable_tables().t[0];
    for (int bit = 0; bit < 32; ++bit) {
      std::uint32_t c = 1u << bit;
      for (std::size_t i = 0; i < bytes; ++i) c = byte_table[c & 0xFF] ^ (c >> 8);
      image[static_cast<std::size_t>(bit)] = c;
    }
    for (std::size_t k = 0; k < 4; ++k) {
      for (std::uint32_t b = 0; b < 256; ++b) {
        std::uint32_t v = 0;
        for (std::size_t j = 0; j < 8; ++j) {
          if ((b >> j) & 1) v ^= image[8 * k + j];
        }
        t[k][b] = v;
      }
    }
  }
  std::uint32_t operator()(std::uint32_t c) const {
    return t[0][c & 0xFF] ^ t[1][(c >> 8) & 0xFF] ^ t[2][(c >> 16) & 0xFF] ^ t[3][c >> 24];
  }
};

__attribute__((target("sse4.2"))) inline std::uint64_t crc_word(std::uint64_t c,
                                                                const unsigned char* p) {
  std::uint64_t w;
  std::memcpy(&w, p, 8);
  return _mm_crc32_u64(c, w);
}

// Three chains over [p, p + 3 * block) at a time, combined with `shift`.
__attribute__((target("sse4.2"))) std::uint64_t three_streams(std::uint64_t c0,
                                                              const unsigned char*& p,
                                                              std::size_t& n, std::size_t block,
                                                              const ShiftTable& shift) {
  while (n >= 3 * block) {
    std::uint64_t c1 = 0;
    std::uint64_t c2 = 0;
    const unsigned char* const end = p + block;
    do {
      c0 = crc_word(c0, p);
      c1 = crc_word(c1, p + block);
      c2 = crc_word(c2, p + 2 * block);
      p += 8;
    } while (p < end);
    c0 = shift(static_cast<std::uint32_t>(c0)) ^ c1;
    c0 = shift(static_cast<std::uint32_t>(c0)) ^ c2;
    p += 2 * block;
    n -= 3 * block;
  }
  return c0;
}

__attribute__((target("sse4.2"))) std::uint32_t update_sse42(std::uint32_t crc,
                                                             const unsigned char* p,
                                                             std::size_t n) {
  static const ShiftTable long_shift(kLongBlock);
  static const ShiftTable short_shift(kShortBlock);
  std::uint64_t c = crc;
  while (n > 0 && (reinterpret_cast<std::uintptr_t>(p) & 7) != 0) {
    c = _mm_crc32_u8(static_cast<std::uint32_t>(c), *p++);
    --n;
  }
  c = three_streams(c, p, n, kLongBlock, long_shift);
  c = three_streams(c, p, n, kShortBlock, short_shift);
  while (n >= 8) {
    c = crc_word(c, p);
    p += 8;
    n -= 8;
  }
  while (n-- > 0) c = _mm_crc32_u8(static_cast<std::uint32_t>(c), *p++);
  return static_cast<std::uint32_t>(c);
}

// ---- carry-less-multiply folding -------------------------------------------------

constexpr std::uint32_t kPolyNormal = 0x1EDC6F41u;  // P(x) - x^32, bit i = x^i

// x^n mod P, bit i = x^i.
constexpr std::uint32_t xpow_mod(std::uint32_t n) {
  std::uint32_t r = 1;
  for (std::uint32_t i = 0; i < n; ++i) {
    const bool carry = (r & 0x80000000u) != 0;
    r <<= 1;
    if (carry) r ^= kPolyNormal;
  }
  return r;
}

constexpr std::uint32_t bit_reverse32(std::uint32_t v) {
  std::uint32_t r = 0;
  for (int i = 0; i < 32; ++i) r |= ((v >> i) & 1u) << (31 - i);
  return r;
}

// A polynomial of degree < 32 as a reflected 64-bit PCLMULQDQ operand (x^d in bit 63-d).
constexpr std::uint64_t reflected_operand(std::uint32_t poly) {
  return static_cast<std::uint64_t>(bit_reverse32(poly)) << 32;
}

// The two constants that fold a 128-bit lane forward by d_bits: `low` multiplies the
// lane's low qword (its high-degree half), `high` the high qword.
struct FoldConstants {
  std::uint64_t low;
  std::uint64_t high;
};
constexpr FoldConstants fold_constants(std::uint32_t d_bits) {
  return {reflected_operand(xpow_mod(d_bits + 63)), reflected_operand(xpow_mod(d_bits - 1))};
}
constexpr FoldConstants kFold128 = fold_constants(128);
constexpr FoldConstants kFold256 = fold_constants(256);
constexpr FoldConstants kFold512 = fold_constants(512);
constexpr FoldConstants kFold1024 = fold_constants(1024);
constexpr FoldConstants kFold2048 = fold_constants(2048);

#define GRADCOMP_TARGET_PCLMUL __attribute__((target("pclmul,sse4.2")))
#define GRADCOMP_TARGET_VPCLMUL256 __attribute__((target("avx2,vpclmulqdq,pclmul,sse4.2")))
#define GRADCOMP_TARGET_VPCLMUL512 \
  __attribute__((target("avx512f,avx512vl,avx512bw,vpclmulqdq,pclmul,sse4.2")))

GRADCOMP_TARGET_PCLMUL inline __m128i constants128(FoldConstants k) {
  return _mm_set_epi64x(static_cast<long long>(k.high), static_cast<long long>(k.low));
}

// x folded forward onto `data` (x * x^D + data, reduced to 128 bits).
GRADCOMP_TARGET_PCLMUL inline __m128i fold128(__m128i x, __m128i k, __m128i data) {
  return _mm_xor_si128(
      _mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00), _mm_clmulepi64_si128(x, k, 0x11)), data);
}

GRADCOMP_TARGET_PCLMUL inline __m128i load128(const unsigned char* p) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
}

// The last 128-bit value, then the < 16 tail bytes, through crc32: the raw register.
GRADCOMP_TARGET_PCLMUL inline std::uint32_t finish_folding(__m128i x, const unsigned char* p,
                                                           std::size_t n) {
  const __m128i k128 = constants128(kFold128);
  while (n >= 16) {
    x = fold128(x, k128, load128(p));
    p += 16;
    n -= 16;
  }
  std::uint64_t c = _mm_crc32_u64(0, static_cast<std::uint64_t>(_mm_cvtsi128_si64(x)));
  c = _mm_crc32_u64(c, static_cast<std::uint64_t>(_mm_extract_epi64(x, 1)));
  if (n >= 8) {
    c = crc_word(c, p);
    p += 8;
    n -= 8;
  }
  while (n-- > 0) c = _mm_crc32_u8(static_cast<std::uint32_t>(c), *p++);
  return static_cast<std::uint32_t>(c);
}

// Below these lengths the folding set-up does not pay: the sse4.2 path runs instead.
constexpr std::size_t kMinPclmul = 128;
constexpr std::size_t kMinVpclmul256 = 256;
constexpr std::size_t kMinVpclmul512 = 512;

// Four 128-bit accumulators, 64 bytes a round.
GRADCOMP_TARGET_PCLMUL std::uint32_t update_pclmul(std::uint32_t crc, const unsigned char* p,
                                                   std::size_t n) {
  if (n < kMinPclmul) return update_sse42(crc, p, n);
  const __m128i k512 = constants128(kFold512);
  const __m128i k128 = constants128(kFold128);
  __m128i x0 = _mm_xor_si128(load128(p), _mm_cvtsi32_si128(static_cast<int>(crc)));
  __m128i x1 = load128(p + 16);
  __m128i x2 = load128(p + 32);
  __m128i x3 = load128(p + 48);
  p += 64;
  n -= 64;
  while (n >= 64) {
    x0 = fold128(x0, k512, load128(p));
    x1 = fold128(x1, k512, load128(p + 16));
    x2 = fold128(x2, k512, load128(p + 32));
    x3 = fold128(x3, k512, load128(p + 48));
    p += 64;
    n -= 64;
  }
  x1 = fold128(x0, k128, x1);
  x2 = fold128(x1, k128, x2);
  x3 = fold128(x2, k128, x3);
  return finish_folding(x3, p, n);
}

GRADCOMP_TARGET_VPCLMUL256 inline __m256i fold256(__m256i x, __m256i k, __m256i data) {
  return _mm256_xor_si256(
      _mm256_xor_si256(_mm256_clmulepi64_epi128(x, k, 0x00), _mm256_clmulepi64_epi128(x, k, 0x11)),
      data);
}

GRADCOMP_TARGET_VPCLMUL256 inline __m256i constants256(FoldConstants k) {
  const auto lo = static_cast<long long>(k.low);
  const auto hi = static_cast<long long>(k.high);
  return _mm256_set_epi64x(hi, lo, hi, lo);
}

// The 32 bytes at q; kCopy: also stored at the same offset from dst as q from p0.
template <bool kCopy>
GRADCOMP_TARGET_VPCLMUL256 inline __m256i load256(const unsigned char* q, unsigned char* dst,
                                                  const unsigned char* p0) {
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
  if constexpr (kCopy) _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + (q - p0)), v);
  return v;
}

// Four 256-bit accumulators, 128 bytes a round. kCopy: also store every vector read to
// dst (crc32c_copy), the tail after the folded part copied by memcpy.
template <bool kCopy>
GRADCOMP_TARGET_VPCLMUL256 std::uint32_t fold_vpclmul256(std::uint32_t crc, const unsigned char* p,
                                                         std::size_t n, unsigned char* dst) {
  const unsigned char* const p0 = p;
  if (n < kMinVpclmul256) {
    if constexpr (kCopy) {
      if (n > 0) std::memcpy(dst, p, n);
    }
    return update_sse42(crc, p, n);
  }
  const __m256i k1024 = constants256(kFold1024);
  const __m256i k256 = constants256(kFold256);
  __m256i x0 = _mm256_xor_si256(load256<kCopy>(p, dst, p0),
                                _mm256_set_epi32(0, 0, 0, 0, 0, 0, 0, static_cast<int>(crc)));
  __m256i x1 = load256<kCopy>(p + 32, dst, p0);
  __m256i x2 = load256<kCopy>(p + 64, dst, p0);
  __m256i x3 = load256<kCopy>(p + 96, dst, p0);
  p += 128;
  n -= 128;
  while (n >= 128) {
    x0 = fold256(x0, k1024, load256<kCopy>(p, dst, p0));
    x1 = fold256(x1, k1024, load256<kCopy>(p + 32, dst, p0));
    x2 = fold256(x2, k1024, load256<kCopy>(p + 64, dst, p0));
    x3 = fold256(x3, k1024, load256<kCopy>(p + 96, dst, p0));
    p += 128;
    n -= 128;
  }
  x1 = fold256(x0, k256, x1);
  x2 = fold256(x1, k256, x2);
  x3 = fold256(x2, k256, x3);
  while (n >= 32) {
    x3 = fold256(x3, k256, load256<kCopy>(p, dst, p0));
    p += 32;
    n -= 32;
  }
  const __m128i x =
      fold128(_mm256_castsi256_si128(x3), constants128(kFold128), _mm256_extracti128_si256(x3, 1));
  if constexpr (kCopy) {
    if (n > 0) std::memcpy(dst + (p - p0), p, n);
  }
  return finish_folding(x, p, n);
}

std::uint32_t update_vpclmul256(std::uint32_t crc, const unsigned char* p, std::size_t n) {
  return fold_vpclmul256<false>(crc, p, n, nullptr);
}

GRADCOMP_TARGET_VPCLMUL512 inline __m512i fold512(__m512i x, __m512i k, __m512i data) {
  // 0x96: a ^ b ^ c in one instruction.
  return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(x, k, 0x00),
                                   _mm512_clmulepi64_epi128(x, k, 0x11), data, 0x96);
}

GRADCOMP_TARGET_VPCLMUL512 inline __m512i constants512(FoldConstants k) {
  const auto lo = static_cast<long long>(k.low);
  const auto hi = static_cast<long long>(k.high);
  return _mm512_set_epi64(hi, lo, hi, lo, hi, lo, hi, lo);
}

template <bool kCopy>
GRADCOMP_TARGET_VPCLMUL512 inline __m512i load512(const unsigned char* q, unsigned char* dst,
                                                  const unsigned char* p0) {
  const __m512i v = _mm512_loadu_si512(q);
  if constexpr (kCopy) _mm512_storeu_si512(dst + (q - p0), v);
  return v;
}

// Four 512-bit accumulators, 256 bytes a round. kCopy as in fold_vpclmul256.
template <bool kCopy>
GRADCOMP_TARGET_VPCLMUL512 std::uint32_t fold_vpclmul512(std::uint32_t crc, const unsigned char* p,
                                                         std::size_t n, unsigned char* dst) {
  const unsigned char* const p0 = p;
  if (n < kMinVpclmul512) {
    if constexpr (kCopy) {
      if (n > 0) std::memcpy(dst, p, n);
    }
    return update_sse42(crc, p, n);
  }
  const __m512i k2048 = constants512(kFold2048);
  const __m512i k512 = constants512(kFold512);
  __m512i x0 = _mm512_xor_si512(
      load512<kCopy>(p, dst, p0),
      _mm512_inserti32x4(_mm512_setzero_si512(), _mm_cvtsi32_si128(static_cast<int>(crc)), 0));
  __m512i x1 = load512<kCopy>(p + 64, dst, p0);
  __m512i x2 = load512<kCopy>(p + 128, dst, p0);
  __m512i x3 = load512<kCopy>(p + 192, dst, p0);
  p += 256;
  n -= 256;
  while (n >= 256) {
    x0 = fold512(x0, k2048, load512<kCopy>(p, dst, p0));
    x1 = fold512(x1, k2048, load512<kCopy>(p + 64, dst, p0));
    x2 = fold512(x2, k2048, load512<kCopy>(p + 128, dst, p0));
    x3 = fold512(x3, k2048, load512<kCopy>(p + 192, dst, p0));
    p += 256;
    n -= 256;
  }
  x1 = fold512(x0, k512, x1);
  x2 = fold512(x1, k512, x2);
  x3 = fold512(x2, k512, x3);
  while (n >= 64) {
    x3 = fold512(x3, k512, load512<kCopy>(p, dst, p0));
    p += 64;
    n -= 64;
  }
  // The four lanes, through memory (GCC 12 warns about _mm512_extracti32x4_epi32's
  // undefined pass-through operand).
  alignas(64) unsigned char lanes[64];
  _mm512_store_si512(lanes, x3);
  const __m128i k128 = constants128(kFold128);
  __m128i x = load128(lanes);
  x = fold128(x, k128, load128(lanes + 16));
  x = fold128(x, k128, load128(lanes + 32));
  x = fold128(x, k128, load128(lanes + 48));
  if constexpr (kCopy) {
    if (n > 0) std::memcpy(dst + (p - p0), p, n);
  }
  return finish_folding(x, p, n);
}

std::uint32_t update_vpclmul512(std::uint32_t crc, const unsigned char* p, std::size_t n) {
  return fold_vpclmul512<false>(crc, p, n, nullptr);
}

// ---- run-time CPU checks ---------------------------------------------------------

struct CpuCrcFeatures {
  bool sse42 = false;
  bool pclmul = false;
  bool vpclmul256 = false;  // + AVX2, VPCLMULQDQ, YMM state enabled by the OS
  bool vpclmul512 = false;  // + AVX-512 F/VL/BW, ZMM state enabled by the OS
};

std::uint64_t read_xcr0() {
  std::uint32_t lo = 0;
  std::uint32_t hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<std::uint64_t>(hi) << 32) | lo;
}

CpuCrcFeatures detect_features() {
  CpuCrcFeatures f;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(1, &a, &b, &c, &d) == 0) return f;
  f.sse42 = (c & (1u << 20)) != 0;
  f.pclmul = f.sse42 && (c & (1u << 1)) != 0;
  const bool osxsave = (c & (1u << 27)) != 0;
  const bool avx = (c & (1u << 28)) != 0;
  const std::uint64_t xcr0 = osxsave ? read_xcr0() : 0;
  const bool ymm_state = (xcr0 & 0x6) == 0x6;    // SSE + AVX state
  const bool zmm_state = (xcr0 & 0xE6) == 0xE6;  // + opmask, ZMM_Hi256, Hi16_ZMM
  if (__get_cpuid_max(0, nullptr) < 7) return f;
  __cpuid_count(7, 0, a, b, c, d);
  const bool avx2 = (b & (1u << 5)) != 0;
  const bool avx512f = (b & (1u << 16)) != 0;
  const bool avx512bw = (b & (1u << 30)) != 0;
  const bool avx512vl = (b & (1u << 31)) != 0;
  const bool vpclmulqdq = (c & (1u << 10)) != 0;
  f.vpclmul256 = f.pclmul && avx && avx2 && vpclmulqdq && ymm_state;
  f.vpclmul512 = f.vpclmul256 && avx512f && avx512bw && avx512vl && zmm_state;
  return f;
}

const CpuCrcFeatures& cpu_features() {
  static const CpuCrcFeatures f = detect_features();
  return f;
}

#endif  // GRADCOMP_CRC32C_X86

using UpdateFn = std::uint32_t (*)(std::uint32_t, const unsigned char*, std::size_t);

UpdateFn update_of(Crc32cPath path) {
  switch (path) {
#ifdef GRADCOMP_CRC32C_X86
    case Crc32cPath::kSse42:
      return &update_sse42;
    case Crc32cPath::kPclmul:
      return &update_pclmul;
    case Crc32cPath::kVpclmul256:
      return &update_vpclmul256;
    case Crc32cPath::kVpclmul512:
      return &update_vpclmul512;
#endif
    default:
      return &update_portable;
  }
}

bool available(Crc32cPath path) {
#ifdef GRADCOMP_CRC32C_X86
  const CpuCrcFeatures& f = cpu_features();
  switch (path) {
    case Crc32cPath::kPortable:
      return true;
    case Crc32cPath::kSse42:
      return f.sse42;
    case Crc32cPath::kPclmul:
      return f.pclmul;
    case Crc32cPath::kVpclmul256:
      return f.vpclmul256;
    case Crc32cPath::kVpclmul512:
      return f.vpclmul512;
  }
  return false;
#else
  return path == Crc32cPath::kPortable;
#endif
}

// The automatic choice, fastest first. pclmul is left out: four 128-bit PCLMULQDQ
// folds ran at half the speed of three crc32 streams on Zen 4 (16.7 against 32.8 GB/s;
// PCLMULQDQ issues every other cycle there), and no CPU without VPCLMULQDQ was at hand
// to show it faster; GRADCOMP_CRC32C=pclmul still selects it.
constexpr Crc32cPath kAutomaticOrder[] = {Crc32cPath::kVpclmul512, Crc32cPath::kVpclmul256,
                                          Crc32cPath::kSse42, Crc32cPath::kPortable};

// The best available path in kAutomaticOrder; GRADCOMP_CRC32C=<path> selects that path
// if the CPU has it, else the best automatic one below it.
Crc32cPath choose_path() {
  Crc32cPath cap = Crc32cPath::kVpclmul512;
  if (const char* env = std::getenv("GRADCOMP_CRC32C"); env != nullptr && *env != '\0') {
    bool known = false;
    for (Crc32cPath p : kAllCrc32cPaths) {
      if (std::string_view(env) == crc32c_path_name(p)) {
        cap = p;
        known = true;
      }
    }
    if (!known) {
      throw InvalidArgument(std::string("GRADCOMP_CRC32C=") + env +
                            ": not one of portable, sse4.2, pclmul, vpclmul256, vpclmul512");
    }
    if (available(cap)) return cap;
  }
  for (Crc32cPath p : kAutomaticOrder) {
    if (static_cast<int>(p) <= static_cast<int>(cap) && available(p)) return p;
  }
  return Crc32cPath::kPortable;
}

struct Dispatch {
  Crc32cPath path;
  UpdateFn update;
};

const Dispatch& dispatch() {
  static const Dispatch d = [] {
    const Crc32cPath p = choose_path();
    return Dispatch{p, update_of(p)};
  }();
  return d;
}

const unsigned char* bytes_of(std::span<const std::byte> data) {
  return reinterpret_cast<const unsigned char*>(data.data());
}

// ---- combining ---------------------------------------------------------------------

// a * b mod P on reflected 32-bit registers (bit i = x^(31-i)).
std::uint32_t multiply_mod(std::uint32_t a, std::uint32_t b) {
  std::uint32_t product = 0;
  for (std::uint32_t m = 1u << 31; m != 0; m >>= 1) {
    if ((a & m) != 0) product ^= b;
    b = (b & 1) != 0 ? (b >> 1) ^ kPoly : b >> 1;  // b * x
  }
  return product;
}

// x^(2^k) mod P, reflected, k = 0..63.
const std::array<std::uint32_t, 64>& x_pow_2k() {
  static const std::array<std::uint32_t, 64> table = [] {
    std::array<std::uint32_t, 64> t{};
    t[0] = 1u << 30;  // x^1
    for (std::size_t k = 1; k < t.size(); ++k) t[k] = multiply_mod(t[k - 1], t[k - 1]);
    return t;
  }();
  return table;
}

}  // namespace

std::uint32_t crc32c_portable(std::span<const std::byte> data, std::uint32_t crc) {
  return ~update_portable(~crc, bytes_of(data), data.size());
}

std::uint32_t crc32c(std::span<const std::byte> data, std::uint32_t crc) {
  return ~dispatch().update(~crc, bytes_of(data), data.size());
}

std::uint32_t crc32c_combine(std::uint32_t crc_a, std::uint32_t crc_b, std::uint64_t len_b) {
  // The register after a, fed len_b zero bytes (a multiplication by x^(8 len_b)), XOR
  // b's: the pre- and post-inversions cancel (crc32c.h's convention).
  const auto& x2k = x_pow_2k();
  std::uint32_t shifted = crc_a;
  const std::uint64_t bits = len_b << 3;  // messages are < 2^61 bytes
  for (std::size_t k = 0; k < 64; ++k) {
    if (((bits >> k) & 1) != 0) shifted = multiply_mod(shifted, x2k[k]);
  }
  return shifted ^ crc_b;
}

namespace {

// Copy and checksum in chunks small enough to stay in L1/L2 between the two.
std::uint32_t copy_then_update(UpdateFn update, std::uint32_t reg, unsigned char* dst,
                               const unsigned char* src, std::size_t n) {
  constexpr std::size_t kChunk = 16384;
  for (std::size_t i = 0; i < n; i += kChunk) {
    const std::size_t m = n - i < kChunk ? n - i : kChunk;
    std::memcpy(dst + i, src + i, m);
    reg = update(reg, dst + i, m);
  }
  return reg;
}

std::uint32_t copy_on_path(Crc32cPath path, std::uint32_t reg, unsigned char* dst,
                           const unsigned char* src, std::size_t n) {
  switch (path) {
#ifdef GRADCOMP_CRC32C_X86
    case Crc32cPath::kVpclmul512:
      return fold_vpclmul512<true>(reg, src, n, dst);
    case Crc32cPath::kVpclmul256:
      return fold_vpclmul256<true>(reg, src, n, dst);
#endif
    default:
      return copy_then_update(update_of(path), reg, dst, src, n);
  }
}

}  // namespace

std::uint32_t crc32c_copy(std::byte* dst, std::span<const std::byte> src, std::uint32_t crc) {
  return ~copy_on_path(dispatch().path, ~crc, reinterpret_cast<unsigned char*>(dst), bytes_of(src),
                       src.size());
}

std::uint32_t crc32c_copy_on_path(Crc32cPath path, std::byte* dst, std::span<const std::byte> src,
                                  std::uint32_t crc) {
  if (!available(path)) {
    throw InvalidArgument(std::string("crc32c_copy_on_path: this CPU cannot run the ") +
                          crc32c_path_name(path) + " path");
  }
  return ~copy_on_path(path, ~crc, reinterpret_cast<unsigned char*>(dst), bytes_of(src),
                       src.size());
}

bool crc32c_uses_hardware() { return dispatch().path != Crc32cPath::kPortable; }

const char* crc32c_path_name(Crc32cPath path) {
  switch (path) {
    case Crc32cPath::kPortable:
      return "portable";
    case Crc32cPath::kSse42:
      return "sse4.2";
    case Crc32cPath::kPclmul:
      return "pclmul";
    case Crc32cPath::kVpclmul256:
      return "vpclmul256";
    case Crc32cPath::kVpclmul512:
      return "vpclmul512";
  }
  return "?";
}

bool crc32c_path_available(Crc32cPath path) { return available(path); }

Crc32cPath crc32c_active_path() { return dispatch().path; }

std::uint32_t crc32c_on_path(Crc32cPath path, std::span<const std::byte> data, std::uint32_t crc) {
  if (!available(path)) {
    throw InvalidArgument(std::string("crc32c_on_path: this CPU cannot run the ") +
                          crc32c_path_name(path) + " path");
  }
  return ~update_of(path)(~crc, bytes_of(data), data.size());
}

const char* crc32c_implementation() {
  switch (dispatch().path) {
    case Crc32cPath::kPortable:
      return "portable (slicing-by-8 tables)";
    case Crc32cPath::kSse42:
      return "sse4.2 (crc32 instruction, 3 streams)";
    case Crc32cPath::kPclmul:
      return "pclmul (PCLMULQDQ folding, 128-bit)";
    case Crc32cPath::kVpclmul256:
      return "vpclmul256 (VPCLMULQDQ folding, 256-bit)";
    case Crc32cPath::kVpclmul512:
      return "vpclmul512 (VPCLMULQDQ folding, 512-bit)";
  }
  return "?";
}

}  // namespace gradcomp
