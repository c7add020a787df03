// chunktopk against a brute-force reference (per chunk, a stable sort by |x| descending,
// so ties go to the lower index), its exact message size, its payload layout, the short
// last chunk's count, non-finite inputs and its parameter checks; values=2bit against a
// reference quantiser written from the codec's file comment.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "detail/bitstream.h"
#include "gradcomp/error.h"
#include "gradcomp/kernels/half.h"
#include "gradcomp/method.h"
#include "gradcomp/registry.h"
#include "gradcomp/rng.h"
#include "gradcomp/wire.h"
#include "support/test_support.h"

namespace gradcomp {
namespace {

struct Config {
  std::size_t chunk;
  std::size_t k;
};

std::string spec_of(Config c, const char* values = "fp32") {
  return "chunktopk:chunk=" + std::to_string(c.chunk) + ",k=" + std::to_string(c.k) +
         ",values=" + values;
}

// Entries a chunk of len elements sends (the documented rule, written out again).
std::size_t reference_count(Config c, std::size_t len) {
  if (len == c.chunk) return c.k;
  return static_cast<std::size_t>(std::ceil(static_cast<double>(c.k) * static_cast<double>(len) /
                                            static_cast<double>(c.chunk)));
}

// Per chunk, the selected local indices, ascending: stable sort by |x| descending.
std::vector<std::vector<std::uint32_t>> reference_selection(std::span<const float> x, Config c) {
  std::vector<std::vector<std::uint32_t>> out;
  for (std::size_t begin = 0; begin < x.size(); begin += c.chunk) {
    const std::size_t len = std::min(c.chunk, x.size() - begin);
    std::vector<std::uint32_t> order(len);
    std::iota(order.begin(), order.end(), 0u);
    std::stable_sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) {
      return std::fabs(x[begin + a]) > std::fabs(x[begin + b]);
    });
    order.resize(reference_count(c, len));
    std::sort(order.begin(), order.end());
    out.push_back(std::move(order));
  }
  return out;
}

// What decoding into zeros gives: x at the selected positions (-0 added to +0 is +0),
// zero elsewhere.
std::vector<float> reference_decode(std::span<const float> x, Config c) {
  std::vector<float> out(x.size(), 0.0f);
  const auto sel = reference_selection(x, c);
  for (std::size_t b = 0; b < sel.size(); ++b) {
    for (const std::uint32_t j : sel[b]) out[b * c.chunk + j] += x[b * c.chunk + j];
  }
  return out;
}

// The message's local indices, all chunks in a row.
std::vector<std::uint32_t> sent_indices(const std::vector<std::byte>& msg, std::size_t count,
                                        std::size_t chunk) {
  const auto payload = test::payload_of(msg);
  std::vector<std::uint32_t> codes(count);
  const unsigned w = std::max(2u, static_cast<unsigned>(std::bit_width(chunk - 1)));
  detail::unpack_codes(payload.data() + 8, count, w, codes.data());
  return codes;
}

// Gaussian-ish, heavy integer ties, all zero, a constant magnitude (all ties), signed
// zeros / subnormals / huge values, and large values on every 16th element, a superset of
// the positions the threshold sample reads (every 32nd), so that the sampled floor lets
// fewer than k through and the selection must fall back to the whole chunk.
std::vector<float> make_input(int kind, std::size_t n, std::uint64_t seed) {
  switch (kind) {
    case 0:
      return test::random_gradient(n, seed);
    case 1:
      return test::integer_gradient(n, seed, 2);
    case 2:
      return std::vector<float>(n, 0.0f);
    case 3: {
      std::vector<float> v(n, -1.5f);
      for (std::size_t i = 0; i < n; i += 3) v[i] = 1.5f;
      return v;
    }
    case 4: {
      const CounterRng rng(seed);
      const float pool[] = {0.0f, -0.0f, 1e-45f, -3e-42f, 1e-38f,
                            2.5f, -2.5f, 1e30f,  -3e38f,  std::numeric_limits<float>::max(),
                            7.0f};
      std::vector<float> v(n);
      for (std::size_t i = 0; i < n; ++i) v[i] = pool[rng.below(static_cast<std::uint32_t>(i), 11)];
      return v;
    }
    default: {
      auto v = test::random_gradient(n, seed, 0.01f);
      for (std::size_t i = 0; i < n; i += 16) v[i] = 1000.0f + static_cast<float>(i % 4096);
      return v;
    }
  }
}
constexpr int kKinds = 6;

