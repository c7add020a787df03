// Memory::compress_dense (the reducers' dense fallback) against its definition: the
// step as if the codec had selected and sent every element exactly. A second memory
// of the same kind with exact top-k at ratio 1 does that through compress(); decoding
// its message must give compress_dense's output bit for bit, and both memories must
// hold the same state afterwards, step after step (error feedback, momentum
// correction, Nesterov, DGC with and without masking). And DGC's per-step message
// bound covers what it writes and follows its warm-up.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "gradcomp/error.h"
#include "gradcomp/memory.h"
#include "gradcomp/registry.h"
#include "support/test_support.h"

namespace gradcomp {
namespace {

void expect_same_state(Memory& a, Memory& b, const std::string& what) {
  const auto sa = a.state();
  const auto sb = b.state();
  ASSERT_EQ(sa.size(), sb.size()) << what;
  for (std::size_t i = 0; i < sa.size(); ++i) {
    ASSERT_EQ(std::vector<float>(sa[i].data.begin(), sa[i].data.end()),
              std::vector<float>(sb[i].data.begin(), sb[i].data.end()))
        << what << " " << sa[i].name;
  }
}

TEST(DenseFallback, CompressDenseIsSelectingEverything) {
  const std::vector<std::pair<std::string, std::string>> kinds = {
      {"noef(topk:ratio=0.01)", "noef(topk:ratio=1,select=exact)"},
      {"ef(topk:ratio=0.01)", "ef(topk:ratio=1,select=exact)"},
      {"efm(topk:ratio=0.01)", "efm(topk:ratio=1,select=exact)"},
      {"dgc:density=0.01", "dgc:density=1,select=exact,warmup_epochs=0"},
      {"dgc:density=0.01,masking=0", "dgc:density=1,select=exact,warmup_epochs=0,masking=0"},
      {"dgc:density=0.01,nesterov=1,clip=2",
       "dgc:density=1,select=exact,warmup_epochs=0,nesterov=1,clip=2"},
  };
  const CodecRegistry& registry = builtin_registry();
  for (const auto& [spec, everything] : kinds) {
    for (const std::size_t n : {0u, 1u, 7u, 1001u}) {
      const auto dense = registry.make_memory(spec, n);
      const auto reference = registry.make_memory(everything, n);
      std::vector<std::byte> msg(reference->max_encoded_bytes());
      for (int step = 0; step < 4; ++step) {
        StepContext ctx;
        ctx.step = static_cast<std::uint64_t>(step);
        ctx.world = 2;
        ctx.momentum = 0.9f;
        ctx.nesterov = spec.find("nesterov=1") != std::string::npos;
        const std::vector<float> g = test::random_gradient(n, 31 * n + step);
        std::vector<float> got = g;  // in place, as the reducer calls it
        dense->compress_dense(got, ctx, got);
        const std::size_t len = reference->compress(g, ctx, msg);
        std::vector<float> want(n, 0.0f);
        reference->codec().decode_add(std::span<const std::byte>(msg.data(), len), want, 1.0f);
        const std::string what = spec + " n " + std::to_string(n) + " step " + std::to_string(step);
        ASSERT_EQ(got, want) << what;
        expect_same_state(*dense, *reference, what);
      }
    }
  }
}

TEST(DenseFallback, DgcStepBoundCoversItsMessagesAndFollowsTheWarmup) {
  const CodecRegistry& registry = builtin_registry();
  const std::size_t n = 100000;
  const auto dgc = registry.make_memory("dgc:density=0.001,warmup_epochs=1", n);
  std::vector<std::byte> msg(dgc->max_encoded_bytes());
  std::size_t first = 0;
  std::size_t last = 0;
  for (std::uint64_t step = 0; step < 12; ++step) {
    StepContext ctx;
    ctx.step = step;
    ctx.steps_per_epoch = 8;  // warm-up over steps 0..7 in four stages, then 0.1%
    ctx.momentum = 0.9f;
    const std::size_t bound = dgc->step_max_encoded_bytes(ctx);
    const auto g = test::random_gradient(n, step);
    EXPECT_LE(dgc->compress(g, ctx, msg), bound) << "step " << step;
    EXPECT_LE(bound, dgc->max_encoded_bytes());
    if (step == 0) first = bound;
    last = bound;
  }
  EXPECT_GT(first, 100 * last) << "25% at the start, 0.1% after the warm-up";

  // A run of 16 steps caps the warm-up at 2 (1/8 of the run): the bound follows the cap,
  // or the reducer would send every step of a short run dense.
  const auto capped = registry.make_memory("dgc:density=0.001,warmup_epochs=1", n);
  for (std::uint64_t step = 0; step < 6; ++step) {
    StepContext ctx;
    ctx.step = step;
    ctx.steps_per_epoch = 8;
    ctx.total_steps = 16;
    ctx.momentum = 0.9f;
    const std::size_t bound = capped->step_max_encoded_bytes(ctx);
    const auto g = test::random_gradient(n, 100 + step);
    EXPECT_LE(capped->compress(g, ctx, msg), bound) << "step " << step;
    if (step >= 2) {
      EXPECT_EQ(bound, last) << "step " << step << ": after the capped warm-up";
    }
  }
}

TEST(DenseFallback, RejectsWrongSizes) {
  const auto m = builtin_registry().make_memory("ef(topk)", 10);
  std::vector<float> g(10), out(9);
  EXPECT_THROW(m->compress_dense(g, {}, out), InvalidArgument);
}

}  // namespace
}  // namespace gradcomp
