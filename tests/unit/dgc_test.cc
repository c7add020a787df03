// DGC (memory/dgc.cc) against a scalar simulation of docs/algorithms/sparsification.md step by step
// (momentum correction, Nesterov, masking, accumulation, local clipping, the warm-up densities),
// the conservation identity sum(sent) + v = sum of the accumulated u's, determinism,
// state round trips, decoding by make_codec_of's codec, and the registry's named memories.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>

#include "gradcomp/error.h"
#include "gradcomp/kernels/select.h"
#include "gradcomp/registry.h"
#include "gradcomp/wire.h"
#include "memory/dgc.h"
#include "support/test_support.h"

namespace gradcomp {
namespace {

using detail::dgc_density;

const CodecRegistry& reg() { return builtin_registry(); }

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// ---- the message, read by hand (topk's layout, fp32 values) --------------------------

struct Sparse {
  std::vector<std::uint32_t> idx;
  std::vector<float> val;
};

Sparse parse(std::span<const std::byte> msg) {
  Sparse s;
  EXPECT_GE(msg.size(), kHeaderBytes + 4);
  const std::byte* p = msg.data() + kHeaderBytes;
  const std::size_t c = load_le<std::uint32_t>(p);
  EXPECT_EQ(msg.size(), kHeaderBytes + 4 + 8 * c);
  for (std::size_t j = 0; j < c; ++j) {
    s.idx.push_back(load_le<std::uint32_t>(p + 4 + 4 * j));
    s.val.push_back(load_le<float>(p + 4 + 4 * c + 4 * j));
  }
  return s;
}

// ---- the scalar simulation ------------------------------------------------------------

struct RefOptions {
  double density = 0.001;
  float m = 0.9f;
  bool nesterov = false;
  double clip = 0;
  double warmup = 4;
  bool masking = true;
  bool correction = true;
};

struct RefDgc {
  RefOptions o;
  std::vector<float> u, v;

  RefDgc(RefOptions opt, std::size_t n) : o(opt), u(n, 0.0f), v(n, 0.0f) {}

  // Clipping, then u and v, one element at a time as docs/algorithms/sparsification.md writes it.
  void update(std::span<const float> g_in, std::uint32_t world) {
    const std::size_t n = v.size();
    std::vector<float> g(g_in.begin(), g_in.end());
    if (o.clip > 0) {
      double ss = 0;
      for (float x : g) ss += static_cast<double>(x) * x;
      const double norm = std::sqrt(ss);
      const double thr = o.clip / std::sqrt(static_cast<double>(world));
      if (norm > thr) {
        const float s = static_cast<float>(thr / norm);
        for (float& x : g) x = s * x;
      }
    }
    for (std::size_t i = 0; i < n; ++i) {
      if (!o.correction) {
        v[i] = v[i] + g[i];
      } else if (o.nesterov) {
        u[i] = o.m * (u[i] + g[i]);
        v[i] = (v[i] + u[i]) + g[i];
      } else {
        u[i] = std::fma(o.m, u[i], g[i]);
        v[i] = v[i] + u[i];
      }
    }
  }

  // Exact top-k of |v| by a full stable sort (ties: lower index), ascending.
  std::vector<std::uint32_t> topk(std::size_t k) const {
    std::vector<std::uint32_t> order(v.size());
    std::iota(order.begin(), order.end(), 0u);
    std::stable_sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) {
      return std::fabs(v[a]) > std::fabs(v[b]);
    });
    order.resize(std::min(k, order.size()));
    std::sort(order.begin(), order.end());
    return order;
  }

  void mask(std::span<const std::uint32_t> idx) {
    for (std::uint32_t i : idx) {
      v[i] = 0.0f;
      if (o.correction && o.masking) u[i] = 0.0f;
    }
  }
};

std::string spec_of(const RefOptions& o, const std::string& select) {
  auto f = [](double x) {
    char b[64];
    const auto r = std::to_chars(b, b + sizeof b, x);
    return std::string(b, r.ptr);
  };
  return "dgc:density=" + f(o.density) + ",momentum=" + f(o.m) +
         ",nesterov=" + (o.nesterov ? "1" : "0") + ",clip=" + f(o.clip) +
         ",warmup_epochs=" + f(o.warmup) + ",select=" + select +
         ",masking=" + (o.masking ? "1" : "0") + ",correction=" + (o.correction ? "1" : "0");
}

