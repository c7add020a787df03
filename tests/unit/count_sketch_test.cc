// Count sketch kernels against their scalar references (bit for bit), the sketch's
// algebra (linearity, exact with integer-valued inputs), the hash family (range, sign
// balance, spread over columns), heavy-hitter recovery on planted vectors, and the
// `sketch` codec's wire layout and decode.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <set>

#include "gradcomp/error.h"
#include "gradcomp/kernels/count_sketch.h"
#include "gradcomp/registry.h"
#include "gradcomp/rng.h"
#include "gradcomp/wire.h"
#include "support/test_support.h"

namespace gradcomp {
namespace {

using kernels::SketchHash;

const std::vector<std::size_t> kSizes = {0, 1, 2, 7, 31, 33, 1023, 1024, 1025, 5000, 70001};

std::vector<float> sketch_of(const SketchHash& h, std::span<const float> x, float scale = 1.0f) {
  std::vector<float> t(h.cells(), 0.0f);
  kernels::sketch_accumulate(h, x, scale, t);
  return t;
}

// ---- hash family ----------------------------------------------------------------------

TEST(CountSketchHash, ColumnsInRangeSignsBalancedAndSpread) {
  for (std::uint32_t cols : {1u, 2u, 3u, 100u, 4096u, 1000003u}) {
    const SketchHash h(0x1234, 5, cols);
    const std::uint32_t n = 200000;
    std::vector<std::uint32_t> counts(std::min<std::uint32_t>(cols, 4096), 0);
    for (std::uint32_t j = 0; j < h.rows(); ++j) {
      std::int64_t sign_sum = 0;
      std::fill(counts.begin(), counts.end(), 0u);
      for (std::uint32_t i = 0; i < n; ++i) {
        const std::uint32_t c = h.column(j, i);
        ASSERT_LT(c, cols);
        const float s = h.sign(j, i);
        ASSERT_TRUE(s == 1.0f || s == -1.0f);
        sign_sum += s > 0 ? 1 : -1;
        if (cols <= 4096) ++counts[c];
      }
      // Sum of n fair signs: standard deviation sqrt(n) ~ 447; 5 sigma.
      EXPECT_LT(std::llabs(sign_sum), 5 * 448) << "row " << j << " cols " << cols;
      if (cols <= 4096) {
        // Chi-square of the column counts against uniform: mean cols - 1, sd
        // sqrt(2 (cols - 1)); allow 6 sd (and a floor for tiny cols).
        const double expect = double(n) / cols;
        double chi2 = 0;
        for (std::uint32_t c : counts) chi2 += (c - expect) * (c - expect) / expect;
        EXPECT_LT(chi2, cols - 1 + 6 * std::sqrt(2.0 * cols) + 10) << "row " << j;
      }
    }
  }
}

TEST(CountSketchHash, RowsAndKeysDiffer) {
  const SketchHash a(1, 3, 1 << 20), b(2, 3, 1 << 20), a2(1, 3, 1 << 20);
  int same_rows = 0, same_keys = 0;
  for (std::uint32_t i = 0; i < 1000; ++i) {
    EXPECT_EQ(a.hash(0, i), a2.hash(0, i));
    same_rows += a.column(0, i) == a.column(1, i);
    same_keys += a.column(0, i) == b.column(0, i);
  }
  EXPECT_LT(same_rows, 5);
  EXPECT_LT(same_keys, 5);
}

// Pairwise collisions happen at rate ~1/c, with no structure for neighbouring indices.
TEST(CountSketchHash, NeighboursCollideAtRateOneOverC) {
  const std::uint32_t cols = 64;
  int collisions = 0, trials = 0;
  for (std::uint64_t key = 0; key < 200; ++key) {
    const SketchHash h(key, 1, cols);
    for (std::uint32_t i = 0; i < 100; ++i) {
      collisions += h.column(0, i) == h.column(0, i + 1);
      ++trials;
    }
  }
  const double rate = double(collisions) / trials;  // expect 1/64 = 0.0156, sd ~0.0009
  EXPECT_NEAR(rate, 1.0 / cols, 0.006);
}

TEST(CountSketchHash, RejectsBadShapes) {
  EXPECT_THROW(SketchHash(1, 0, 10), InvalidArgument);
  EXPECT_THROW(SketchHash(1, kernels::kMaxSketchRows + 1, 10), InvalidArgument);
  EXPECT_THROW(SketchHash(1, 3, 0), InvalidArgument);
  std::vector<float> x(10, 1.0f), t(7, 0.0f);
  EXPECT_THROW(kernels::sketch_accumulate(SketchHash(1, 2, 3), x, 1.0f, t), InvalidArgument);
}

// ---- fast kernels against the references ----------------------------------------------

TEST(CountSketchKernels, AccumulateMatchesReferenceBitForBit) {
  for (std::uint32_t rows : {1u, 2u, 3u, 5u, 8u, 15u}) {
    for (std::uint32_t cols : {1u, 3u, 257u, 40000u}) {
      for (std::size_t n : kSizes) {
        SCOPED_TRACE("rows=" + std::to_string(rows) + " cols=" + std::to_string(cols) +
                     " n=" + std::to_string(n));
        const SketchHash h(rows * 7919 + cols, rows, cols);
        const auto x = test::random_gradient(n, n + rows);
        for (float scale : {1.0f, 0.37f}) {
          std::vector<float> fast(h.cells(), 0.5f), ref(h.cells(), 0.5f);
          kernels::sketch_accumulate(h, x, scale, fast);
          kernels::sketch_accumulate_ref(h, x, scale, ref);
          ASSERT_TRUE(test::same_bits(fast, ref));
        }
      }
    }
  }
}

TEST(CountSketchKernels, EstimateAllMatchesReferenceBitForBit) {
  for (std::uint32_t rows = 1; rows <= kernels::kMaxSketchRows; ++rows) {
    for (std::uint32_t cols : {1u, 5u, 300u}) {
      for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{1023}, std::size_t{1025},
                            std::size_t{4099}}) {
        SCOPED_TRACE("rows=" + std::to_string(rows) + " cols=" + std::to_string(cols) +
                     " n=" + std::to_string(n));
        const SketchHash h(rows + 100 * cols, rows, cols);
        const auto table = sketch_of(h, test::random_gradient(n, 3));
        std::vector<float> fast(n), ref(n);
        kernels::sketch_estimate_all(h, table, fast);
        kernels::sketch_estimate_all_ref(h, table, ref);
        ASSERT_TRUE(test::same_bits(fast, ref));
        // The reference itself: the median of the r signed cells, computed by hand.
        for (std::size_t i = 0; i < std::min<std::size_t>(n, 50); ++i) {
          std::vector<float> v;
          for (std::uint32_t j = 0; j < rows; ++j) {
            v.push_back(h.sign(j, std::uint32_t(i)) *
                        table[std::size_t{j} * cols + h.column(j, std::uint32_t(i))]);
          }
          std::sort(v.begin(), v.end());
          const float med = rows % 2 ? v[rows / 2] : (v[rows / 2 - 1] + v[rows / 2]) / 2;
          ASSERT_FLOAT_EQ(ref[i], med) << i;
        }
      }
    }
  }
}