const Config kConfigs[] = {{2, 1},     {2, 2},        {3, 2},        {7, 3},     {16, 3},
                           {64, 64},   {1000, 10},    {4096, 1},     {4096, 64}, {4096, 200},
                           {5000, 64}, {65536, 1024}, {65536, 65536}};

std::vector<std::size_t> sizes_for(Config c) {
  std::vector<std::size_t> sizes = {0, 1, 2, 3, 17, 1001, 4097};
  for (std::size_t n : {c.chunk - 1, c.chunk, c.chunk + 1, 2 * c.chunk + 3, 3 * c.chunk}) {
    sizes.push_back(n);
  }
  return sizes;
}

TEST(ChunkTopk, DecodeEqualsThePerChunkReference) {
  for (const Config c : kConfigs) {
    const auto codec = builtin_registry().make_codec(spec_of(c));
    for (const std::size_t n : sizes_for(c)) {
      if (n > 200000) continue;  // the 65536-element chunks: 3 chunks are enough
      for (int kind = 0; kind < kKinds; ++kind) {
        SCOPED_TRACE(codec->spec() + " n=" + std::to_string(n) + " kind=" + std::to_string(kind));
        const auto x = make_input(kind, n, 100 + n);
        const auto msg = test::encode(*codec, x, {.seed = 1});
        std::vector<std::uint32_t> want;
        for (const auto& s : reference_selection(x, c)) want.insert(want.end(), s.begin(), s.end());
        ASSERT_EQ(sent_indices(msg, want.size(), c.chunk), want);
        ASSERT_TRUE(test::same_bits(test::decode(*codec, msg, n), reference_decode(x, c)));
      }
    }
  }
}

// The index stream holds the reference's local indices, chunk by chunk, and the values
// follow in the same order.
TEST(ChunkTopk, PayloadLayoutIsHeaderIndicesValues) {
  const Config c{1000, 10};
  const std::size_t n = 2500;  // chunks of 1000, 1000, 500 (5 entries)
  const auto codec = builtin_registry().make_codec(spec_of(c));
  const auto x = test::random_gradient(n, 3);
  const auto payload = test::payload_of(test::encode(*codec, x, {}));
  const std::size_t count = 25;
  const unsigned w = 10;  // ceil(log2(1000))
  ASSERT_EQ(payload.size(), 8 + 4 * ((count * w + 31) / 32) + 4 * count);
  EXPECT_EQ(load_le<std::uint32_t>(payload.data()), 1000u);
  EXPECT_EQ(load_le<std::uint16_t>(payload.data() + 4), 10u);
  EXPECT_EQ(static_cast<unsigned>(payload[6]), w);
  EXPECT_EQ(static_cast<unsigned>(payload[7]), 0u);
  std::vector<std::uint32_t> codes(count);
  detail::unpack_codes(payload.data() + 8, count, w, codes.data());
  const std::byte* values = payload.data() + 8 + 4 * ((count * w + 31) / 32);
  std::size_t j = 0;
  const auto sel = reference_selection(x, c);
  ASSERT_EQ(sel.back().size(), 5u);
  for (std::size_t b = 0; b < sel.size(); ++b) {
    for (const std::uint32_t local : sel[b]) {
      EXPECT_EQ(codes[j], local) << j;
      EXPECT_EQ(load_le<float>(values + 4 * j), x[b * 1000 + local]) << j;
      ++j;
    }
  }
}

// ---- values=2bit ----------------------------------------------------------------------

// The selected values in message order (chunk by chunk, ascending local index).
std::vector<float> sent_values(std::span<const float> x, Config c) {
  std::vector<float> v;
  const auto sel = reference_selection(x, c);
  for (std::size_t b = 0; b < sel.size(); ++b) {
    for (const std::uint32_t j : sel[b]) v.push_back(x[b * c.chunk + j]);
  }
  return v;
}

struct Quantized {
  std::array<float, 4> centroid{};  // +0 for an empty bin
  std::vector<std::uint32_t> code;
};

