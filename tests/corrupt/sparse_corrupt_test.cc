// Payload attacks on the sparse (index, value) codecs, chunktopk and fp16: each hand-built
// message has a valid header, so only the codec's own payload validation stands between
// it and the destination. Every one must throw CorruptMessage naming the codec and leave
// the destination untouched.
#include <gtest/gtest.h>

#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "detail/bitstream.h"
#include "gradcomp/error.h"
#include "gradcomp/registry.h"
#include "gradcomp/wire.h"
#include "support/test_support.h"

namespace gradcomp {
namespace {

constexpr std::size_t kN = 1000;

std::vector<std::byte> message(const Codec& c, std::size_t n,
                               const std::vector<std::byte>& payload) {
  std::vector<std::byte> msg(kHeaderBytes + payload.size());
  if (!payload.empty()) std::memcpy(msg.data() + kHeaderBytes, payload.data(), payload.size());
  write_header(msg, c.wire_id(), c.config_tag(), n, payload.size());  // checksums the payload
  return msg;
}

// count, indices, then values as fp32 or fp16 bit patterns.
std::vector<std::byte> sparse_payload(std::uint32_t count, const std::vector<std::uint32_t>& idx,
                                      const std::vector<std::uint32_t>& value_bits, bool fp16) {
  std::vector<std::byte> p(4 + 4 * idx.size() + (fp16 ? 2 : 4) * value_bits.size());
  store_le<std::uint32_t>(p.data(), count);
  for (std::size_t j = 0; j < idx.size(); ++j)
    store_le<std::uint32_t>(p.data() + 4 + 4 * j, idx[j]);
  std::byte* v = p.data() + 4 + 4 * idx.size();
  for (std::size_t j = 0; j < value_bits.size(); ++j) {
    if (fp16) {
      store_le<std::uint16_t>(v + 2 * j, static_cast<std::uint16_t>(value_bits[j]));
    } else {
      store_le<std::uint32_t>(v + 4 * j, value_bits[j]);
    }
  }
  return p;
}

void expect_rejected(const Codec& c, const std::vector<std::byte>& msg, const std::string& what,
                     const std::string& contains = "") {
  SCOPED_TRACE(c.spec() + ": " + what);
  auto out = test::random_gradient(kN, 5);
  const auto before = out;
  try {
    c.decode_add(msg, out);
    ADD_FAILURE() << "accepted";
  } catch (const CorruptMessage& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.rfind(c.name() + " decode: ", 0), 0u) << m;
    if (!contains.empty()) {
      EXPECT_NE(m.find(contains), std::string::npos) << m;
    }
  }
  EXPECT_EQ(0, std::memcmp(out.data(), before.data(), 4 * kN)) << "destination modified";
}

struct SparseCase {
  const char* spec;
  std::uint32_t count;  // a valid count for n = kN
  bool fp16;
};

class SparseCorrupt : public ::testing::TestWithParam<SparseCase> {};

TEST_P(SparseCorrupt, PayloadAttacksAreRejected) {
  const SparseCase& sc = GetParam();
  auto c = builtin_registry().make_codec(sc.spec);
  const std::uint32_t k = sc.count;
  std::vector<std::uint32_t> idx(k), val(k);
  const std::uint32_t one = sc.fp16 ? 0x3C00u : 0x3F800000u;
  for (std::uint32_t j = 0; j < k; ++j) {
    idx[j] = 7 + 97 * j;
    val[j] = one;
  }
  // The unmodified payload is valid: each attack below is the only defect.
  {
    auto out = std::vector<float>(kN, 0.0f);
    c->decode_add(message(*c, kN, sparse_payload(k, idx, val, sc.fp16)), out);
    EXPECT_EQ(out[7], 1.0f);
  }
  const auto with = [&](auto edit) {
    auto i2 = idx;
    auto v2 = val;
    std::uint32_t count = k;
    edit(i2, v2, count);
    return message(*c, kN, sparse_payload(count, i2, v2, sc.fp16));
  };
  expect_rejected(*c, with([](auto& i, auto&, auto&) { i.back() = kN; }), "index == n",
                  "index 1000 >= n 1000");
  expect_rejected(*c, with([](auto& i, auto&, auto&) { i.back() = kN + 1; }), "index > n",
                  "index 1001 >= n 1000");
  expect_rejected(*c, with([](auto& i, auto&, auto&) { i.back() = 0xFFFFFFFFu; }), "index 2^32-1",
                  ">= n 1000");
  expect_rejected(*c, with([](auto& i, auto&, auto&) { i[1] = i[0]; }), "duplicate index");
  expect_rejected(*c, with([](auto& i, auto&, auto&) { std::swap(i[1], i[2]); }),
                  "decreasing indices");
  expect_rejected(*c, with([](auto&, auto&, auto& n) { n = n + 1; }), "count larger than payload");
  expect_rejected(*c, with([](auto&, auto&, auto& n) { n = n - 1; }), "count smaller than payload");
  expect_rejected(*c, with([](auto&, auto&, auto& n) { n = 0xFFFFFFFFu; }),
                  "count 2^32-1 (count*8 overflows u32)");
  expect_rejected(*c, with([](auto&, auto&, auto& n) { n = 0x20000000u; }), "count*8 == 2^32");
  if (sc.fp16) {
    for (std::uint32_t bad : {0x7C00u, 0xFC00u, 0x7E00u, 0x7C01u, 0xFFFFu}) {
      expect_rejected(*c, with([&](auto&, auto& v, auto&) { v[k / 2] = bad; }),
                      "non-finite fp16 value", "non-finite");
    }
  } else {
    for (std::uint32_t bad : {0x7FC00000u, 0x7F800000u, 0xFF800000u, 0x7F800001u}) {
      expect_rejected(*c, with([&](auto&, auto& v, auto&) { v[k / 2] = bad; }), "non-finite value",
                      "non-finite");
    }
  }
  // More entries than n: every index would have to repeat.
  {
    std::vector<std::uint32_t> many(kN + 1), vals(kN + 1, one);
    for (std::uint32_t j = 0; j <= kN; ++j) many[j] = j;
    expect_rejected(*c, message(*c, kN, sparse_payload(kN + 1, many, vals, sc.fp16)), "count > n");
  }
  // Shorter than the count field.
  for (std::size_t len : {0, 1, 3}) {
    expect_rejected(*c, message(*c, kN, std::vector<std::byte>(len)), "payload < 4 bytes");
  }
}

// Counts outside what this configuration can produce, with a consistent length.
TEST(SparseCorrupt, CountsTheEncoderNeverWritesAreRejected) {
  const auto build = [](const Codec& c, std::uint32_t count) {
    std::vector<std::uint32_t> idx(count), val(count, 0x3F800000u);
    for (std::uint32_t j = 0; j < count; ++j) idx[j] = j;
    return message(c, kN, sparse_payload(count, idx, val, false));
  };
  auto ex = builtin_registry().make_codec("topk:ratio=0.01,select=exact");  // k = 10
  expect_rejected(*ex, build(*ex, 9), "exact mode, k-1 entries", "count 9 outside [10, 10]");
  expect_rejected(*ex, build(*ex, 11), "exact mode, k+1 entries");
  expect_rejected(*ex, build(*ex, 0), "exact mode, empty");
  auto sa = builtin_registry().make_codec("topk:ratio=0.01,select=sampled");  // max 13
  expect_rejected(*sa, build(*sa, 14), "sampled mode, > 1.3k entries", "count 14 outside [0, 13]");
  std::vector<float> out(kN, 0.0f);
  EXPECT_NO_THROW(sa->decode_add(build(*sa, 13), out));
}

INSTANTIATE_TEST_SUITE_P(
    Sparse, SparseCorrupt,
    ::testing::Values(SparseCase{"topk:ratio=0.01,select=exact", 10, false},
                      SparseCase{"topk:ratio=0.01,select=sampled", 9, false},
                      SparseCase{"topk:ratio=0.01,select=exact,values=fp16", 10, true},
                      SparseCase{"threshold", 10, false}, SparseCase{"mask", 6, false}),
    [](const auto& p) { return test::spec_test_name(p.param.spec); });

// chunktopk (chunk 60, k 5, n 1000: 16 full chunks of 5 entries and a last chunk of 40
// elements with ceil(5*40/60) = 4; K = 84 six-bit indices in 16 words, 8 padding bits).
// A chunk that is not a power of two, so that indices past a full chunk fit the 6 bits.
// Each attack edits one field of a valid message behind a correct checksum.
class ChunkTopkCorrupt : public ::testing::TestWithParam<const char*> {};

TEST_P(ChunkTopkCorrupt, PayloadAttacksAreRejected) {
  auto c = builtin_registry().make_codec(GetParam());
  const bool fp32 = c->spec().ends_with("fp32");
  const bool quantized = c->spec().ends_with("2bit");
  constexpr std::size_t kCount = 84;
  constexpr unsigned kBits = 6;
  constexpr std::size_t kStream = 8;
  constexpr std::size_t kValues = kStream + 4 * ((kCount * kBits + 31) / 32);
  const auto valid = test::payload_of(test::encode(*c, test::random_gradient(kN, 8), {}));
  // 2bit: 4 fp32 centroids, then 168 code bits in 6 words.
  ASSERT_EQ(valid.size(), kValues + (quantized ? 16 + 24 : (fp32 ? 4 : 2) * kCount));
  std::vector<std::uint32_t> codes(kCount);
  detail::unpack_codes(valid.data() + kStream, kCount, kBits, codes.data());
  const auto with_codes = [&](auto edit) {
    auto p = valid;
    auto c2 = codes;
    edit(c2);
    detail::pack_codes(c2.data(), kCount, kBits, p.data() + kStream);
    return message(*c, kN, p);
  };
  const auto with_bytes = [&](auto edit) {
    auto p = valid;
    edit(p);
    return message(*c, kN, p);
  };
  {
    auto out = std::vector<float>(kN, 0.0f);
    EXPECT_NO_THROW(c->decode_add(with_codes([](auto&) {}), out)) << "the unedited message";
  }
  // The payload header against the decoder's configuration.
  expect_rejected(*c, with_bytes([](auto& p) { p[0] = std::byte{64}; }), "chunk", "chunk 64");
  expect_rejected(*c, with_bytes([](auto& p) { p[4] = std::byte{6}; }), "k", "k 6");
  expect_rejected(*c, with_bytes([](auto& p) { p[6] = std::byte{7}; }), "index bits",
                  "index bits 7");
  expect_rejected(*c, with_bytes([](auto& p) { p[7] = std::byte{4}; }), "value format",
                  "value format 4");
  expect_rejected(*c, with_bytes([&](auto& p) { p[7] = fp32 ? std::byte{1} : std::byte{0}; }),
                  "other value format", "value format");
  // Lengths: each one off, short of the header, empty.
  for (const std::size_t len : {valid.size() - 1, valid.size() + 1, valid.size() + 4,
                                valid.size() - 4, std::size_t{7}, std::size_t{0}}) {
    auto p = valid;
    p.resize(len);
    expect_rejected(*c, message(*c, kN, p), "length " + std::to_string(len), "payload of");
  }
  // Indices: past a full chunk, past the short last chunk (still < 2^w), repeated,
  // decreasing. (A chunk's first index below the previous chunk's last is valid: the
  // unedited message above has them.)
  expect_rejected(*c, with_codes([](auto& v) { v[4] = 60; }), "index == chunk",
                  "index 60 at position 4 >= chunk length 60");
  expect_rejected(*c, with_codes([](auto& v) { v[9] = 63; }), "index 2^w - 1",
                  ">= chunk length 60");
  expect_rejected(*c, with_codes([](auto& v) { v[kCount - 1] = 40; }),
                  "index == last chunk's length", ">= chunk length 40");
  expect_rejected(*c, with_codes([](auto& v) { v[kCount - 1] = 63; }), "index past the last chunk",
                  ">= chunk length 40");
  expect_rejected(*c, with_codes([](auto& v) { v[11] = v[10]; }), "duplicate index", "not above");
  expect_rejected(*c, with_codes([](auto& v) { std::swap(v[11], v[12]); }), "decreasing indices",
                  "not above");
  // Padding bits after the last index.
  expect_rejected(*c, with_bytes([](auto& p) { p[kValues - 1] |= std::byte{0x80}; }), "padding bit",
                  "padding");
  if (quantized) return;  // its value attacks: ChunkTopk2bitCorrupt below
  // Non-finite values, first, middle and last entry.
  for (const std::size_t at : {std::size_t{0}, std::size_t{40}, kCount - 1}) {
    expect_rejected(*c, with_bytes([&](auto& p) {
      if (fp32) {
        store_le<std::uint32_t>(p.data() + kValues + 4 * at, 0x7FC00000u);
      } else {
        store_le<std::uint16_t>(p.data() + kValues + 2 * at, 0xFFFFu);
      }
    }),
                    "non-finite value at " + std::to_string(at),
                    "non-finite value at position " + std::to_string(at));
  }
}

INSTANTIATE_TEST_SUITE_P(ChunkTopk, ChunkTopkCorrupt,
                         ::testing::Values("chunktopk:chunk=60,k=5",
                                           "chunktopk:chunk=60,k=5,values=fp16",
                                           "chunktopk:chunk=60,k=5,values=bf16",
                                           "chunktopk:chunk=60,k=5,values=2bit"),
                         [](const auto& p) { return test::spec_test_name(p.param); });

// values=2bit's value section (the message above: 4 centroids at kValues, then 84 2-bit
// codes in 6 words, 24 padding bits): non-finite centroids, a nonzero centroid no code
// uses, nonzero padding after the codes.
TEST(ChunkTopk2bitCorrupt, ValueAttacksAreRejected) {
  auto c = builtin_registry().make_codec("chunktopk:chunk=60,k=5,values=2bit");
  constexpr std::size_t kCount = 84;
  constexpr std::size_t kValues = 8 + 4 * ((kCount * 6 + 31) / 32);
  constexpr std::size_t kCodes = kValues + 16;
  const auto valid = test::payload_of(test::encode(*c, test::random_gradient(kN, 8), {}));
  ASSERT_EQ(valid.size(), kCodes + 24);
  std::vector<std::uint32_t> codes(kCount);
  detail::unpack_codes(valid.data() + kCodes, kCount, 2, codes.data());
  const auto with_bytes = [&](auto edit) {
    auto p = valid;
    edit(p);
    return message(*c, kN, p);
  };
  // Every centroid of the valid message is used (top-k values fill bins 0, 1 and 3 at
  // least; see the check below) and finite.
  std::array<bool, 4> used{};
  for (const std::uint32_t q : codes) used[q] = true;
  for (std::size_t b = 0; b < 4; ++b) {
    const float centroid = load_le<float>(valid.data() + kValues + 4 * b);
    ASSERT_TRUE(std::isfinite(centroid));
    if (!used[b]) {
      ASSERT_EQ(std::bit_cast<std::uint32_t>(centroid), 0u) << b;
    }
  }
  ASSERT_TRUE(used[0] && used[1] && used[3]);
  for (std::size_t b = 0; b < 4; ++b) {
    for (const std::uint32_t bits : {0x7FC00000u, 0x7F800000u, 0xFF800000u, 0xFFFFFFFFu}) {
      expect_rejected(*c, with_bytes([&](auto& p) {
        store_le<std::uint32_t>(p.data() + kValues + 4 * b, bits);
      }),
                      "centroid " + std::to_string(b) + " = " + std::to_string(bits),
                      "non-finite centroid " + std::to_string(b));
    }
  }
  // All codes 2: centroids 0, 1 and 3 are then unused but nonzero.
  expect_rejected(*c, with_bytes([&](auto& p) {
    std::vector<std::uint32_t> twos(kCount, 2);
    detail::pack_codes(twos.data(), kCount, 2, p.data() + kCodes);
  }),
                  "unused centroid", "centroid 0 of no entry is not +0");
  // An unused centroid set to -0 is not +0 either.
  if (!used[2]) {
    expect_rejected(*c, with_bytes([&](auto& p) {
      store_le<std::uint32_t>(p.data() + kValues + 8, 0x80000000u);
    }),
                    "unused centroid -0", "centroid 2 of no entry");
  }
  expect_rejected(*c, with_bytes([](auto& p) { p[kCodes + 23] |= std::byte{0x80}; }),
                  "code padding bit", "nonzero value padding bits");
  expect_rejected(*c, with_bytes([](auto& p) { p[kCodes + 21] |= std::byte{0x01}; }),
                  "first code padding bit", "nonzero value padding bits");
}

TEST(HalfCorrupt, NonFinitePatternsAreRejected) {
  for (const char* spec : {"fp16", "fp16:format=bf16"}) {
    auto c = builtin_registry().make_codec(spec);
    const bool bf = c->spec() == "fp16:format=bf16";
    std::vector<std::byte> payload(2 * kN);
    for (std::size_t i = 0; i < kN; ++i)
      store_le<std::uint16_t>(payload.data() + 2 * i, bf ? 0x3F80 : 0x3C00);
    {
      std::vector<float> out(kN, 0.0f);
      c->decode_add(message(*c, kN, payload), out);
      EXPECT_EQ(out[0], 1.0f);
    }
    const std::vector<std::uint16_t> bad =
        bf ? std::vector<std::uint16_t>{0x7F80, 0xFF80, 0x7FC0, 0x7F81, 0xFFFF}
           : std::vector<std::uint16_t>{0x7C00, 0xFC00, 0x7E00, 0x7C01, 0xFFFF};
    for (std::uint16_t pattern : bad) {
      for (std::size_t at : {std::size_t{0}, std::size_t{17}, kN - 1}) {
        auto p = payload;
        store_le<std::uint16_t>(p.data() + 2 * at, pattern);
        expect_rejected(*c, message(*c, kN, p), "pattern at " + std::to_string(at),
                        "at index " + std::to_string(at));
      }
    }
    auto odd = payload;
    odd.pop_back();
    expect_rejected(*c, message(*c, kN, odd), "odd payload length");
  }
}

}  // namespace
}  // namespace gradcomp
