// The device PowerSGD reducer (src/device/powersgd.cc) on CPU tensors against the host
// scheme (src/dist/powersgd.cc), step for step, both over the same real Gloo group (one
// thread per rank, tests/dist's harness), on the same gradients.
//
// Exactly equal: the buckets that go dense (bit for bit), the bytes each step puts on the
// wire, the state's names and order, the Q columns drawn from the shared seed (seen after
// a step that fails once Q is drawn: a non-finite gradient), the columns Gram-Schmidt
// drops (zero in both), the error messages.
// Equal to rounding: the low-rank buckets' results, residuals and Q, whose products are
// ATen matrix multiplications on the device and the fixed-order kernels of
// kernels/low_rank.h on the host. The tolerance: |device - host| <= kTolerance * scale,
// scale the largest |value| of the bucket's gradient, result and residual on this rank
// (Q: of the host's Q). kTolerance = 1e-5, about 80 float epsilons: the products' own
// rounding differs by a few epsilons times sqrt(cols) (cols <= 96 here), and Gram-Schmidt
// and six steps of warm-started power iteration carry it forward. The largest difference
// seen is printed, one "max relative difference" line per case. A wrong drop, a wrong
// column order, a missed residual or a Q from other draws differs at order 1.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <ostream>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "../dist/dist_test_support.h"
#include "device_test_support.h"
#include "gradcomp/device/reducer.h"
#include "gradcomp/dist/reducers.h"
#include "gradcomp/error.h"
#include "gradcomp/method.h"