// The file comment's rule, written out again: codes clamp(round_half_even((v - m) / s) + 2,
// 0, 3) with s = 6 sigma / 4 (1 if 0), each bin decoded to the mean of its values.
Quantized reference_quantize(const std::vector<float>& v) {
  Quantized out;
  const std::size_t k = v.size();
  if (k == 0) return out;
  double sum = 0.0;
  for (const float x : v) sum += x;
  const double mean = sum / static_cast<double>(k);
  double ss = 0.0;
  for (const float x : v) ss = std::fma(x - mean, x - mean, ss);
  double s = k > 1 ? 6.0 / 4.0 * std::sqrt(ss / static_cast<double>(k - 1)) : 0.0;
  if (s == 0.0 || !std::isfinite(s)) s = 1.0;
  std::array<double, 4> bin_sum{};
  std::array<std::size_t, 4> bin_count{};
  for (const float x : v) {
    const double r = std::nearbyint((x - mean) / s) + 2.0;  // ties to even
    const auto q = static_cast<std::uint32_t>(std::clamp(r, 0.0, 3.0));
    out.code.push_back(q);
    bin_sum[q] += x;
    ++bin_count[q];
  }
  for (std::size_t b = 0; b < 4; ++b) {
    if (bin_count[b] != 0)
      out.centroid[b] = static_cast<float>(bin_sum[b] / static_cast<double>(bin_count[b]));
  }
  return out;
}

// What decoding a 2bit message into zeros gives.
std::vector<float> reference_decode_2bit(std::span<const float> x, Config c) {
  std::vector<float> out(x.size(), 0.0f);
  const auto sel = reference_selection(x, c);
  const Quantized q = reference_quantize(sent_values(x, c));
  std::size_t j = 0;
  for (std::size_t b = 0; b < sel.size(); ++b) {
    for (const std::uint32_t local : sel[b]) out[b * c.chunk + local] += q.centroid[q.code[j++]];
  }
  return out;
}

TEST(ChunkTopk2bit, DecodeEqualsTheReferenceQuantiser) {
  for (const Config c : kConfigs) {
    const auto codec = builtin_registry().make_codec(spec_of(c, "2bit"));
    for (const std::size_t n : sizes_for(c)) {
      if (n > 200000) continue;
      for (int kind = 0; kind < kKinds; ++kind) {
        SCOPED_TRACE(codec->spec() + " n=" + std::to_string(n) + " kind=" + std::to_string(kind));
        const auto x = make_input(kind, n, 100 + n);
        const auto msg = test::encode(*codec, x, {.seed = 1});
        ASSERT_EQ(msg.size(), codec->max_encoded_bytes(n));
        std::vector<std::uint32_t> want;
        for (const auto& s : reference_selection(x, c)) want.insert(want.end(), s.begin(), s.end());
        ASSERT_EQ(sent_indices(msg, want.size(), c.chunk), want);
        ASSERT_TRUE(test::same_bits(test::decode(*codec, msg, n), reference_decode_2bit(x, c)));
        // Deterministic: the same input gives the same bytes, whatever the step context.
        ASSERT_EQ(test::encode(*codec, x, {.seed = 7, .step = 3, .rank = 2}), msg);
      }
    }
  }
}

// Header, indices, then the 4 centroids (fp32) and K 2-bit codes, LSB first.
TEST(ChunkTopk2bit, PayloadLayoutIsHeaderIndicesCentroidsCodes) {
  const Config c{1000, 10};
  const std::size_t n = 2500;  // K = 25
  const auto codec = builtin_registry().make_codec(spec_of(c, "2bit"));
  const auto x = test::random_gradient(n, 3);
  const auto payload = test::payload_of(test::encode(*codec, x, {}));
  const std::size_t count = 25;
  const std::size_t index_bytes = 4 * ((count * 10 + 31) / 32);
  ASSERT_EQ(payload.size(), 8 + index_bytes + 16 + 8);  // 50 code bits -> 2 words
  EXPECT_EQ(static_cast<unsigned>(payload[7]), 3u);
  const Quantized want = reference_quantize(sent_values(x, c));
  const std::byte* values = payload.data() + 8 + index_bytes;
  for (std::size_t b = 0; b < 4; ++b) {
    EXPECT_EQ(std::bit_cast<std::uint32_t>(load_le<float>(values + 4 * b)),
              std::bit_cast<std::uint32_t>(want.centroid[b]))
        << b;
  }
  std::vector<std::uint32_t> codes(count);
  detail::unpack_codes(values + 16, count, 2, codes.data());
  EXPECT_EQ(codes, want.code);
  EXPECT_TRUE(detail::padding_is_zero(values + 16, count, 2));
}

