// The run headers' instruction-set line (gradcomp/cpu.h).
#include "gradcomp/cpu.h"

#include <gtest/gtest.h>

#include <string>

namespace gradcomp {
namespace {

int level(const std::string& s) {
  if (s.starts_with("x86-64-v4")) return 4;
  if (s.starts_with("x86-64-v3")) return 3;
  if (s.starts_with("x86-64-v2")) return 2;
  if (s.starts_with("x86-64")) return 1;
  return 0;
}

TEST(CpuInfo, BuiltForNamesTheConfiguredTarget) {
  EXPECT_TRUE(isa_built_for().starts_with(GRADCOMP_ISA_TARGET)) << isa_built_for();
}

TEST(CpuInfo, TheCpuOffersAtLeastWhatTheBinaryNeeds) {
  // This test runs, so the CPU executes the binary's instructions: its level is at
  // least the compiled one (which isa_built_for states, in parentheses for native).
  const std::string built = isa_built_for();
  const auto open = built.find('(');
  const std::string compiled = open == std::string::npos ? built : built.substr(open + 1);
  EXPECT_GE(level(isa_cpu_offers()), level(compiled)) << built << " vs " << isa_cpu_offers();
  EXPECT_NE(isa_summary().find("CPU offers"), std::string::npos);
}

}  // namespace
}  // namespace gradcomp