namespace gradcomp::device {
namespace {

using dist::test::run_ranks;
using test::floats;
using test::same_bits;

constexpr std::uint64_t kSeed = 41;
constexpr double kTolerance = 1e-5;

// Every path: matrices that compress (odd sizes too), 1-row and 1-column matrices, one too
// small to pay at any rank, a fused bucket, the dense bucket, an empty one, a rank-1
// gradient (Gram-Schmidt drops P's columns past the first) and one that is all zero for
// its first steps (every column dropped, Q redrawn whole).
const std::vector<BucketShape> kShapes = {
    {20, 64 * 96, true, 64},    // compressed at rank 1, 2, 4
    {21, 37 * 53, true, 37},    // odd sizes
    {22, 1 * 500, true, 1},     // one row: never pays
    {23, 500 * 1, true, 500},   // one column: never pays
    {24, 3 * 4, true, 3},       // 12 <= 2 r (3 + 4): never pays
    {25, 300, true, 0},         // fused: no matrix view
    {26, 17, false, 0},         // the dense bucket
    {27, 0, true, 0},           // empty
    {28, 128 * 40, true, 128},  // rank 1 on every rank
    {29, 50 * 30, true, 50},    // zero at steps 0 and 1
};
constexpr std::size_t kRankOne = 8;
constexpr std::size_t kZeroFirst = 9;

std::vector<float> normal(std::size_t n, std::uint64_t key) {
  std::mt19937_64 gen(key);
  std::normal_distribution<float> dist;
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

std::vector<float> gradient_of(int rank, int step, std::size_t b) {
  const BucketShape& s = kShapes[b];
  if (b == kZeroFirst && step < 2) return std::vector<float>(s.numel, 0.0f);
  if (b == kRankOne) {
    // u v^T scaled per rank and step: every rank's, and so the sum, of rank 1.
    const std::size_t cols = s.numel / s.rows;
    const auto u = normal(s.rows, 901);
    const auto v = normal(cols, 902);
    const float a = 1.0f + static_cast<float>(rank) + 0.5f * static_cast<float>(step);
    std::vector<float> g(s.numel);
    for (std::size_t i = 0; i < s.rows; ++i) {
      for (std::size_t j = 0; j < cols; ++j) g[i * cols + j] = a * u[i] * v[j];
    }
    return g;
  }
  auto g = normal(s.numel, 1000003ull * static_cast<std::uint64_t>(rank) + 7919ull * step + b);
  for (float& x : g) x *= 1.0f + 0.25f * static_cast<float>(b);
  return g;
}

bool low_rank(const BucketShape& s, std::size_t r) {
  if (!s.compressible || s.rows == 0) return false;
  return s.rows * (s.numel / s.rows) > 2 * r * (s.rows + s.numel / s.rows);
}

StepContext context(int step) {
  StepContext c;
  c.seed = kSeed;
  c.step = static_cast<std::uint64_t>(step);
  return c;
}

double max_abs(std::span<const float> x) {
  double m = 0;
  for (float v : x) m = std::max(m, double{std::abs(v)});
  return m;
}

// The largest |got - want| / scale; a NaN anywhere counts as infinite.
double relative_difference(std::span<const float> got, std::span<const float> want, double scale) {
  double worst = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double d = std::abs(double{got[i]} - double{want[i]});
    if (!(d == d)) return INFINITY;
    worst = std::max(worst, d / std::max(scale, 1e-30));
  }
  return worst;
}

// The two reducers on one rank, fed the same gradients.
struct Pair {
  std::unique_ptr<gradcomp::Reducer> host;
  std::unique_ptr<Reducer> dev;
};

Pair make_pair(const std::string& spec, dist::Communicator& comm) {
  const Method method = Method::parse(spec);
  EXPECT_TRUE(Reducer::supports(method)) << spec;
  return {dist::make_reducer(method, comm, kShapes),
          make_device_reducer(method, comm, kShapes, at::Device(at::kCPU))};
}

// One step of both. Returns the host's and the device's buckets.
struct Step {
  std::vector<std::vector<float>> host;
  std::vector<at::Tensor> dev;
  std::vector<std::vector<float>> input;
};

// One step of both reducers. Every compressible bucket goes low-rank where `compressed`,
// but `held_back` (an index into kShapes, or kShapes.size() for none); the device's buckets
// are views of one tensor where `shared` (a DDP bucket's slots), else tensors of their own.
Step run_step(Pair& p, int rank, int t, bool compressed, std::size_t held_back = kShapes.size(),
              bool shared = false) {
  Step s;
  std::vector<BucketRef> refs;
  std::unique_ptr<bool[]> flags(new bool[kShapes.size()]);
  for (std::size_t b = 0; b < kShapes.size(); ++b) {
    s.input.push_back(gradient_of(rank, t, b));
    s.host.push_back(s.input.back());
  }
  if (shared) {
    std::vector<float> all;
    for (const std::vector<float>& g : s.input) all.insert(all.end(), g.begin(), g.end());
    const at::Tensor bucket = at::tensor(all);
    std::int64_t at = 0;
    for (const std::vector<float>& g : s.input) {
      s.dev.push_back(bucket.narrow(0, at, static_cast<std::int64_t>(g.size())));
      at += static_cast<std::int64_t>(g.size());
    }
  } else {
    for (const std::vector<float>& g : s.input) {
      s.dev.push_back(g.empty() ? at::empty({0}, at::kFloat) : at::tensor(g));
    }
  }
  for (std::size_t b = 0; b < kShapes.size(); ++b) {
    const bool c = compressed && kShapes[b].compressible && b != held_back;
    refs.push_back({kShapes[b].id, s.host[b], c});
    flags[b] = c;
  }
  p.host->reduce(refs, context(t));
  p.dev->reduce(s.dev, std::span<const bool>(flags.get(), kShapes.size()), context(t));
  return s;
}

std::map<std::string, std::vector<float>> host_state(gradcomp::Reducer& r) {
  std::map<std::string, std::vector<float>> out;
  for (const StateBuffer& b : r.state()) out[b.name].assign(b.data.begin(), b.data.end());
  return out;
}

struct Worst {
  double out = 0, residual = 0, q = 0;
};

// The states: the same names in the same order, Q's dropped (zero) columns zero in both,
// the values to tolerance.
void compare_states(Pair& p, std::size_t r, const Step& step, Worst& worst,
                    const std::string& where) {
  const std::vector<StateBuffer> host = p.host->state();
  const auto dev = p.dev->state();
  ASSERT_EQ(host.size(), dev.size()) << where;
  for (std::size_t i = 0; i < host.size(); ++i) {
    ASSERT_EQ(host[i].name, dev[i].first) << where;
    ASSERT_EQ(host[i].data.size(), static_cast<std::size_t>(dev[i].second.numel())) << where;
    const std::span<const float> d = floats(dev[i].second);
    const bool is_q = host[i].name.ends_with(".q");
    // Its bucket's scale: the gradient, result and residual on this rank (Q: its own).
    std::size_t b = 0;
    while (b < kShapes.size() &&
           host[i].name.rfind("bucket" + std::to_string(kShapes[b].id) + ".", 0) != 0) {
      ++b;
    }
    ASSERT_LT(b, kShapes.size()) << host[i].name;
    double scale = max_abs(host[i].data);
    if (!is_q) {
      scale = std::max({scale, max_abs(step.input[b]), max_abs(step.host[b])});
    } else {
      const std::size_t cols = kShapes[b].numel / kShapes[b].rows;
      for (std::size_t k = 0; k < r; ++k) {
        bool zero = true;
        for (std::size_t j = 0; j < cols; ++j) zero = zero && host[i].data[k * cols + j] == 0.0f;
        if (!zero) continue;
        for (std::size_t j = 0; j < cols; ++j) {
          ASSERT_EQ(d[k * cols + j], 0.0f) << where << " " << host[i].name << " column " << k
                                           << " dropped on the host, not on the device";
        }
      }
    }
    const double diff = relative_difference(d, host[i].data, scale);
    EXPECT_LE(diff, kTolerance) << where << " " << host[i].name;
    double& w = is_q ? worst.q : worst.residual;
    w = std::max(w, diff);
  }
}

void compare_steps(Pair& p, const Step& s, std::size_t r, bool low_rank_step, std::size_t held_back,
                   Worst& worst, const std::string& where) {
  for (std::size_t b = 0; b < kShapes.size(); ++b) {
    const at::Tensor got = s.dev[b];
    if (!(low_rank_step && low_rank(kShapes[b], r) && b != held_back)) {
      ASSERT_TRUE(s.host[b].empty() || same_bits(got, at::tensor(s.host[b])))
          << where << " dense bucket " << kShapes[b].id;
      continue;
    }
    const double scale = std::max(max_abs(s.host[b]), max_abs(s.input[b]));
    const double diff = relative_difference(floats(got), s.host[b], scale);
    EXPECT_LE(diff, kTolerance) << where << " bucket " << kShapes[b].id;
    worst.out = std::max(worst.out, diff);
  }
  const ReduceStats hs = p.host->take_stats();
  const ReduceStats ds = p.dev->take_stats();
  EXPECT_EQ(hs.bytes_sent, ds.bytes_sent) << where;
  EXPECT_EQ(hs.bytes_received, ds.bytes_received) << where;
  EXPECT_EQ(hs.steps, ds.steps) << where;
  EXPECT_EQ(hs.dense_fallbacks, ds.dense_fallbacks) << where;
}

struct Case {
  std::string spec;
  std::size_t rank;
  std::uint64_t warmup;
};

void check_case(const Case& c, int world, bool state_every_step) {
  SCOPED_TRACE(c.spec + " world " + std::to_string(world) +
               (state_every_step ? " state() every step" : ""));
  constexpr int kSteps = 6;
  auto compressed_at = [](int t) { return t != 3; };  // step 3: dense (--dense-steps)
  // Step 4: the first matrix held back (dense) while the others go low-rank.
  auto held_back_at = [](int t) { return t == 4 ? std::size_t{0} : kShapes.size(); };
  std::vector<Worst> worst(static_cast<std::size_t>(world));
  run_ranks(world, [&](dist::Communicator& comm) {
    Pair p = make_pair(c.spec, comm);
    Worst& w = worst[static_cast<std::size_t>(comm.rank())];
    for (int t = 0; t < kSteps; ++t) {
      const std::string where =
          "rank " + std::to_string(comm.rank()) + " step " + std::to_string(t);
      const Step s = run_step(p, comm.rank(), t, compressed_at(t), held_back_at(t), t % 2 == 1);
      const bool low_rank_step = compressed_at(t) && static_cast<std::uint64_t>(t) >= c.warmup;
      compare_steps(p, s, c.rank, low_rank_step, held_back_at(t), w, where);
      if (state_every_step || t == kSteps - 1) compare_states(p, c.rank, s, w, where);
      if (c.rank >= 2 && low_rank_step && state_every_step) {
        // The rank-1 bucket: P's second column was dropped on both (zero Q column).
        const std::vector<StateBuffer> hs = p.host->state();
        const std::string q = "bucket" + std::to_string(kShapes[kRankOne].id) + ".q";
        for (const StateBuffer& b : hs) {
          if (b.name != q) continue;
          const std::size_t cols = kShapes[kRankOne].numel / kShapes[kRankOne].rows;
          EXPECT_EQ(max_abs(b.data.subspan(cols, cols)), 0.0) << where << ": nothing dropped";
        }
      }
    }
  });
  Worst all;
  for (const Worst& w : worst) {
    all.out = std::max(all.out, w.out);
    all.residual = std::max(all.residual, w.residual);
    all.q = std::max(all.q, w.q);
  }
  std::printf("[ max relative difference ] %-52s world %d: result %.2e residual %.2e q %.2e\n",
              c.spec.c_str(), world, all.out, all.residual, all.q);
}

const std::vector<Case> kCases = {
    {"powersgd:rank=1", 1, 0},
    {"powersgd:rank=2", 2, 0},
    {"powersgd:rank=4", 4, 0},
    {"powersgd:rank=2,error_feedback=false", 2, 0},
    {"powersgd:rank=2,warm_start=false", 2, 0},
    {"powersgd:rank=4,error_feedback=false,warm_start=false", 4, 0},
    {"powersgd:rank=1,warmup_steps=2", 1, 2},
    {"powersgd:rank=2,warmup_steps=2,error_feedback=false", 2, 2},
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.spec; }

class DevicePowerSgd : public ::testing::TestWithParam<Case> {};

TEST_P(DevicePowerSgd, MatchesTheHostReducerStepForStep) {
  for (int world : {1, 2, 3}) check_case(GetParam(), world, /*state_every_step=*/false);
}

// state() hands Q out writable, so the next step reads its zero columns back from the
// device instead of trusting what the host last wrote: the other path to the same draws.
TEST_P(DevicePowerSgd, MatchesTheHostWithStateReadEveryStep) {
  check_case(GetParam(), 2, /*state_every_step=*/true);
}

INSTANTIATE_TEST_SUITE_P(Specs, DevicePowerSgd, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case>& param) {
                           std::string name = param.param.spec;
                           for (char& ch : name) {
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return name;
                         });

// A non-finite gradient fails the step after Q is drawn (P = M Q is checked once summed),
// with the host's message, so Q then holds exactly what was drawn: the first step's draw,
// and later a redraw of the columns dropped the step before, equal to the host's bit for
// bit. Run with and without a state() call in between (the two ways the device knows
// which columns are zero).
TEST(DevicePowerSgdDraws, QIsDrawnAsTheHostDrawsIt) {
  for (const bool warm_start : {true, false}) {
    for (const bool read_state : {false, true}) {
      SCOPED_TRACE(std::string("warm_start ") + (warm_start ? "on" : "off") +
                   (read_state ? ", state() between steps" : ""));
      // Without error feedback: the failed steps' non-finite M stays out of later steps.
      const std::string spec = std::string("powersgd:rank=2,error_feedback=false,warm_start=") +
                               (warm_start ? "true" : "false");
      run_ranks(2, [&](dist::Communicator& comm) {
        Pair p = make_pair(spec, comm);
        std::unique_ptr<bool[]> flags(new bool[kShapes.size()]);
        for (std::size_t b = 0; b < kShapes.size(); ++b) flags[b] = kShapes[b].compressible;
        auto failing_step = [&](int t) {
          std::vector<std::vector<float>> host;
          std::vector<at::Tensor> dev;
          std::vector<BucketRef> refs;
          for (std::size_t b = 0; b < kShapes.size(); ++b) {
            host.push_back(gradient_of(comm.rank(), t, b));
            if (b == 0) host.back()[7] = NAN;
            dev.push_back(host.back().empty() ? at::empty({0}, at::kFloat)
                                              : at::tensor(host.back()));
          }
          for (std::size_t b = 0; b < kShapes.size(); ++b) {
            refs.push_back({kShapes[b].id, host[b], flags[b]});
          }
          std::string host_error, dev_error;
          try {
            p.host->reduce(refs, context(t));
          } catch (const InvalidArgument& e) {
            host_error = e.what();
          }
          try {
            p.dev->reduce(dev, std::span<const bool>(flags.get(), kShapes.size()), context(t));
          } catch (const InvalidArgument& e) {
            dev_error = e.what();
          }
          EXPECT_NE(host_error.find("non-finite value in M Q"), std::string::npos) << host_error;
          EXPECT_EQ(dev_error, host_error);
        };
        // Step 0 fails: every Q is the first draw.
        failing_step(0);
        {
          const std::vector<StateBuffer> hs = p.host->state();
          const auto ds = p.dev->state();
          ASSERT_EQ(hs.size(), ds.size());
          for (std::size_t i = 0; i < hs.size(); ++i) {
            ASSERT_EQ(hs[i].name, ds[i].first);
            EXPECT_GT(max_abs(hs[i].data), 0.0) << hs[i].name;
            EXPECT_TRUE(same_bits(
                ds[i].second, at::tensor(std::vector<float>(hs[i].data.begin(), hs[i].data.end()))))
                << "the first draw of " << hs[i].name << " differs from the host's";
          }
        }
        // Step 1 completes: the rank-1 bucket's second Q column is dropped (zero).
        run_step(p, comm.rank(), 1, true);
        const std::string rank_one = "bucket" + std::to_string(kShapes[kRankOne].id) + ".q";
        const std::size_t cols = kShapes[kRankOne].numel / kShapes[kRankOne].rows;
        if (read_state) {
          for (const StateBuffer& b : p.host->state()) {
            if (b.name == rank_one) {
              ASSERT_EQ(max_abs(b.data.subspan(cols, cols)), 0.0);
            }
          }
          for (const auto& [name, t] : p.dev->state()) {
            if (name == rank_one) {
              ASSERT_EQ(t.narrow(0, cols, cols).abs().max().item<float>(), 0.0f);
            }
          }
        }
        // Step 2 fails after drawing the zero column again (every column without warm start).
        failing_step(2);
        const std::vector<StateBuffer> hs = p.host->state();
        const auto ds = p.dev->state();
        for (std::size_t i = 0; i < hs.size(); ++i) {
          if (hs[i].name != rank_one) continue;
          const at::Tensor dev_q = ds[i].second;
          const at::Tensor host_col =
              at::tensor(std::vector<float>(hs[i].data.begin() + cols, hs[i].data.end()));
          EXPECT_GT(max_abs(hs[i].data.subspan(cols, cols)), 0.0) << "not redrawn";
          EXPECT_TRUE(same_bits(dev_q.narrow(0, cols, cols).contiguous(), host_col))
              << "the redrawn column differs from the host's";
          if (!warm_start) {
            EXPECT_TRUE(same_bits(
                dev_q, at::tensor(std::vector<float>(hs[i].data.begin(), hs[i].data.end()))));
          }
        }
      });
    }
  }
}

// A checkpoint of either restores into the other: the host's state written into a fresh
// device reducer (and the device's into a fresh host reducer) continues as the original.
TEST(DevicePowerSgdState, RestoresFromTheHostAndIntoIt) {
  run_ranks(2, [&](dist::Communicator& comm) {
    Pair a = make_pair("powersgd:rank=2", comm);
    for (int t = 0; t < 2; ++t) run_step(a, comm.rank(), t + 2, true);
    a.host->take_stats();
    a.dev->take_stats();
    // b.dev restored from a.host, b.host from a.dev.
    Pair b = make_pair("powersgd:rank=2", comm);
    const auto host_saved = host_state(*a.host);
    std::map<std::string, at::Tensor> dev_saved;
    for (const auto& [name, t] : a.dev->state()) dev_saved[name] = t.clone();
    for (const auto& [name, t] : b.dev->state()) {
      ASSERT_EQ(host_saved.count(name), 1u) << name;
      t.copy_(at::tensor(host_saved.at(name)));
    }
    for (const StateBuffer& buf : b.host->state()) {
      ASSERT_EQ(dev_saved.count(buf.name), 1u) << buf.name;
      std::copy_n(dev_saved.at(buf.name).data_ptr<float>(), buf.data.size(), buf.data.begin());
    }
    // Pair (a.host, b.dev) continues from the host's state, (a.dev, b.host) from the
    // device's: each pair to tolerance, as any host/device pair.
    Pair from_host{std::move(a.host), std::move(b.dev)};
    Pair from_dev{std::move(b.host), std::move(a.dev)};
    Worst w;
    for (int t = 4; t < 6; ++t) {
      const Step s1 = run_step(from_host, comm.rank(), t, true);
      compare_steps(from_host, s1, 2, true, kShapes.size(), w,
                    "from the host's state, step " + std::to_string(t));
      const Step s2 = run_step(from_dev, comm.rank(), t, true);
      compare_steps(from_dev, s2, 2, true, kShapes.size(), w,
                    "from the device's state, step " + std::to_string(t));
    }
  });
}

TEST(DevicePowerSgdReducer, WhatRunsOnTheDevice) {
  for (const char* spec : {"powersgd", "powersgd:rank=1,warmup_steps=5,error_feedback=false",
                           "efm(topk:ratio=0.01)", "2bit", "dgc"}) {
    EXPECT_TRUE(Reducer::supports(Method::parse(spec))) << spec;
  }
  for (const char* spec : {"sketched-sgd", "fetchsgd", "fp16", "qsgd", "none"}) {
    EXPECT_FALSE(Reducer::supports(Method::parse(spec))) << spec;
  }
  run_ranks(1, [&](dist::Communicator& comm) {
    const auto r =
        make_device_reducer(Method::parse("powersgd:rank=3"), comm, kShapes, at::Device(at::kCPU));
    EXPECT_EQ(r->describe(), "powersgd:rank=3,warmup_steps=0,error_feedback=1,warm_start=1 on cpu");
    EXPECT_THROW(
        make_device_reducer(Method::parse("sketched-sgd"), comm, kShapes, at::Device(at::kCPU)),
        InvalidArgument);
    // A bucket that is no matrix of its rows: refused as the host refuses it.
    const std::vector<BucketShape> bad = {{1, 10, true, 3}};
    std::string host_error, dev_error;
    try {
      dist::make_reducer(Method::parse("powersgd"), comm, bad);
    } catch (const InvalidArgument& e) {
      host_error = e.what();
    }
    try {
      make_device_reducer(Method::parse("powersgd"), comm, bad, at::Device(at::kCPU));
    } catch (const InvalidArgument& e) {
      dev_error = e.what();
    }
    EXPECT_FALSE(host_error.empty());
    EXPECT_EQ(dev_error, host_error);
  });
}

}  // namespace
}  // namespace gradcomp::device