// Few values: one is sent exactly (s = 1, code 2); two decode to their mean (both within
// 0.75 sigma of it); equal values are sent exactly; an all-zero bucket sends +0 (and so
// leaves the destination alone).
TEST(ChunkTopk2bit, SmallAndDegenerateMessages) {
  const auto one = builtin_registry().make_codec("chunktopk:chunk=4,k=1,values=2bit");
  {
    const std::vector<float> x = {0.5f, -7.25f, 1.0f, 2.0f};
    const auto d = test::decode(*one, test::encode(*one, x, {}), x.size());
    EXPECT_EQ(d, (std::vector<float>{0, -7.25f, 0, 0}));
  }
  {
    const std::vector<float> x = {0.5f, -7.0f, 1.0f, 2.0f, /**/ 3.0f, 0, 0, 0};
    const auto d = test::decode(*one, test::encode(*one, x, {}), x.size());
    EXPECT_EQ(d, (std::vector<float>{0, -2.0f, 0, 0, -2.0f, 0, 0, 0}));
  }
  {
    const std::vector<float> x(9, -3.5f);
    const auto d = test::decode(*one, test::encode(*one, x, {}), x.size());
    EXPECT_EQ(d, (std::vector<float>{-3.5f, 0, 0, 0, -3.5f, 0, 0, 0, -3.5f}));
  }
  {
    const std::vector<float> x(100, 0.0f);
    auto out = test::random_gradient(100, 2);
    const auto before = out;
    one->decode_add(test::encode(*one, x, {}), out);
    EXPECT_TRUE(test::same_bits(out, before));
  }
}

// The bins, with values whose t = (v - m) / s keeps clear of the split points: mean 0,
// sum of squares 240, sigma sqrt(240 / 9) = 5.16, s = 7.75, so t = -1.55 (bin 0), -0.52
// (bin 1), -0.39 .. 0.39 (bin 2: -3, 0, 1, 2, 3), 0.52 .. 0.65 (bin 3: 4, 4, 5).
TEST(ChunkTopk2bit, BinsSplitAtTheDocumentedPoints) {
  const auto codec = builtin_registry().make_codec("chunktopk:chunk=10,k=10,values=2bit");
  const std::vector<float> x = {-12.0f, -4.0f, -3.0f, 0.0f, 1.0f, 2.0f, 3.0f, 4.0f, 4.0f, 5.0f};
  const auto d = test::decode(*codec, test::encode(*codec, x, {}), x.size());
  const auto b2 = static_cast<float>(3.0 / 5.0);
  const auto b3 = static_cast<float>(13.0 / 3.0);
  EXPECT_EQ(d, (std::vector<float>{-12.0f, -4.0f, b2, b2, b2, b2, b2, b3, b3, b3}));
}

// Error feedback keeps p minus the decoded message, bit for bit, and the residual of each
// sent entry is its distance to its bin's centroid.
TEST(ChunkTopk2bit, FeedbackKeepsTheQuantisationError) {
  const Config c{64, 5};
  const auto codec = builtin_registry().make_codec(spec_of(c, "2bit"));
  for (const std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{63}, std::size_t{64},
                              std::size_t{65}, std::size_t{1001}}) {
    SCOPED_TRACE("n=" + std::to_string(n));
    const auto x = test::random_gradient(n, 11);
    auto p = x;
    std::vector<std::byte> msg(codec->max_encoded_bytes(n));
    msg.resize(codec->encode_feedback(p, {}, msg));
    EXPECT_EQ(msg, test::encode(*codec, x, {}));
    auto want = x;
    codec->decode_add(msg, want, -1.0f);
    EXPECT_TRUE(test::same_bits(p, want));
    const auto d = reference_decode_2bit(x, c);
    for (std::size_t i = 0; i < n; ++i) {
      if (d[i] != 0.0f) {
        ASSERT_EQ(p[i], x[i] - d[i]) << i;
      }
    }
  }
}

