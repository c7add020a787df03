// efm(...): error feedback with momentum correction (gradcomp/memory.h), against a scalar
// simulation of DGC's recurrences (plain and Nesterov), and its spec handling. The
// generic properties over every codec (m = 0 is ef; the momentum's sum is conserved)
// are in codec_contract_test.cc.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "gradcomp/error.h"
#include "gradcomp/registry.h"
#include "support/test_support.h"

namespace gradcomp {
namespace {

// One step of the scalar model: u, e updated; the message is exact top-k of p = e + ...
// decoded as a dense vector; e keeps the rest.
void simulate(std::vector<float>& u, std::vector<float>& e, const std::vector<float>& g, float m,
              bool nesterov) {
  for (std::size_t i = 0; i < g.size(); ++i) {
    if (nesterov) {
      u[i] = m * (u[i] + g[i]);
      e[i] += u[i] + g[i];
    } else {
      u[i] = m * u[i] + g[i];
      e[i] += u[i];
    }
  }
}

void run_against_simulation(bool nesterov) {
  const std::size_t n = 100;
  auto mem = builtin_registry().make_memory("efm(topk:ratio=0.05,select=exact)", n);
  EXPECT_EQ(mem->spec(), "efm(topk:ratio=0.05,select=exact,values=fp32,sample=0.01)");
  std::vector<float> u(n, 0.0f), e(n, 0.0f);
  std::vector<std::byte> msg(mem->max_encoded_bytes());
  for (std::uint64_t step = 0; step < 15; ++step) {
    const auto g = test::integer_gradient(n, 100 + step, 8);
    simulate(u, e, g, 0.5f, nesterov);
    const std::size_t bytes =
        mem->compress(g, {.seed = 1, .step = step, .momentum = 0.5f, .nesterov = nesterov}, msg);
    const auto d = test::decode(mem->codec(), {msg.data(), bytes}, n);
    std::size_t nz = 0;
    for (std::size_t i = 0; i < n; ++i) {
      if (d[i] != 0.0f) {
        ASSERT_EQ(d[i], e[i]) << "step " << step << " element " << i;  // sends p exactly
        e[i] = 0.0f;
        ++nz;
      }
    }
    EXPECT_LE(nz, 5u);
    const auto st = mem->state();
    ASSERT_TRUE(test::same_bits(st[0].data, u)) << "momentum, step " << step;
    ASSERT_TRUE(test::same_bits(st[1].data, e)) << "residual, step " << step;
  }
}

TEST(MomentumErrorFeedback, MatchesTheScalarRecurrence) { run_against_simulation(false); }
TEST(MomentumErrorFeedback, MatchesTheScalarRecurrenceNesterov) { run_against_simulation(true); }

TEST(MomentumErrorFeedback, SpecsAndBadInput) {
  const CodecRegistry& reg = builtin_registry();
  // The wrapper strips to its codec for receivers; it wraps nothing else.
  EXPECT_EQ(reg.make_codec_of("efm(2bit)")->spec(), reg.make_codec("2bit")->spec());
  EXPECT_THROW(reg.make_memory("efm", 4), InvalidArgument);
  EXPECT_THROW(reg.make_memory("efm(dgc)", 4), InvalidArgument);
  EXPECT_THROW(reg.make_codec("efm(topk)"), InvalidArgument);
  auto mem = reg.make_memory("efm(efsign)", 8);
  std::vector<std::byte> msg(mem->max_encoded_bytes());
  const std::vector<float> g(8, 1.0f), wrong(7, 1.0f);
  EXPECT_THROW(mem->compress(wrong, {}, msg), InvalidArgument);
  EXPECT_THROW(mem->compress(g, {.momentum = 1.0f}, msg), InvalidArgument);
  EXPECT_THROW(mem->compress(g, {.momentum = -0.1f}, msg), InvalidArgument);
}

}  // namespace
}  // namespace gradcomp