// Zero cells (integer inputs cancel to exact zeros) must not leak -0 differences.
TEST(CountSketchKernels, EstimatesOfCancellingCellsAgree) {
  const SketchHash h(9, 4, 3);
  const auto x = test::integer_gradient(2000, 4, 1);
  const auto table = sketch_of(h, x);
  std::vector<float> fast(x.size()), ref(x.size());
  kernels::sketch_estimate_all(h, table, fast);
  kernels::sketch_estimate_all_ref(h, table, ref);
  EXPECT_TRUE(test::same_bits(fast, ref));
}

TEST(CountSketchKernels, SparseAccumulateEqualsDenseOfTheSparseVector) {
  const SketchHash h(77, 5, 101);
  const std::size_t n = 3000;
  std::vector<std::uint32_t> idx;
  std::vector<float> vals, dense(n, 0.0f);
  const auto g = test::random_gradient(n, 8);
  for (std::uint32_t i = 3; i < n; i += 17) {
    idx.push_back(i);
    vals.push_back(g[i]);
    dense[i] = g[i];
  }
  std::vector<float> sparse(h.cells(), 0.0f);
  kernels::sketch_accumulate_sparse(h, idx, vals, 0.25f, sparse);
  EXPECT_TRUE(test::same_bits(sparse, sketch_of(h, dense, 0.25f)));
}