StepContext ctx_at(std::uint64_t step, std::uint64_t steps_per_epoch, std::uint32_t world = 1) {
  StepContext c;
  c.seed = 7;
  c.step = step;
  c.steps_per_epoch = steps_per_epoch;
  c.world = world;
  c.bucket = 3;
  return c;
}

std::vector<std::byte> compress(Memory& mem, std::span<const float> g, const StepContext& ctx) {
  std::vector<std::byte> out(mem.max_encoded_bytes());
  out.resize(mem.compress(g, ctx, out));
  return out;
}

// A state buffer by name.
std::vector<float> state_of(Memory& mem, const std::string& name) {
  for (const StateBuffer& s : mem.state()) {
    if (s.name == name) return {s.data.begin(), s.data.end()};
  }
  ADD_FAILURE() << "no state '" << name << "'";
  return {};
}

// ---- the warm-up schedule ------------------------------------------------------------

TEST(DgcSchedule, FourExponentialStagesThenTheTarget) {
  // The paper's recipe: one stage per epoch over 4 epochs.
  for (std::uint64_t s = 0; s < 100; ++s) EXPECT_EQ(dgc_density(0.001, 4, s, 100), 0.25) << s;
  for (std::uint64_t s = 100; s < 200; ++s) EXPECT_EQ(dgc_density(0.001, 4, s, 100), 0.0625);
  for (std::uint64_t s = 200; s < 300; ++s) EXPECT_EQ(dgc_density(0.001, 4, s, 100), 0.015625);
  for (std::uint64_t s = 300; s < 400; ++s) EXPECT_EQ(dgc_density(0.001, 4, s, 100), 0.00390625);
  for (std::uint64_t s = 400; s < 1000; ++s) EXPECT_EQ(dgc_density(0.001, 4, s, 100), 0.001);

  // Fractional: half an epoch of 100 steps, stage boundaries at 12.5, 25 and 37.5 steps.
  const double want[] = {0.25, 0.0625, 0.015625, 0.00390625};
  for (std::uint64_t s = 0; s < 60; ++s) {
    const double expect = s < 13   ? want[0]
                          : s < 25 ? want[1]
                          : s < 38 ? want[2]
                          : s < 50 ? want[3]
                                   : 0.001;
    EXPECT_EQ(dgc_density(0.001, 0.5, s, 100), expect) << s;
  }
  // A target above a stage's density replaces it; above 0.25 there is no warm-up.
  EXPECT_EQ(dgc_density(0.01, 4, 350, 100), 0.01);
  EXPECT_EQ(dgc_density(0.01, 4, 250, 100), 0.015625);
  EXPECT_EQ(dgc_density(0.5, 4, 0, 100), 0.5);
  // Off: no warm-up, or steps per epoch unknown.
  EXPECT_EQ(dgc_density(0.001, 0, 0, 100), 0.001);
  EXPECT_EQ(dgc_density(0.001, 4, 0, 0), 0.001);
  EXPECT_EQ(detail::dgc_max_density(0.001, 4), 0.25);
  EXPECT_EQ(detail::dgc_max_density(0.001, 0), 0.001);
  EXPECT_EQ(detail::dgc_max_density(0.5, 1), 0.5);
}

