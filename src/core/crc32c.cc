// CRC-32C, portable and SSE4.2 (see gradcomp/crc32c.h).
//
// The hardware path follows Mark Adler's crc32c.c: the crc32 instruction has a latency
// of 3 cycles and a throughput of 1 per cycle, so one dependent chain runs at a third
// of the unit's speed. Long inputs are therefore cut into three equal blocks whose
// CRCs run as three independent chains in one loop, then combined: the CRC register
// is linear over GF(2), so the state after blocks A then B is shift(state_A, |B|) XOR
// state_B-from-zero, where shift() feeds |B| zero bytes. shift() for the two block
// sizes used is precomputed as four 256-entry tables (one per byte of the state).
#include "gradcomp/crc32c.h"

#include <array>
#include <cstddef>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
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

bool cpu_has_sse42() {
  static const bool has = __builtin_cpu_supports("sse4.2");
  return has;
}

#endif  // GRADCOMP_CRC32C_X86

const unsigned char* bytes_of(std::span<const std::byte> data) {
  return reinterpret_cast<const unsigned char*>(data.data());
}

}  // namespace

std::uint32_t crc32c_portable(std::span<const std::byte> data, std::uint32_t crc) {
  return ~update_portable(~crc, bytes_of(data), data.size());
}

std::uint32_t crc32c(std::span<const std::byte> data, std::uint32_t crc) {
#ifdef GRADCOMP_CRC32C_X86
  if (cpu_has_sse42()) return ~update_sse42(~crc, bytes_of(data), data.size());
#endif
  return crc32c_portable(data, crc);
}

bool crc32c_uses_hardware() {
#ifdef GRADCOMP_CRC32C_X86
  return cpu_has_sse42();
#else
  return false;
#endif
}

}  // namespace gradcomp