// ---- algebra ----------------------------------------------------------------------------

TEST(CountSketchAlgebra, LinearExactlyForIntegerInputs) {
  for (std::size_t n : kSizes) {
    const SketchHash h(n, 5, 97);
    const auto a = test::integer_gradient(n, 1, 1000);
    const auto b = test::integer_gradient(n, 2, 1000);
    std::vector<float> sum(n);
    for (std::size_t i = 0; i < n; ++i) sum[i] = a[i] + b[i];
    const auto sa = sketch_of(h, a), sb = sketch_of(h, b), ssum = sketch_of(h, sum);
    for (std::size_t c = 0; c < h.cells(); ++c) ASSERT_EQ(sa[c] + sb[c], ssum[c]) << n << " " << c;
    // S(3a) = 3 S(a) and accumulating twice adds.
    const auto s3 = sketch_of(h, a, 3.0f);
    auto twice = sa;
    kernels::sketch_accumulate(h, a, 1.0f, twice);
    for (std::size_t c = 0; c < h.cells(); ++c) {
      ASSERT_EQ(s3[c], 3.0f * sa[c]);
      ASSERT_EQ(twice[c], 2.0f * sa[c]);
    }
  }
}

TEST(CountSketchAlgebra, EstimatesAreExactWithoutCollisions) {
  const std::size_t n = 50;
  const SketchHash h(5, 3, 1 << 24);
  for (std::uint32_t j = 0; j < 3; ++j) {
    std::set<std::uint32_t> cols;
    for (std::uint32_t i = 0; i < n; ++i) cols.insert(h.column(j, i));
    ASSERT_EQ(cols.size(), n) << "collision in row " << j << " (pick another key)";
  }
  const auto x = test::random_gradient(n, 6);
  const auto t = sketch_of(h, x);
  std::vector<float> est(n);
  kernels::sketch_estimate_all(h, t, est);
  EXPECT_TRUE(test::same_bits(est, x));
}

// The sketch's purpose: a few large coordinates on top of dense noise are found.
TEST(CountSketchAlgebra, PlantedHeavyHittersAreRecovered) {
  const std::size_t n = 200000, k = 40;
  const std::uint32_t rows = 5, cols = 20000;  // 100000 cells: half of x
  for (std::uint64_t seed = 0; seed < 5; ++seed) {
    auto x = test::random_gradient(n, seed);  // noise, |x| ~ 1
    std::set<std::uint32_t> planted;
    const CounterRng rng(seed + 100);
    for (std::uint32_t t = 0; planted.size() < k; ++t) planted.insert(rng.below(t, n));
    int s = 0;
    for (std::uint32_t i : planted) {
      x[i] = (s % 2 ? -1.0f : 1.0f) * (60.0f + float(s));
      ++s;
    }
    const SketchHash h(seed, rows, cols);
    const auto table = sketch_of(h, x);
    std::vector<float> est(n);
    std::vector<std::uint32_t> top(k);
    ASSERT_EQ(kernels::sketch_top_k(h, table, est, k, top, "test"), k);
    EXPECT_EQ(std::set<std::uint32_t>(top.begin(), top.end()), planted) << "seed " << seed;
    // Their estimates are close: noise per cell ~ sqrt(n / cols) = 3.
    for (std::uint32_t i : planted) EXPECT_NEAR(est[i], x[i], 25.0f) << i;
    // Zeroing their cells removes them: every touched cell becomes 0.
    auto zeroed = table;
    kernels::sketch_zero_cells(h, top, zeroed);
    for (std::uint32_t i : planted) EXPECT_EQ(kernels::sketch_estimate(h, zeroed, i), 0.0f);
  }
}