TEST(DgcSchedule, WarmUpCappedAtAnEighthOfTheRun) {
  // 4 epochs of 100 steps asked; a run of 800 steps allows 100: stages of 25 steps.
  EXPECT_EQ(detail::dgc_warmup_steps(4, 100, 800), 100.0);
  EXPECT_EQ(detail::dgc_warmup_steps(4, 100, 0), 400.0);     // length unknown: no cap
  EXPECT_EQ(detail::dgc_warmup_steps(4, 100, 3200), 400.0);  // a long run: the paper's 4
  EXPECT_EQ(detail::dgc_warmup_steps(4, 100, 1'000'000), 400.0);
  EXPECT_EQ(detail::dgc_warmup_steps(0, 100, 800), 0.0);
  EXPECT_EQ(detail::dgc_warmup_steps(4, 0, 800), 0.0);
  const double want[] = {0.25, 0.0625, 0.015625, 0.00390625};
  for (std::uint64_t s = 0; s < 800; ++s) {
    const double expect = s < 100 ? want[s / 25] : 0.001;
    EXPECT_EQ(dgc_density(0.001, 4, s, 100, 800), expect) << s;
  }
  // The case: 2 epochs, density 0.001: 7/8 of the steps at 0.001.
  std::uint64_t at_target = 0;
  for (std::uint64_t s = 0; s < 468; ++s) at_target += dgc_density(0.001, 4, s, 234, 468) == 0.001;
  EXPECT_EQ(at_target, 468 - 59);  // steps 0..58 are below T = 58.5
  // Without the run's length, today's schedule.
  EXPECT_EQ(dgc_density(0.001, 4, 350, 100, 0), 0.00390625);
}

// ---- against the simulation -----------------------------------------------------------

struct SimCase {
  RefOptions o;
  std::uint32_t world;
};

// Every step: the message is exactly (top-k(|v|), v[I]) of the simulation, with k from
// the warm-up schedule, and u, v match bit for bit. Values are chosen so that every
// operation is exact without clipping (integers, m in {0.5, 0.75}), so compiler
// contraction cannot matter; with clipping both sides do the same float operations.
void run_against_simulation(const SimCase& c) {
  constexpr std::size_t kN = 1000;
  constexpr std::uint64_t kSpe = 8;  // warmup_epochs=1: two steps per stage
  const std::string spec = spec_of(c.o, "exact");
  SCOPED_TRACE(spec + " world " + std::to_string(c.world));
  auto mem = reg().make_memory(spec, kN);
  const auto codec = reg().make_codec_of(spec);
  RefDgc ref(c.o, kN);
  const std::size_t expect_k[] = {250, 250, 63, 63, 16, 16, 4, 4, 1, 1, 1, 1};
  for (std::uint64_t step = 0; step < 12; ++step) {
    const auto g = test::integer_gradient(kN, 100 + step, 6);
    const StepContext ctx = ctx_at(step, kSpe, c.world);
    const auto msg = compress(*mem, g, ctx);
    ref.update(g, c.world);
    const std::size_t k =
        kernels::count_for_fraction(dgc_density(c.o.density, c.o.warmup, step, kSpe), kN);
    if (c.o.density == 0.001 && c.o.warmup == 1) {
      ASSERT_EQ(k, expect_k[step]);
    }
    const auto idx = ref.topk(k);
    const Sparse s = parse(msg);
    ASSERT_EQ(s.idx, idx) << "step " << step;
    for (std::size_t j = 0; j < idx.size(); ++j) {
      ASSERT_EQ(std::bit_cast<std::uint32_t>(s.val[j]), std::bit_cast<std::uint32_t>(ref.v[idx[j]]))
          << "step " << step << " index " << idx[j];
    }
    // The receiver's codec decodes it to the same sparse vector.
    std::vector<float> dense(kN, 0.0f);
    for (std::size_t j = 0; j < idx.size(); ++j) dense[idx[j]] = ref.v[idx[j]];
    EXPECT_TRUE(test::same_bits(test::decode(*codec, msg, kN), dense)) << "step " << step;
    ref.mask(idx);
    if (c.o.correction) {
      ASSERT_TRUE(test::same_bits(state_of(*mem, "momentum"), ref.u)) << "step " << step;
    }
    ASSERT_TRUE(test::same_bits(state_of(*mem, "accumulator"), ref.v)) << "step " << step;
  }
}