// Message bytes = 24 + 8 + 4*ceil(K*w/32) + K * value bytes (2bit: 16 + 4*ceil(K/16)),
// worked out by hand.
TEST(ChunkTopk, WireBytesAreHeaderPlusExpectedPayload) {
  struct Case {
    const char* spec;
    std::size_t n;
    std::size_t bytes;
  };
  const Case cases[] = {
      // K = 16 * 64 = 1024, w = 12: 1536 index bytes, 4096 value bytes (46.5x smaller).
      {"chunktopk", 65536, 24 + 8 + 1536 + 4096},
      {"chunktopk:values=fp16", 65536, 24 + 8 + 1536 + 2048},
      {"chunktopk:values=bf16", 65536, 24 + 8 + 1536 + 2048},
      // 2bit: 16 centroid bytes and 1024 codes in 64 words (3.1x fewer bytes than fp32).
      {"chunktopk:values=2bit", 65536, 24 + 8 + 1536 + 16 + 256},
      {"chunktopk:values=2bit", 10000, 24 + 8 + 236 + 16 + 40},  // K = 157: 314 bits
      {"chunktopk:values=2bit", 1, 24 + 8 + 4 + 16 + 4},
      {"chunktopk:values=2bit", 0, 24 + 8 + 16},
      // 4096, 4096, 1808: K = 64 + 64 + ceil(64 * 1808 / 4096) = 157; 1884 bits -> 59 words.
      {"chunktopk", 10000, 24 + 8 + 236 + 628},
      // n < chunk: ceil(64 * 100 / 4096) = 2 entries, 24 bits -> 1 word.
      {"chunktopk", 100, 24 + 8 + 4 + 8},
      {"chunktopk", 1, 24 + 8 + 4 + 4},
      {"chunktopk", 0, 24 + 8},
      // chunk 2: 2-bit indices (the packer's narrowest); n = 7: 3 full chunks + 1 entry.
      {"chunktopk:chunk=2,k=1", 7, 24 + 8 + 4 + 16},
      // chunk 65536, k 65536 (sent as 0 in the u16 field): everything, 16-bit indices.
      {"chunktopk:chunk=65536,k=65536", 70000, 24 + 8 + 2 * 70000 + 4 * 70000},
  };
  for (const Case& tc : cases) {
    SCOPED_TRACE(std::string(tc.spec) + " n=" + std::to_string(tc.n));
    const auto codec = builtin_registry().make_codec(tc.spec);
    const auto x = test::random_gradient(tc.n, 9);
    EXPECT_EQ(codec->max_encoded_bytes(tc.n), tc.bytes);
    EXPECT_EQ(test::encode(*codec, x, {}).size(), tc.bytes);
  }
}

TEST(ChunkTopk, ShortLastChunkKeepsTheDensityRoundedUp) {
  const Config c{16, 3};
  for (std::size_t len = 1; len <= 16; ++len) {
    const std::size_t n = 32 + len;
    const auto codec = builtin_registry().make_codec(spec_of(c));
    const auto x = make_input(0, n, len);
    const auto d = test::decode(*codec, test::encode(*codec, x, {}), n);
    const auto sent = std::count_if(d.begin() + 32, d.end(), [](float v) { return v != 0.0f; });
    EXPECT_EQ(static_cast<std::size_t>(sent), (3 * len + 15) / 16) << len;
  }
}

TEST(ChunkTopk, TiesGoToTheLowerIndex) {
  const auto codec = builtin_registry().make_codec("chunktopk:chunk=8,k=3");
  const std::vector<float> x = {1, -3, 3, 2, -3, 3, 0, 3, /* chunk 2 */ 5, 5, 5, 5, 5, 5, 5, 5};
  const auto d = test::decode(*codec, test::encode(*codec, x, {}), x.size());
  const std::vector<float> want = {0, -3, 3, 0, -3, 0, 0, 0, 5, 5, 5, 0, 0, 0, 0, 0};
  EXPECT_EQ(d, want);
}