TEST(CountSketchAlgebra, ColumnsFromBudget) {
  EXPECT_EQ(kernels::sketch_columns(1000, 5, 7, 0.5), 7u);
  EXPECT_EQ(kernels::sketch_columns(1000, 5, 0, 0.025), 5u);  // 25 cells / 5 rows
  EXPECT_EQ(kernels::sketch_columns(1001, 5, 0, 0.025), 6u);  // ceil(25.025 / 5)
  EXPECT_EQ(kernels::sketch_columns(0, 5, 0, 0.025), 1u);
  EXPECT_EQ(kernels::sketch_columns(25000000, 5, 0, 0.025), 125000u);
}

// ---- the codec -------------------------------------------------------------------------

TEST(SketchCodec, WireLayoutIsKeyThenTable) {
  auto c = builtin_registry().make_codec("sketch:rows=3,cols=16,heavy=1");
  EXPECT_EQ(c->wire_id(), 13);
  const std::size_t n = 100;
  const auto g = test::integer_gradient(n, 3, 5);
  const StepContext ctx{.seed = 8, .step = 9, .rank = 1, .bucket = 4};
  const auto msg = test::encode(*c, g, ctx);
  ASSERT_EQ(msg.size(), kHeaderBytes + 8 + 4 * 3 * 16);
  const std::uint64_t key = load_le<std::uint64_t>(msg.data() + kHeaderBytes);
  EXPECT_EQ(key, CounterRng::for_step(ctx, RngScope::kShared, 0x5C7Cu).key());
  const SketchHash h(key, 3, 16);
  const auto table = sketch_of(h, g);
  for (std::size_t i = 0; i < table.size(); ++i) {
    ASSERT_EQ(load_le<float>(msg.data() + kHeaderBytes + 8 + 4 * i), table[i]) << i;
  }
  // Shared key: another rank hashes alike; another step does not.
  auto other_rank = ctx;
  other_rank.rank = 3;
  auto other_step = ctx;
  other_step.step = 10;
  EXPECT_EQ(load_le<std::uint64_t>(test::encode(*c, g, other_rank).data() + kHeaderBytes), key);
  EXPECT_NE(load_le<std::uint64_t>(test::encode(*c, g, other_step).data() + kHeaderBytes), key);
  // heavy = 1: decode is every median estimate.
  std::vector<float> est(n);
  kernels::sketch_estimate_all_ref(h, table, est);
  EXPECT_TRUE(test::same_bits(test::decode(*c, msg, n), est));
}

TEST(SketchCodec, DecodesTheHeavyHitters) {
  auto c = builtin_registry().make_codec("sketch:rows=5,cols=4000,heavy=0.001");
  const std::size_t n = 40000;  // k = 40
  auto g = test::random_gradient(n, 1, 0.1f);
  std::vector<std::uint32_t> planted;
  for (std::uint32_t i = 17; planted.size() < 40; i += 997) {
    planted.push_back(i);
    g[i] = (i % 2 ? 20.0f : -20.0f);
  }
  const auto d = test::decode(*c, test::encode(*c, g, {.seed = 1}), n);
  std::vector<std::uint32_t> nonzero;
  for (std::uint32_t i = 0; i < n; ++i) {
    if (d[i] != 0.0f) nonzero.push_back(i);
  }
  EXPECT_EQ(nonzero, planted);
  for (std::uint32_t i : planted) EXPECT_NEAR(d[i], g[i], 2.0f);
}

TEST(SketchCodec, LinearOnlyWithOneRowAndEveryEstimate) {
  const auto& r = builtin_registry();
  EXPECT_FALSE(r.make_codec("sketch")->traits().linear);
  EXPECT_FALSE(r.make_codec("sketch:rows=3,heavy=1")->traits().linear);
  EXPECT_FALSE(r.make_codec("sketch:rows=1,heavy=0.5")->traits().linear);
  auto lin = r.make_codec("sketch:rows=1,cols=10,heavy=1");
  ASSERT_TRUE(lin->traits().linear);
  const LinearRegion reg = lin->linear_region(1000);
  EXPECT_EQ(reg.offset, kHeaderBytes + 8);
  EXPECT_EQ(reg.count, 10u);
  EXPECT_THROW(r.make_codec("sketch")->linear_region(10), InvalidArgument);
}