TEST(Dgc, MatchesTheScalarSimulationStepByStep) {
  std::vector<SimCase> cases;
  for (bool nesterov : {false, true}) {
    for (bool masking : {true, false}) {
      for (float m : {0.5f, 0.75f}) {
        RefOptions o;
        o.m = m;
        o.nesterov = nesterov;
        o.masking = masking;
        o.warmup = 1;
        cases.push_back({o, 1});
      }
    }
  }
  RefOptions plain;
  plain.warmup = 1;
  plain.correction = false;  // v = v + g: top-k with error feedback
  cases.push_back({plain, 1});
  RefOptions dense_target;
  dense_target.density = 0.05;  // replaces the last two warm-up stages
  dense_target.warmup = 1;
  dense_target.m = 0.5f;
  cases.push_back({dense_target, 1});
  RefOptions no_warmup;
  no_warmup.density = 0.02;
  no_warmup.warmup = 0;
  no_warmup.m = 0.5f;
  cases.push_back({no_warmup, 1});
  for (bool nesterov : {false, true}) {
    for (std::uint32_t world : {1u, 4u, 3u}) {
      RefOptions clip;
      clip.clip = 40;  // the integer gradients have norm ~100: clipping is active
      clip.warmup = 1;
      clip.nesterov = nesterov;
      cases.push_back({clip, world});
    }
  }
  for (const SimCase& c : cases) run_against_simulation(c);
}

TEST(Dgc, MomentumCorrectionByHand) {
  // n = 4, k = 1, m = 0.5, no warm-up. Step 1: g = (1, 2, -3, 0.5): u = g, v = g, send
  // index 2 (-3), u[2] = v[2] = 0. Step 2: same g: u = (1.5, 3, -3, 0.75),
  // v = (2.5, 5, -3, 1.25): send index 1 (5).
  auto mem = reg().make_memory("dgc:density=0.25,momentum=0.5,warmup_epochs=0,select=exact", 4);
  const std::vector<float> g = {1, 2, -3, 0.5f};
  Sparse s = parse(compress(*mem, g, ctx_at(0, 0)));
  EXPECT_EQ(s.idx, std::vector<std::uint32_t>{2});
  EXPECT_EQ(s.val, std::vector<float>{-3});
  EXPECT_EQ(state_of(*mem, "momentum"), (std::vector<float>{1, 2, 0, 0.5f}));
  EXPECT_EQ(state_of(*mem, "accumulator"), (std::vector<float>{1, 2, 0, 0.5f}));
  s = parse(compress(*mem, g, ctx_at(1, 0)));
  EXPECT_EQ(s.idx, std::vector<std::uint32_t>{1});
  EXPECT_EQ(s.val, std::vector<float>{5});
  EXPECT_EQ(state_of(*mem, "momentum"), (std::vector<float>{1.5f, 0, -3, 0.75f}));
  EXPECT_EQ(state_of(*mem, "accumulator"), (std::vector<float>{2.5f, 0, -3, 1.25f}));
}

TEST(Dgc, UnsentUpdatesKeepTheLearningRateTheyWereFormedAt) {
  // n = 4, k = 1, no momentum correction, no warm-up. Step 1 at lr 0.1: v = g, send
  // index 3 (10). Step 2 at lr 0.05 with g = 0: lr_rescale scales the rest of v by
  // 0.1 / 0.05 = 2 and sends index 2 (6); without it, 3, as in the paper.
  const std::string base = "dgc:density=0.25,correction=0,warmup_epochs=0,select=exact";
  for (const bool rescale : {true, false}) {
    auto mem = reg().make_memory(base + (rescale ? "" : ",lr_rescale=0"), 4);
    StepContext c = ctx_at(0, 0);
    c.lr = 0.1f;
    Sparse s = parse(compress(*mem, std::vector<float>{1, 2, 3, 10}, c));
    EXPECT_EQ(s.idx, std::vector<std::uint32_t>{3});
    c = ctx_at(1, 0);
    c.lr = 0.05f;
    s = parse(compress(*mem, std::vector<float>{0, 0, 0, 0}, c));
    EXPECT_EQ(s.idx, std::vector<std::uint32_t>{2});
    EXPECT_EQ(s.val, std::vector<float>{rescale ? 6.0f : 3.0f});
    EXPECT_EQ(state_of(*mem, "accumulator"),
              (rescale ? std::vector<float>{2, 4, 0, 0} : std::vector<float>{1, 2, 0, 0}));
    // The same rate again, or none given (lr 0), changes nothing.
    c = ctx_at(2, 0);
    c.lr = rescale ? 0.05f : 0.0f;
    s = parse(compress(*mem, std::vector<float>{0, 0, 0, 0}, c));
    EXPECT_EQ(s.val, std::vector<float>{rescale ? 4.0f : 2.0f});
  }
  EXPECT_EQ(state_of(*reg().make_memory(base, 4), "learning_rate"), std::vector<float>{0});
}