TEST(ChunkTopk, HalfValuesAreTheRoundedSelectedValues) {
  for (const char* values : {"fp16", "bf16"}) {
    const Config c{64, 5};
    const auto codec = builtin_registry().make_codec(spec_of(c, values));
    const auto f =
        std::string(values) == "fp16" ? kernels::HalfFormat::kFp16 : kernels::HalfFormat::kBf16;
    const auto x = test::random_gradient(1001, 4);
    auto want = reference_decode(x, c);
    for (float& v : want) v = kernels::half_to_float_ref(f, kernels::float_to_half_ref(f, v));
    EXPECT_TRUE(test::same_bits(test::decode(*codec, test::encode(*codec, x, {}), x.size()), want))
        << values;
  }
}

TEST(ChunkTopk, NonFiniteInputsAreRejectedWithTheFirstIndex) {
  for (const char* spec : {"chunktopk", "chunktopk:chunk=7,k=7", "chunktopk:chunk=2,k=1"}) {
    const auto codec = builtin_registry().make_codec(spec);
    auto x = test::random_gradient(10000, 5);
    x[9000] = std::numeric_limits<float>::infinity();
    x[5001] = -std::numeric_limits<float>::quiet_NaN();
    std::vector<std::byte> msg(codec->max_encoded_bytes(x.size()));
    try {
      codec->encode(x, {}, msg);
      ADD_FAILURE() << spec << ": accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_STREQ(e.what(), "chunktopk encode: non-finite value at index 5001") << spec;
    }
  }
}

TEST(ChunkTopk, BadParametersAreRejectedByTheRegistry) {
  for (const char* spec : {"chunktopk:chunk=1", "chunktopk:chunk=0", "chunktopk:chunk=65537",
                           "chunktopk:k=0", "chunktopk:chunk=16,k=17", "chunktopk:k=4097",
                           "chunktopk:values=fp8", "chunktopk:ratio=0.1"}) {
    EXPECT_THROW(builtin_registry().make_codec(spec), InvalidArgument) << spec;
  }
  try {
    builtin_registry().make_codec("chunktopk:chunk=16,k=17");
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "chunktopk: k=17 must be at most chunk=16");
  }
}

TEST(ChunkTopk, TraitsAndDefaults) {
  const auto codec = builtin_registry().make_codec("chunktopk");
  EXPECT_EQ(codec->spec(), "chunktopk:chunk=4096,k=64,values=fp32");
  EXPECT_EQ(codec->wire_id(), wire_id(WireId::kChunkTopk));
  EXPECT_FALSE(codec->traits().linear);
  EXPECT_FALSE(codec->traits().unbiased);
  EXPECT_TRUE(codec->traits().needs_memory);
  EXPECT_FALSE(codec->traits().stochastic);
  // A bare chunktopk runs under error feedback, like topk; ef() and efm() wrap it.
  for (const char* spec : {"chunktopk", "ef(chunktopk:chunk=4096,k=64)", "efm(chunktopk)"}) {
    EXPECT_NO_THROW(builtin_registry().make_memory(spec, 10000)) << spec;
  }
}

// As a --compressor: error feedback by the optimizer's rule, the allgather reducer (it is
// not linear), and refused by the allreduce reducer.
TEST(ChunkTopk, RunsAsAMethodUnderAllgather) {
  EXPECT_EQ(Method::parse("chunktopk", {.momentum = 0.9}).spec(), "efm(chunktopk)");
  EXPECT_EQ(Method::parse("chunktopk", {.momentum = 0.0}).spec(), "ef(chunktopk)");
  const Method m = Method::parse("chunktopk:chunk=4096,k=64", {.momentum = 0.9});
  EXPECT_EQ(m.reducer(), ReducerKind::kAllgather);
  EXPECT_FALSE(m.linear());
  EXPECT_TRUE(Method::parse("ef(chunktopk)", {.reducer = ReducerKind::kAllgather}).codec() !=
              nullptr);
  EXPECT_THROW((void)Method::parse("chunktopk", {.reducer = ReducerKind::kAllreduce}),
               InvalidArgument);
}

}  // namespace
}  // namespace gradcomp
