// The run's schedule line and start-of-run warnings (Method::schedule, start_warnings,
// threshold_warning in gradcomp/method.h; each registry entry's hooks).
#include "gradcomp/method.h"

#include <gtest/gtest.h>

#include <optional>
#include <span>
#include <string>
#include <vector>

namespace gradcomp {
namespace {

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// The spec parsed once per question, as the Python bindings ask.
std::string describe_schedule(const std::string& spec, const RunShape& r) {
  return Method::parse(spec).schedule(r);
}
std::vector<std::string> start_warnings(const std::string& spec, const RunShape& r) {
  return Method::parse(spec).start_warnings(r);
}
double fixed_2bit_threshold(const std::string& spec) {
  return Method::parse(spec).fixed_threshold();
}
std::optional<std::string> threshold_warning(const std::string& spec,
                                             std::span<const std::span<const float>> grads,
                                             std::uint64_t step) {
  return Method::parse(spec).threshold_warning(grads, step);
}

RunShape run(std::uint64_t steps_per_epoch, std::uint64_t total,
             std::vector<std::size_t> sizes = {}) {
  RunShape r;
  r.steps_per_epoch = steps_per_epoch;
  r.total_steps = total;
  r.compressed_sizes = std::move(sizes);
  return r;
}

TEST(RunChecks, DgcScheduleLine) {
  // 2 epochs of 234 steps: 4 epochs asked, 1/8 of 468 = 58.5 steps.
  const std::string line = describe_schedule("dgc:density=0.001", run(234, 468));
  EXPECT_TRUE(contains(line, "dgc warm-up: 58.5 steps of 468")) << line;
  EXPECT_TRUE(contains(line, "capped at 1/8 of the run")) << line;
  EXPECT_TRUE(contains(line, "0.25, 0.0625, 0.015625, 0.00390625, then 0.001")) << line;
  // A long run keeps the paper's 4 epochs, uncapped.
  const std::string long_run = describe_schedule("dgc", run(100, 4000));
  EXPECT_TRUE(contains(long_run, "dgc warm-up: 400 steps of 4000 (4 epochs)")) << long_run;
  EXPECT_FALSE(contains(long_run, "capped")) << long_run;
  // A target above a stage replaces it.
  EXPECT_TRUE(contains(describe_schedule("dgc:density=0.01", run(100, 4000)),
                       "0.25, 0.0625, 0.015625, 0.01, then 0.01"));
  EXPECT_TRUE(contains(describe_schedule("dgc:warmup_epochs=0", run(100, 400)), "no warm-up"));
  EXPECT_TRUE(contains(describe_schedule("dgc", run(0, 0)), "steps per epoch unknown"));
  EXPECT_EQ(describe_schedule("efm(topk:ratio=0.01)", run(100, 400)), "");
}

TEST(RunChecks, DgcWarmUpLongerThanTheRun) {
  auto w = start_warnings("dgc:density=0.001", run(234, 468));
  ASSERT_EQ(w.size(), 1u);
  EXPECT_TRUE(contains(w[0], "warmup_epochs=4 (936 steps) covers the whole run of 468 steps"))
      << w[0];
  EXPECT_TRUE(contains(w[0], "capped at 58.5 steps")) << w[0];
  // Shorter than the run but more than 1/8 of it.
  w = start_warnings("dgc:warmup_epochs=1", run(100, 400));
  ASSERT_EQ(w.size(), 1u);
  EXPECT_TRUE(contains(w[0], "is more than 1/8 of the run's 400 steps; capped at 50 steps"))
      << w[0];
  // Within 1/8: nothing to say; nor without a warm-up, nor without the run's length.
  EXPECT_TRUE(start_warnings("dgc", run(100, 3200)).empty());
  EXPECT_TRUE(start_warnings("dgc:warmup_epochs=0", run(100, 400)).empty());
  EXPECT_TRUE(start_warnings("dgc:density=0.5", run(100, 400)).empty());
  EXPECT_TRUE(start_warnings("dgc", run(100, 0)).empty());
  // Steps per epoch unknown: the warm-up is off, which is worth saying.
  w = start_warnings("dgc", run(0, 0));
  ASSERT_EQ(w.size(), 1u);
  EXPECT_TRUE(contains(w[0], "steps per epoch are unknown: no warm-up")) << w[0];
}

TEST(RunChecks, SketchSmallerThanItsCandidates) {
  // sketched-sgd with k = 1% and 5 rows of n/200 on a 78,400-element layer: k = 784,
  // p2*k = 3136 candidates, 5 rows of ceil(0.025 * 78400 / 5) = 392 columns.
  const std::string small = "sketched-sgd:ratio=0.01,rows=5,table=0.025";
  auto w = start_warnings(small, run(100, 300, {78400, 1000}));
  ASSERT_EQ(w.size(), 1u);
  EXPECT_TRUE(contains(w[0], "sketched-sgd: a sketch of 5 x 392 cells for 3136 candidates"))
      << w[0];
  EXPECT_TRUE(contains(w[0], "p2*k, k=784")) << w[0];
  EXPECT_TRUE(contains(w[0], "table >= 0.2")) << w[0];
  // Big enough: one column per candidate.
  EXPECT_TRUE(
      start_warnings("sketched-sgd:ratio=0.01,rows=5,table=0.2", run(100, 300, {78400})).empty());
  EXPECT_TRUE(start_warnings(small + ",cols=3136", run(100, 300, {78400})).empty());
  // The default (one row of 0.05 n, k = 0.5%, p2 = 4): 3920 columns for 1568 candidates.
  EXPECT_TRUE(start_warnings("sketched-sgd", run(100, 300, {78400})).empty());
  // fetchsgd ranks k: by default 0.09 * 78400 / 1 = 7056 columns >= k = 392; with 5 rows,
  // k = 1% and table=0.02: 314 < 784.
  EXPECT_TRUE(start_warnings("fetchsgd", run(100, 300, {78400})).empty());
  w = start_warnings("fetchsgd:rows=5,ratio=0.01,table=0.02", run(100, 300, {78400}));
  ASSERT_EQ(w.size(), 1u);
  EXPECT_TRUE(contains(w[0], "fetchsgd: a sketch of 5 x 314 cells for 784 candidates to rank (k)"))
      << w[0];
  // Error feedback around the sketch codec: warned; the bare codec (no memory): not.
  w = start_warnings("ef(sketch)", run(100, 300, {78400}));
  ASSERT_EQ(w.size(), 1u);
  EXPECT_TRUE(contains(w[0], "ef(sketch): count-sketch estimates are not a contraction")) << w[0];
  EXPECT_EQ(start_warnings("efm(sketch:rows=3)", run(100, 300, {78400})).size(), 1u);
  EXPECT_TRUE(start_warnings("sketch", run(100, 300, {78400})).empty());
  // Nothing compressed: nothing to check; other specs: nothing.
  EXPECT_TRUE(start_warnings(small, run(100, 300)).empty());
  EXPECT_TRUE(start_warnings("efm(topk:ratio=0.01)", run(100, 300, {78400})).empty());
}

TEST(RunChecks, FixedTwoBitThresholdFarAboveTheGradients) {
  EXPECT_EQ(fixed_2bit_threshold("2bit:threshold=0.5"), 0.5);
  EXPECT_EQ(fixed_2bit_threshold("ef(2bit:threshold=0.25)"), 0.25);
  EXPECT_EQ(fixed_2bit_threshold("efm(2bit:threshold=1)"), 1.0);
  EXPECT_EQ(fixed_2bit_threshold("2bit"), 0.0);  // adaptive
  EXPECT_EQ(fixed_2bit_threshold("topk"), 0.0);

  const std::vector<float> small(100, 1e-3f), large(50, -2e-2f);
  const std::vector<std::span<const float>> grads = {small, large};
  // tau = 0.5 against a largest mean |g| of 0.02: 25x.
  const auto w = threshold_warning("2bit:threshold=0.5", grads, 10);
  ASSERT_TRUE(w.has_value());
  EXPECT_TRUE(contains(*w, "2bit: threshold=0.5 is 25x the gradients' mean |g| (0.02 at step 10)"))
      << *w;
  // Within 10x of some bucket's scale: no warning; adaptive: never.
  EXPECT_FALSE(threshold_warning("2bit:threshold=0.1", grads, 10).has_value());
  EXPECT_FALSE(threshold_warning("2bit", grads, 10).has_value());
  const std::vector<float> zeros(10, 0.0f);
  const std::vector<std::span<const float>> none = {zeros};
  EXPECT_FALSE(threshold_warning("2bit:threshold=0.5", none, 10).has_value());
}

// PowerSGD's dense warm-up: a schedule line when it has one, a warning when it covers the
// run, nothing for the default (no warm-up).
TEST(RunChecks, PowerSgdWarmup) {
  EXPECT_EQ(describe_schedule("powersgd", run(234, 702)), "");
  EXPECT_TRUE(start_warnings("powersgd", run(234, 702)).empty());
  EXPECT_EQ(describe_schedule("powersgd:rank=2,warmup_steps=100", run(234, 702)),
            "powersgd warm-up: 100 dense steps of 702, then rank 2");
  EXPECT_TRUE(start_warnings("powersgd:warmup_steps=701", run(234, 702)).empty());
  const auto w = start_warnings("powersgd:warmup_steps=702", run(234, 702));
  ASSERT_EQ(w.size(), 1u);
  EXPECT_TRUE(contains(w[0], "warmup_steps=702 covers the whole run of 702 steps")) << w[0];
  // The run's length unknown: no warning.
  EXPECT_TRUE(start_warnings("powersgd:warmup_steps=5000", run(0, 0)).empty());
}

}  // namespace
}  // namespace gradcomp