TEST(Dgc, ClipsAtClipOverRootW) {
  // g = (3, 4): ||g|| = 5. clip = 2, W = 4: threshold 1, so g becomes (0.6, 0.8).
  auto mem = reg().make_memory("dgc:density=1,clip=2,warmup_epochs=0,select=exact", 2);
  const std::vector<float> g = {3, 4};
  const Sparse s = parse(compress(*mem, g, ctx_at(0, 0, 4)));
  EXPECT_FLOAT_EQ(s.val[0], 0.6f);
  EXPECT_FLOAT_EQ(s.val[1], 0.8f);
  // Under the threshold nothing changes (clip = 10, W = 1: 5 < 10).
  auto loose = reg().make_memory("dgc:density=1,clip=10,warmup_epochs=0,select=exact", 2);
  const Sparse t = parse(compress(*loose, g, ctx_at(0, 0, 1)));
  EXPECT_EQ(t.val, g);
}

// ---- conservation, determinism, state -------------------------------------------------

// Sum over steps of the sent values + v_final = sum over steps of u_t (u after the
// momentum update, before masking); without correction, of g. Exact: integer
// gradients and m = 0.5 keep every value a short dyadic fraction. Sampled selection
// on a tensor large enough that the threshold really is sampled.
TEST(Dgc, SentPlusAccumulatorEqualsTheAccumulatedMomentum) {
  constexpr std::size_t kN = 70001;
  for (const char* spec :
       {"dgc:density=0.01,momentum=0.5", "dgc:density=0.001,momentum=0.5,nesterov=1",
        "dgc:density=0.002,momentum=0.5,masking=0,warmup_epochs=0.5",
        "dgc:density=0.01,correction=0", "dgc:density=0.05,momentum=0.5,select=exact"}) {
    SCOPED_TRACE(spec);
    auto mem = reg().make_memory(spec, kN);
    const auto codec = reg().make_codec_of(spec);
    const bool correction = mem->carries_momentum();
    const bool nesterov = std::string(spec).find("nesterov=1") != std::string::npos;
    std::vector<double> sent(kN, 0.0), accumulated(kN, 0.0);
    std::vector<float> u(kN, 0.0f);
    // 10 steps, warm-up over the first 8 (steps_per_epoch 2, 4 epochs): values keep
    // under 24 significant bits, so float sums are exact.
    for (std::uint64_t step = 0; step < 10; ++step) {
      const auto g = test::integer_gradient(kN, 500 + step, 3);
      if (correction) u = state_of(*mem, "momentum");
      const auto msg = compress(*mem, g, ctx_at(step, 2));
      for (std::size_t i = 0; i < kN; ++i) {
        // What this step adds to v.
        accumulated[i] += !correction ? g[i]
                          : nesterov  ? 0.5 * (u[i] + g[i]) + g[i]
                                      : 0.5 * u[i] + g[i];
      }
      const auto d = test::decode(*codec, msg, kN);
      for (std::size_t i = 0; i < kN; ++i) sent[i] += d[i];
    }
    const auto v = state_of(*mem, "accumulator");
    for (std::size_t i = 0; i < kN; ++i) {
      ASSERT_EQ(sent[i] + v[i], accumulated[i]) << "index " << i;
    }
  }
}

