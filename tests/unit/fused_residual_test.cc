// Codec::encode_with_residual (codec.h), the fused error-feedback path, against the
// unfused form it replaced: p = e + g (or momentum correction's u, p) in a separate loop,
// then encode_feedback(p). Messages, residuals and momenta must be identical bit for bit
// over several steps, for the codecs with a fused kernel (2bit fixed and adaptive, 1bit,
// signsgd, top-k sampled / exact / fp16 values, chunktopk) and for ones on the default hook.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "gradcomp/error.h"
#include "gradcomp/registry.h"
#include "support/test_support.h"

namespace gradcomp {
namespace {

const std::vector<std::string> kSpecs = {"2bit",
                                         "2bit:scale=2",
                                         "2bit:threshold=0.5",
                                         "1bit",
                                         "1bit:threshold=0.1",
                                         "signsgd",
                                         "efsign",
                                         "topk:ratio=0.001",
                                         "topk:ratio=0.001,select=sampled",
                                         "topk:ratio=0.01,select=exact",
                                         "topk:ratio=0.02,select=sampled,values=fp16",
                                         "topk:ratio=0.3,select=sampled",
                                         "randomk:ratio=0.01",
                                         "threshold",
                                         "chunktopk",
                                         "chunktopk:chunk=1000,k=7,values=fp16",
                                         "chunktopk:chunk=2,k=1,values=bf16",
                                         "chunktopk:chunk=1000,k=7,values=2bit"};

// 0, 1, odd, and a size past every chunk/block boundary that is not a multiple of 16.
const std::vector<std::size_t> kSizes = {0, 1, 17, 1001, (std::size_t{1} << 20) + 3};

enum class Form { kEf, kMomentum, kNesterov };

// The unfused residual step (the memories' loops before the fused path).
void accumulate_ref(std::vector<float>& u, std::vector<float>& e, const std::vector<float>& g,
                    float m, Form form) {
  for (std::size_t i = 0; i < g.size(); ++i) {
    if (form == Form::kEf) {
      e[i] += g[i];
    } else if (form == Form::kNesterov) {
      u[i] = m * (u[i] + g[i]);
      e[i] += u[i] + g[i];
    } else {
      u[i] = m * u[i] + g[i];
      e[i] += u[i];
    }
  }
}

ResidualUpdate update_for(const std::vector<float>& g, std::vector<float>& u, float m, Form form) {
  if (form == Form::kEf) return ResidualUpdate(g);
  return ResidualUpdate(g, u, m, form == Form::kNesterov);
}

void run(const std::string& spec, std::size_t n, Form form) {
  SCOPED_TRACE(spec + " n=" + std::to_string(n) + " form=" + std::to_string(int(form)));
  const auto codec = builtin_registry().make_codec(spec);
  const float m = 0.9f;
  std::vector<float> e_ref(n, 0.0f), u_ref(n, 0.0f), e(n, 0.0f), u(n, 0.0f);
  std::vector<std::byte> msg_ref(codec->max_encoded_bytes(n)), msg(msg_ref.size());
  for (std::uint64_t step = 0; step < 4; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const auto g = test::random_gradient(n, 40 + step, step == 2 ? 1e-3f : 1.0f);
    const StepContext ctx{.seed = 3, .step = step, .rank = 1, .bucket = 2};

    accumulate_ref(u_ref, e_ref, g, m, form);
    const std::size_t bytes_ref = codec->encode_feedback(e_ref, ctx, msg_ref);
    const std::size_t bytes = codec->encode_with_residual(update_for(g, u, m, form), e, ctx, msg);

    ASSERT_EQ(bytes, bytes_ref);
    ASSERT_EQ(std::memcmp(msg.data(), msg_ref.data(), bytes), 0) << "message differs";
    ASSERT_TRUE(test::same_bits(e, e_ref)) << "residual differs";
    ASSERT_TRUE(test::same_bits(u, u_ref)) << "momentum differs";
  }
}

class FusedResidual : public ::testing::TestWithParam<std::string> {};

TEST_P(FusedResidual, ErrorFeedbackEqualsTheUnfusedPath) {
  for (std::size_t n : kSizes) run(GetParam(), n, Form::kEf);
}

TEST_P(FusedResidual, MomentumCorrectionEqualsTheUnfusedPath) {
  for (std::size_t n : kSizes) run(GetParam(), n, Form::kMomentum);
}

TEST_P(FusedResidual, NesterovEqualsTheUnfusedPath) {
  for (std::size_t n : kSizes) run(GetParam(), n, Form::kNesterov);
}

// A non-finite gradient: the fused path throws what the unfused one throws, and leaves
// the residual holding all of p, as the unfused path does.
TEST_P(FusedResidual, NonFiniteInputLeavesTheSameState) {
  const std::size_t n = (std::size_t{1} << 20) + 3;
  const auto codec = builtin_registry().make_codec(GetParam());
  for (const float bad :
       {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    auto g = test::random_gradient(n, 7);
    g[n / 2 + 5] = bad;
    std::vector<float> e_ref = test::random_gradient(n, 8, 0.1f), e = e_ref, u;
    std::vector<std::byte> msg_ref(codec->max_encoded_bytes(n)), msg(msg_ref.size());
    const StepContext ctx{.seed = 3, .step = 1};
    for (std::size_t i = 0; i < n; ++i) e_ref[i] += g[i];
    std::string what_ref, what;
    try {
      codec->encode_feedback(e_ref, ctx, msg_ref);
    } catch (const InvalidArgument& ex) {
      what_ref = ex.what();
    }
    try {
      codec->encode_with_residual(ResidualUpdate(g), e, ctx, msg);
    } catch (const InvalidArgument& ex) {
      what = ex.what();
    }
    EXPECT_EQ(what, what_ref);
    if (what_ref.empty()) {
      EXPECT_EQ(std::memcmp(msg.data(), msg_ref.data(), msg.size()), 0);
    }
    ASSERT_TRUE(test::same_bits(e, e_ref)) << "residual differs";
  }
}

INSTANTIATE_TEST_SUITE_P(Specs, FusedResidual, ::testing::ValuesIn(kSpecs),
                         [](const auto& param_info) {
                           return test::spec_test_name(param_info.param);
                         });

// peek previews apply exactly (top-k's sample is peeked before the pass forms p).
TEST(ResidualUpdate, PeekEqualsApply) {
  const std::size_t n = 4099;
  for (const Form form : {Form::kEf, Form::kMomentum, Form::kNesterov}) {
    const auto g = test::random_gradient(n, 1);
    auto u = test::random_gradient(n, 2);
    auto e = test::random_gradient(n, 3);
    std::vector<float> peeked(n);
    const ResidualUpdate upd = update_for(g, u, 0.9f, form);
    upd.peek(e.data(), 0, 100, peeked.data());
    upd.peek(e.data(), 100, n, peeked.data() + 100);
    upd.apply(e.data(), 0, 3000);
    upd.apply(e.data(), 3000, n);
    ASSERT_TRUE(test::same_bits(peeked, e)) << "form " << int(form);
  }
}

// The memories take the fused path: ef(2bit) and efm(topk) against the unfused loops.
TEST(FusedResidual, MemoriesUseIt) {
  const std::size_t n = 300001;
  for (const std::string spec : {"2bit", "topk:ratio=0.001"}) {
    for (const bool momentum : {false, true}) {
      SCOPED_TRACE(spec + (momentum ? " efm" : " ef"));
      auto mem = builtin_registry().make_memory((momentum ? "efm(" : "ef(") + spec + ")", n);
      const auto& codec = mem->codec();
      std::vector<float> u(n, 0.0f), e(n, 0.0f);
      std::vector<std::byte> msg(mem->max_encoded_bytes()), msg_ref(msg.size());
      for (std::uint64_t step = 0; step < 3; ++step) {
        const auto g = test::random_gradient(n, 70 + step);
        const StepContext ctx{.seed = 5, .step = step, .momentum = momentum ? 0.9f : 0.0f};
        accumulate_ref(u, e, g, 0.9f, momentum ? Form::kMomentum : Form::kEf);
        const std::size_t bytes_ref = codec.encode_feedback(e, ctx, msg_ref);
        const std::size_t bytes = mem->compress(g, ctx, msg);
        ASSERT_EQ(bytes, bytes_ref);
        ASSERT_EQ(std::memcmp(msg.data(), msg_ref.data(), bytes), 0);
        const auto st = mem->state();
        ASSERT_TRUE(test::same_bits(st.back().data, e));
        if (momentum) {
          ASSERT_TRUE(test::same_bits(st.front().data, u));
        }
      }
    }
  }
}

}  // namespace
}  // namespace gradcomp
