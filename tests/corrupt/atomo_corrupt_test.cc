// Payload attacks on atomo: hand-built payloads under a valid header, so only the codec's
// own validation stands between them and the destination. Each must throw CorruptMessage
// ("atomo decode: ...") and leave the destination untouched; the valid baselines they
// are derived from must decode.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "gradcomp/error.h"
#include "gradcomp/registry.h"
#include "gradcomp/wire.h"
#include "support/test_support.h"

namespace gradcomp {
namespace {

constexpr std::size_t kN = 24;  // 4 x 6

std::vector<std::byte> message(const Codec& c, std::size_t n,
                               const std::vector<std::byte>& payload) {
  std::vector<std::byte> msg(kHeaderBytes + payload.size());
  if (!payload.empty()) std::memcpy(msg.data() + kHeaderBytes, payload.data(), payload.size());
  write_header(msg, c.wire_id(), c.config_tag(), n, payload.size());  // checksums the payload
  return msg;
}

// rows, cols, count, then `atoms` atoms of (scale, u, v) with every float = `fill`.
std::vector<std::byte> spectral(std::uint32_t rows, std::uint32_t cols, std::uint32_t count,
                                std::size_t atoms, float fill = 0.5f) {
  const std::size_t floats = atoms * (1 + std::size_t{rows} + cols);
  std::vector<std::byte> p(12 + 4 * floats);
  store_le<std::uint32_t>(p.data(), rows);
  store_le<std::uint32_t>(p.data() + 4, cols);
  store_le<std::uint32_t>(p.data() + 8, count);
  for (std::size_t i = 0; i < floats; ++i) store_le<float>(p.data() + 12 + 4 * i, fill);
  return p;
}

void set_float(std::vector<std::byte>& p, std::size_t float_index, float v) {
  store_le<float>(p.data() + 12 + 4 * float_index, v);
}

void expect_rejected(const Codec& c, const std::vector<std::byte>& payload, const std::string& what,
                     const std::string& contains = "", std::size_t n = kN) {
  SCOPED_TRACE(c.spec() + ": " + what);
  auto out = test::random_gradient(n, 5);
  const auto before = out;
  try {
    c.decode_add(message(c, n, payload), out);
    ADD_FAILURE() << "accepted";
  } catch (const CorruptMessage& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.rfind("atomo decode: ", 0), 0u) << m;
    if (!contains.empty()) {
      EXPECT_NE(m.find(contains), std::string::npos) << m;
    }
  }
  EXPECT_TRUE(test::same_bits(out, before)) << "destination modified";
}

TEST(AtomoCorrupt, SpectralBaselinesDecode) {
  auto c = builtin_registry().make_codec("atomo");
  for (auto p :
       {spectral(4, 6, 2, 2), spectral(1, 24, 1, 1), spectral(24, 1, 0, 0), spectral(6, 4, 4, 4)}) {
    std::vector<float> out(kN, 0.0f);
    EXPECT_NO_THROW(c->decode_add(message(*c, kN, p), out));
  }
  // 2 atoms of 0.5 * 0.5 * 0.5 each: every element 0.25.
  std::vector<float> out(kN, 0.0f);
  c->decode_add(message(*c, kN, spectral(4, 6, 2, 2)), out);
  for (float x : out) EXPECT_EQ(x, 0.25f);
}

TEST(AtomoCorrupt, SpectralShapeAndCount) {
  auto c = builtin_registry().make_codec("atomo");
  expect_rejected(*c, spectral(5, 6, 1, 1), "rows * cols > n", "rows 5 x cols 6 = 30 != n 24");
  expect_rejected(*c, spectral(3, 6, 1, 1), "rows * cols < n", "!= n 24");
  expect_rejected(*c, spectral(0, 24, 0, 0), "zero rows", "!= n 24");
  expect_rejected(*c, spectral(24, 0, 0, 0), "zero cols", "!= n 24");
  // rows * cols overflowing 32 bits (2^16 * 2^16 = 2^32, 0 mod 2^32) and 64-bit wrap.
  expect_rejected(*c, spectral(65536, 65536, 0, 0), "2^32 product", "!= n 24");
  expect_rejected(*c, spectral(0xFFFFFFFFu, 0xFFFFFFFFu, 0, 0), "max product", "!= n 24");
  expect_rejected(*c, spectral(4, 6, 5, 5), "count > min(rows, cols)", "count 5 > min(rows 4");
  expect_rejected(*c, spectral(4, 6, 0xFFFFFFFFu, 0), "huge count", "count 4294967295");
  expect_rejected(*c, spectral(4, 6, 3, 2), "count above the atoms present", "");
  expect_rejected(*c, spectral(4, 6, 1, 2), "count below the atoms present", "");
  auto trailing = spectral(4, 6, 1, 1);
  trailing.push_back(std::byte{0});
  expect_rejected(*c, trailing, "one trailing byte", "");
  expect_rejected(*c, {std::byte{4}, std::byte{0}, std::byte{0}}, "no header fields", "< 12");
}

TEST(AtomoCorrupt, SpectralValues) {
  auto c = builtin_registry().make_codec("atomo");
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  // Atom 1 of (4 x 6) starts at float 11: scale, then u[0..3], then v[0..5].
  for (float bad : {nan, inf, -inf, 0.0f, -0.0f, -1.0f}) {
    auto p = spectral(4, 6, 2, 2);
    set_float(p, 11, bad);
    expect_rejected(*c, p, "scale " + std::to_string(bad), "scale of atom 1");
  }
  for (float bad : {nan, inf, -inf}) {
    auto p = spectral(4, 6, 2, 2);
    set_float(p, 11 + 1 + 2, bad);
    expect_rejected(*c, p, "u", "atom 1: non-finite u[2]");
    p = spectral(4, 6, 2, 2);
    set_float(p, 11 + 1 + 4 + 5, bad);
    expect_rejected(*c, p, "v", "atom 1: non-finite v[5]");
    p = spectral(4, 6, 2, 2);
    set_float(p, 1, bad);
    expect_rejected(*c, p, "u of atom 0", "atom 0: non-finite u[0]");
  }
}

TEST(AtomoCorrupt, EntrywiseIndicesAndValues) {
  auto c = builtin_registry().make_codec("atomo:atoms=entry");
  auto entry = [](std::vector<std::uint32_t> idx, std::vector<float> val) {
    std::vector<std::byte> p(4 + 8 * idx.size());
    store_le<std::uint32_t>(p.data(), static_cast<std::uint32_t>(idx.size()));
    for (std::size_t j = 0; j < idx.size(); ++j) {
      store_le<std::uint32_t>(p.data() + 4 + 4 * j, idx[j]);
      store_le<float>(p.data() + 4 + 4 * idx.size() + 4 * j, val[j]);
    }
    return p;
  };
  {
    std::vector<float> out(kN, 0.0f);
    EXPECT_NO_THROW(c->decode_add(message(*c, kN, entry({0, 5, 23}, {1, 2, 3})), out));
    EXPECT_EQ(out[23], 3.0f);
  }
  expect_rejected(*c, entry({0, 24}, {1, 2}), "index n", "index 24 >= n 24");
  expect_rejected(*c, entry({0, 0xFFFFFFFFu}, {1, 2}), "index 2^32-1", ">= n 24");
  expect_rejected(*c, entry({5, 5}, {1, 2}), "repeated index", "not above the previous 5");
  expect_rejected(*c, entry({6, 5}, {1, 2}), "decreasing index", "not above the previous 6");
  expect_rejected(*c, entry({1, 2}, {1, std::numeric_limits<float>::quiet_NaN()}), "NaN value",
                  "non-finite value at position 1");
  expect_rejected(*c, entry({1, 2}, {std::numeric_limits<float>::infinity(), 1}), "inf value",
                  "non-finite value at position 0");
  std::vector<std::uint32_t> all(kN + 1);
  for (std::uint32_t i = 0; i <= kN; ++i) all[i] = i;
  expect_rejected(*c, entry(all, std::vector<float>(kN + 1, 1.0f)), "count n + 1", "");
  auto bad_count = entry({1, 2}, {1, 2});
  store_le<std::uint32_t>(bad_count.data(), 3);
  expect_rejected(*c, bad_count, "count above the entries present", "count 3");
  store_le<std::uint32_t>(bad_count.data(), 0xFFFFFFFFu);
  expect_rejected(*c, bad_count, "huge count", "count 4294967295");
}

// A spectral message is not an entrywise one (different config tags), and each variant
// rejects the other's payload shape even under a forged header.
TEST(AtomoCorrupt, VariantsDoNotDecodeEachOther) {
  auto s = builtin_registry().make_codec("atomo");
  auto e = builtin_registry().make_codec("atomo:atoms=entry");
  const auto g = test::random_gradient(kN, 3);
  const auto ms = test::encode(*s, g, {.seed = 1, .rows = 4});
  const auto me = test::encode(*e, g, {.seed = 1});
  std::vector<float> out(kN, 0.0f);
  EXPECT_THROW(e->decode_add(ms, out), CorruptMessage);
  EXPECT_THROW(s->decode_add(me, out), CorruptMessage);
  expect_rejected(*e, test::payload_of(ms), "spectral payload as entrywise");
  expect_rejected(*s, test::payload_of(me), "entrywise payload as spectral");
}

}  // namespace
}  // namespace gradcomp