TEST(Dgc, SampledSelectionSendsAValidTopSetOfTheRightSize) {
  constexpr std::size_t kN = 300000;
  auto mem = reg().make_memory("dgc:density=0.001", kN);
  for (std::uint64_t step = 0; step < 12; ++step) {
    const auto g = test::random_gradient(kN, 900 + step);
    std::vector<float> before = state_of(*mem, "accumulator");
    const std::vector<float> u = state_of(*mem, "momentum");
    for (std::size_t i = 0; i < kN; ++i) before[i] += std::fma(0.9f, u[i], g[i]);
    const auto msg = compress(*mem, g, ctx_at(step, 4));  // warm-up over 16 steps
    const Sparse s = parse(msg);
    const std::size_t k = kernels::count_for_fraction(dgc_density(0.001, 4, step, 4), kN);
    EXPECT_GE(10 * s.idx.size(), 8 * k) << step;
    EXPECT_LE(s.idx.size(), kernels::sampled_max_count(k)) << step;
    float min_sent = INFINITY;
    std::vector<char> chosen(kN, 0);
    for (std::size_t j = 0; j < s.idx.size(); ++j) {
      ASSERT_EQ(s.val[j], before[s.idx[j]]);
      min_sent = std::min(min_sent, std::fabs(s.val[j]));
      chosen[s.idx[j]] = 1;
    }
    float max_kept = 0;
    for (std::size_t i = 0; i < kN; ++i) {
      if (!chosen[i]) max_kept = std::max(max_kept, std::fabs(before[i]));
    }
    EXPECT_GE(min_sent, max_kept) << step;
  }
}

TEST(Dgc, RepeatsExactlyAndResumesFromItsState) {
  constexpr std::size_t kN = 40000;
  const std::string spec = "dgc:density=0.01,warmup_epochs=0.5,clip=3";
  auto a = reg().make_memory(spec, kN);
  auto b = reg().make_memory(spec, kN);
  std::vector<std::vector<std::byte>> first;
  // A decaying learning rate, so that the state includes what v's rate is.
  auto at = [](std::uint64_t step) {
    StepContext c = ctx_at(step, 6, 4);
    c.lr = 0.1f / static_cast<float>(1 + step);
    return c;
  };
  for (std::uint64_t step = 0; step < 10; ++step) {
    const auto g = test::random_gradient(kN, 40 + step);
    const auto ma = compress(*a, g, at(step));
    EXPECT_EQ(ma, compress(*b, g, at(step))) << step;
    first.push_back(ma);
  }
  // A fresh memory given a's state continues exactly as a does.
  auto c = reg().make_memory(spec, kN);
  const auto sa = a->state();
  const auto sc = c->state();
  ASSERT_EQ(sa.size(), 3u);
  ASSERT_EQ(sc.size(), 3u);
  EXPECT_EQ(sa[0].name, "momentum");
  EXPECT_EQ(sa[1].name, "accumulator");
  EXPECT_EQ(sa[2].name, "learning_rate");
  for (std::size_t i = 0; i < sa.size(); ++i) {
    std::copy(sa[i].data.begin(), sa[i].data.end(), sc[i].data.begin());
  }
  for (std::uint64_t step = 10; step < 16; ++step) {
    const auto g = test::random_gradient(kN, 40 + step);
    EXPECT_EQ(compress(*a, g, at(step)), compress(*c, g, at(step))) << step;
  }
  // Another rank samples other thresholds: not required to differ, but a different
  // step must not replay the same message.
  EXPECT_NE(first[8], first[9]);
}

TEST(Dgc, StateAndMomentumOwnership) {
  auto with = reg().make_memory("dgc", 10);
  EXPECT_TRUE(with->carries_momentum());
  EXPECT_EQ(with->state().size(), 3u);  // momentum, accumulator, learning rate
  auto without = reg().make_memory("dgc:correction=0,lr_rescale=0", 10);
  EXPECT_FALSE(without->carries_momentum());  // the optimizer keeps its momentum
  ASSERT_EQ(without->state().size(), 1u);
  EXPECT_EQ(without->state()[0].name, "accumulator");
  EXPECT_EQ(with->size(), 10u);
  EXPECT_EQ(with->max_encoded_bytes(), with->codec().max_encoded_bytes(10));
}

