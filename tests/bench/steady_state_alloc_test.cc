// "Nothing allocates per call in steady state": for every codec spec, after a few
// warm-up steps, compressing (with the spec's memory) and decoding fresh gradients
// makes no heap allocation. The allocation counter of gradcomp_benchlib replaces the
// global operator new in this binary; scratch buffers go through it too.
#include <gtest/gtest.h>

#include "bench/alloc_counter.h"
#include "gradcomp/registry.h"
#include "support/test_support.h"

namespace gradcomp {
namespace {

class SteadyState : public ::testing::TestWithParam<std::string> {};

TEST_P(SteadyState, CompressAndDecodeAllocateNothingAfterWarmUp) {
  // Above the kernels' OpenMP thresholds, and odd, so every path runs.
  const std::size_t n = 100003;
  auto memory = builtin_registry().make_memory(GetParam(), n);
  std::vector<std::byte> msg(memory->max_encoded_bytes());
  std::vector<float> out(n, 0.0f);
  constexpr int kWarmUp = 4, kMeasured = 8;
  std::vector<std::vector<float>> grads;
  for (int s = 0; s < kWarmUp + kMeasured; ++s) {
    grads.push_back(test::random_gradient(n, static_cast<std::uint64_t>(s) + 100));
  }

  std::uint64_t before = 0;
  for (int s = 0; s < kWarmUp + kMeasured; ++s) {
    if (s == kWarmUp) before = bench::allocation_count();
    const StepContext ctx{.seed = 1, .step = static_cast<std::uint64_t>(s), .rank = 0, .bucket = 0};
    const std::size_t bytes = memory->compress(grads[static_cast<std::size_t>(s)], ctx, msg);
    memory->codec().decode_add({msg.data(), bytes}, out);
  }
  EXPECT_EQ(bench::allocation_count() - before, 0u)
      << "allocations in " << kMeasured << " steady-state steps";
}

INSTANTIATE_TEST_SUITE_P(AllCodecs, SteadyState, ::testing::ValuesIn(test::all_codec_specs()),
                         [](const auto& p) { return test::spec_test_name(p.param); });

}  // namespace
}  // namespace gradcomp