TEST(SketchCodec, NonFiniteInputIsRejectedAtEncode) {
  auto c = builtin_registry().make_codec("sketch");
  std::vector<float> g(100, 1.0f);
  g[42] = std::nanf("");
  std::vector<std::byte> msg(c->max_encoded_bytes(g.size()));
  EXPECT_THROW(c->encode(g, {}, msg), InvalidArgument);
  g[42] = 3e38f;
  g[43] = 3e38f;
  std::fill(g.begin() + 44, g.end(), 3e38f);
  EXPECT_THROW(c->encode(g, {}, msg), InvalidArgument);  // the table overflows
}

// Issue 18: the codec benchmark aborted with "table cell 0 overflows" after
// encode/sketch:rows=3,cols=64,heavy=0.1/2^20. Not a limit of the cell: 16384
// coordinates per fp32 cell encode and decode finitely (and so do 2^25 / 64). The abort
// was the next row, compress/ (error feedback), whose residual grows on the same
// gradient until the sums really overflow; the benchmark now reports that row.
TEST(SketchCodec, ManyCoordinatesPerCellFitTheFp32Cells) {
  auto c = builtin_registry().make_codec("sketch:rows=3,cols=64,heavy=0.1");
  const std::size_t n = std::size_t{1} << 20;
  const auto g = test::random_gradient(n, 5);
  std::vector<std::byte> msg(c->max_encoded_bytes(n));
  const std::size_t bytes = c->encode(g, {.seed = 1}, msg);
  EXPECT_EQ(bytes, kHeaderBytes + 8 + 4 * 3 * 64);
  std::vector<float> out(n, 0.0f);
  c->decode_add({msg.data(), bytes}, out);
  EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](float v) { return std::isfinite(v); }));
}

// The overflow check's boundary: a cell whose sum is the largest finite float is
// accepted, one whose sum rounds past it is refused, naming the cell.
TEST(SketchCodec, CellOverflowBoundary) {
  auto c = builtin_registry().make_codec("sketch:rows=1,cols=1,heavy=1");
  const StepContext ctx{.seed = 9, .step = 4};
  std::vector<float> g(2, 0.0f);
  std::vector<std::byte> msg(c->max_encoded_bytes(g.size()));
  c->encode(g, ctx, msg);  // all zero: learn this step's hash key, hence the two signs
  const SketchHash h(load_le<std::uint64_t>(msg.data() + kHeaderBytes), 1, 1);
  const float max = std::numeric_limits<float>::max();
  g = {h.sign(0, 0) * (max * 0.75f), h.sign(0, 1) * (max * 0.25f)};  // cell 0: +max
  c->encode(g, ctx, msg);
  EXPECT_EQ(load_le<float>(msg.data() + kHeaderBytes + 8), max);
  g[1] = h.sign(0, 1) * (max * 0.5f);  // cell 0: 1.25 max, +inf
  try {
    c->encode(g, ctx, msg);
    ADD_FAILURE() << "an overflowing cell was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("sketch encode: table cell 0 overflows"),
              std::string::npos)
        << e.what();
  }
}

TEST(SketchCorrupt, NonFiniteCellIsRejected) {
  auto c = builtin_registry().make_codec("sketch:rows=3,cols=8");
  const std::size_t n = 100;
  const auto msg = test::encode(*c, test::random_gradient(n, 2), {.seed = 3});
  for (float bad : {std::numeric_limits<float>::infinity(), std::nanf("")}) {
    for (std::size_t cell : {std::size_t{0}, std::size_t{23}}) {
      auto m = msg;
      store_le<float>(m.data() + kHeaderBytes + 8 + 4 * cell, bad);
      reseal_message(m);  // past the checksum, to the codec's own check
      auto out = test::random_gradient(n, 4);
      const auto before = out;
      try {
        c->decode_add(m, out);
        ADD_FAILURE() << "accepted a non-finite cell " << cell;
      } catch (const CorruptMessage& e) {
        EXPECT_NE(std::string(e.what()).find("sketch decode: table cell " + std::to_string(cell)),
                  std::string::npos)
            << e.what();
      }
      EXPECT_EQ(out, before);
    }
  }
}

}  // namespace
}  // namespace gradcomp