TEST(Dgc, RejectsBadCallsAndNonFiniteGradients) {
  auto mem = reg().make_memory("dgc:density=0.5,warmup_epochs=0", 8);
  std::vector<float> g(8, 1.0f);
  std::vector<std::byte> out(mem->max_encoded_bytes());
  EXPECT_NE(error_of([&] {
              mem->compress(std::span<const float>(g).first(7), {}, out);
            }).find("dgc compress: gradient of 7 elements"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              mem->compress(g, {}, std::span<std::byte>(out).first(out.size() - 1));
            }).find("output buffer"),
            std::string::npos);
  g[5] = NAN;
  EXPECT_NE(error_of([&] { mem->compress(g, {}, out); }).find("non-finite value at index 5"),
            std::string::npos);
  EXPECT_THROW(reg().make_memory("dgc", std::size_t{1} << 33), InvalidArgument);
}

// ---- the receiver's codec --------------------------------------------------------------

// Every message of a run (through and after the warm-up, any density and selection,
// sizes around the edges) decodes with make_codec_of(spec)'s codec, fits
// max_encoded_bytes, and sums with the final v to what was accumulated (checked above
// exactly; here that decode sees every sent value).
TEST(Dgc, MessagesDecodeWithTheCodecOfTheSpecAtEveryDensity) {
  for (const char* density : {"0.001", "0.01", "0.1", "0.3", "1"}) {
    for (const char* select : {"sampled", "exact"}) {
      for (const char* warmup : {"0", "1", "0.3"}) {
        const std::string spec = std::string("dgc:density=") + density + ",select=" + select +
                                 ",warmup_epochs=" + warmup;
        const auto codec = reg().make_codec_of(spec);
        EXPECT_EQ(codec->name(), "topk");
        // A receiver that spells the codec out itself gets the same one.
        EXPECT_EQ(reg().make_codec(codec->spec())->config_tag(), codec->config_tag());
        for (std::size_t n : {0, 1, 17, 1000, 65539}) {
          SCOPED_TRACE(spec + " n " + std::to_string(n));
          auto mem = reg().make_memory(spec, n);
          EXPECT_EQ(mem->codec().spec(), codec->spec());
          for (std::uint64_t step = 0; step < 12; ++step) {
            const auto g = test::random_gradient(n, step + n);
            std::vector<float> before = state_of(*mem, "accumulator");
            const auto u = state_of(*mem, "momentum");
            for (std::size_t i = 0; i < n; ++i) before[i] += std::fma(0.9f, u[i], g[i]);
            test::Guarded<std::byte> out(mem->max_encoded_bytes(), std::byte{0xA5});
            const std::size_t bytes = mem->compress(g, ctx_at(step, 10), out.span());
            ASSERT_TRUE(out.guard_intact());
            const std::span<const std::byte> msg(out.data(), bytes);
            std::vector<float> got(n, 0.0f);
            ASSERT_NO_THROW(codec->decode_add(msg, got)) << "step " << step;
            const auto v = state_of(*mem, "accumulator");
            for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(got[i] + v[i], before[i]) << i;
          }
        }
      }
    }
  }
}

// ---- the registry ----------------------------------------------------------------------

TEST(MemoryRegistry, BuildsDgcAndItsCodecFromSpecs) {
  auto mem = reg().make_memory("dgc:density=0.001", 100);
  EXPECT_EQ(mem->spec(),
            "dgc:density=0.001,momentum=0.9,nesterov=0,clip=0,warmup_epochs=4,select=sampled,"
            "sample=0.01,masking=1,correction=1,lr_rescale=1");
  EXPECT_EQ(mem->codec().spec(), "topk:ratio=0.25,select=sampled,values=fp32,sample=0.01");
  EXPECT_EQ(reg().make_codec_of("dgc:density=0.001")->spec(), mem->codec().spec());
  EXPECT_EQ(reg().make_codec_of("dgc:density=0.001,warmup_epochs=0,sample=0.1")->spec(),
            "topk:ratio=0.001,select=sampled,values=fp32,sample=0.1");
  EXPECT_EQ(reg().make_codec_of("dgc:density=0.5")->spec(),
            "topk:ratio=0.5,select=sampled,values=fp32,sample=0.01");
  // The canonical spec rebuilds the same memory.
  EXPECT_EQ(reg().make_memory(mem->spec(), 100)->spec(), mem->spec());
  ASSERT_NE(reg().find_memory("dgc"), nullptr);
  EXPECT_EQ(reg().find_memory("topk"), nullptr);
  EXPECT_EQ(reg().find("dgc"), nullptr);
}

