// The outer optimizer's rules against their closed forms, and its spec parsing.
#include <gtest/gtest.h>

#include <vector>

#include "gradcomp/error.h"
#include "gradcomp/outer_optimizer.h"

namespace gradcomp {
namespace {

TEST(OuterOptimizer, SpecsAreCanonicalWithTheirDefaults) {
  EXPECT_EQ(OuterOptimizer::parse("nesterov").spec(), "nesterov:lr=0.7,momentum=0.9");
  EXPECT_EQ(OuterOptimizer::parse(OuterOptimizer::kDefaultSpec).spec(),
            OuterOptimizer::kDefaultSpec);
  EXPECT_EQ(OuterOptimizer::parse("average").spec(), "average");
  EXPECT_EQ(OuterOptimizer::parse("sgd:lr=0.5").spec(), "sgd:lr=0.5,momentum=0");
  EXPECT_EQ(OuterOptimizer::parse("sparseloco").spec(), "sparseloco:lr=1,decay=0.95");
  EXPECT_DOUBLE_EQ(OuterOptimizer::parse("sparseloco:decay=0.5").residual_decay(), 0.5);
  EXPECT_DOUBLE_EQ(OuterOptimizer::parse("nesterov").residual_decay(), 1.0);
  EXPECT_FALSE(OuterOptimizer::parse("average").has_momentum());
  EXPECT_TRUE(OuterOptimizer::parse("nesterov").nesterov());
}

TEST(OuterOptimizer, BadSpecsAreRefusedInOneLine) {
  for (const char* bad :
       {"adam", "nesterov:lr=0", "nesterov:momentum=0", "sgd:momentum=1", "average:lr=2",
        "sparseloco:decay=1.5", "ef(nesterov)", "nesterov:x=1", ""}) {
    try {
      (void)OuterOptimizer::parse(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    }
  }
}

// Three rounds of each rule against the formula written out in double precision.
TEST(OuterOptimizer, UpdatesFollowTheirClosedForms) {
  const std::vector<std::vector<float>> deltas = {
      {0.5f, -1.0f, 0.0f}, {0.25f, 2.0f, -0.125f}, {-1.5f, 0.0f, 3.0f}};
  for (const char* spec : {"average", "sgd:lr=0.3", "sgd:lr=0.3,momentum=0.8",
                           "nesterov:lr=0.7,momentum=0.9", "sparseloco:lr=0.5"}) {
    const OuterOptimizer o = OuterOptimizer::parse(spec);
    std::vector<float> x = {1.0f, -2.0f, 0.5f};
    std::vector<float> m(3, 0.0f);
    std::vector<double> rx = {1.0, -2.0, 0.5};
    std::vector<double> rm(3, 0.0);
    for (const std::vector<float>& d : deltas) {
      o.update(x, d, o.has_momentum() ? std::span<float>(m) : std::span<float>());
      for (std::size_t i = 0; i < 3; ++i) {
        rm[i] = o.momentum() * rm[i] + d[i];
        const double step = o.momentum() == 0.0 ? d[i]
                            : o.nesterov()      ? d[i] + o.momentum() * rm[i]
                                                : rm[i];
        rx[i] -= o.lr() * step;
      }
    }
    for (std::size_t i = 0; i < 3; ++i) EXPECT_NEAR(x[i], rx[i], 1e-5) << spec << " element " << i;
  }
}

TEST(OuterOptimizer, MismatchedSpansAreRefused) {
  const OuterOptimizer o = OuterOptimizer::parse("nesterov");
  std::vector<float> x(3), d(2), m(3);
  EXPECT_THROW(o.update(x, d, m), InvalidArgument);
  std::vector<float> d3(3), m0;
  EXPECT_THROW(o.update(x, d3, m0), InvalidArgument);
}

}  // namespace
}  // namespace gradcomp