TEST(MemoryRegistry, ErrorsNameTheProblem) {
  EXPECT_NE(error_of([&] {
              reg().make_memory("dgc:densty=0.1", 4);
            }).find("dgc: unknown parameter 'densty'; known: density, momentum"),
            std::string::npos);
  EXPECT_NE(error_of([&] { reg().make_codec_of("dgc:density=0"); }).find("out of range (0, 1]"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              reg().make_memory("dgc:select=fast", 4);
            }).find("expected one of: sampled, exact"),
            std::string::npos);
  EXPECT_NE(error_of([&] { reg().make_memory("dgc:masking=2", 4); }).find("expected 0, 1"),
            std::string::npos);
  EXPECT_NE(error_of([&] { reg().make_memory("dgc:momentum=1.5", 4); }).find("out of range"),
            std::string::npos);
  for (const char* wrapped : {"ef(dgc)", "noef(dgc:density=0.1)"}) {
    EXPECT_NE(error_of([&] { reg().make_memory(wrapped, 4); }).find("'dgc' is a memory"),
              std::string::npos)
        << wrapped;
    EXPECT_NE(error_of([&] { reg().make_codec_of(wrapped); }).find("'dgc' is a memory"),
              std::string::npos)
        << wrapped;
  }
  EXPECT_NE(error_of([&] { reg().make_codec("dgc"); }).find("'dgc' is a memory"),
            std::string::npos);
  EXPECT_NE(error_of([&] { reg().make_memory("dgc(topk)", 4); }).find("wraps no codec"),
            std::string::npos);
  // Unknown names list the memories next to the wrappers.
  EXPECT_NE(error_of([&] {
              reg().make_memory("dgcc", 4);
            }).find("(wrappers: ef, efm, noef; memories: dgc)"),
            std::string::npos);
}

TEST(MemoryRegistry, NamesAreUniqueAcrossCodecsWrappersAndMemories) {
  CodecRegistry r;
  register_builtin_codecs(r);
  MemoryInfo m = *r.find_memory("dgc");
  EXPECT_THROW(r.add_memory(m), InvalidArgument);  // twice
  m.name = "topk";
  EXPECT_THROW(r.add_memory(m), InvalidArgument);  // a codec's name
  m.name = "ef";
  EXPECT_THROW(r.add_memory(m), InvalidArgument);  // a wrapper's
  m.name = "dgc2";
  m.codec_spec = nullptr;
  EXPECT_THROW(r.add_memory(m), InvalidArgument);  // no codec
  CodecInfo c = *r.find("topk");
  c.name = "dgc";
  c.wire_id = 999;
  EXPECT_THROW(r.add(c), InvalidArgument);  // a memory's name
  // A memory whose codec spec does not build says whose fault it is.
  m = *r.find_memory("dgc");
  m.name = "broken";
  m.codec_spec = [](const Params&) { return std::string("topk:ratio=7"); };
  r.add_memory(m);
  EXPECT_NE(error_of([&] {
              r.make_memory("broken", 4);
            }).find("broken: its message codec 'topk:ratio=7' does not build"),
            std::string::npos);
}

TEST(MemoryRegistry, BuiltinMemoriesAreDocumentedAndTheirExamplesBuild) {
  const auto all = reg().memories();
  ASSERT_FALSE(all.empty());
  for (const MemoryInfo* info : all) {
    EXPECT_FALSE(info->summary.empty()) << info->name;
    for (const auto& p : info->params) EXPECT_FALSE(p.help.empty()) << info->name << ":" << p.key;
    std::vector<std::string> specs = {info->name};
    specs.insert(specs.end(), info->examples.begin(), info->examples.end());
    for (const auto& e : specs) {
      EXPECT_NO_THROW(reg().make_memory(e, 1000)) << e;
      EXPECT_EQ(reg().make_codec_of(e)->spec(), reg().make_memory(e, 10)->codec().spec()) << e;
    }
  }
}

}  // namespace
}  // namespace gradcomp
