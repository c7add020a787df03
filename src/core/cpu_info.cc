#include <string>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#endif

#include "gradcomp/cpu.h"

#ifndef GRADCOMP_ISA_TARGET
#define GRADCOMP_ISA_TARGET "unknown"
#endif

namespace gradcomp {

namespace {

// The x86-64 level this translation unit was compiled for (what -march allowed the
// compiler to assume everywhere in the binary).
const char* compiled_level() {
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && defined(__AVX512VL__)
  return "x86-64-v4";
#elif defined(__AVX2__) && defined(__FMA__) && defined(__BMI2__) && defined(__F16C__)
  return "x86-64-v3";
#elif defined(__SSE4_2__) && defined(__POPCNT__) && defined(__SSSE3__)
  return "x86-64-v2";
#elif defined(__x86_64__)
  return "x86-64";
#else
  return "not x86-64";
#endif
}

}  // namespace

std::string isa_built_for() {
  const std::string target = GRADCOMP_ISA_TARGET;
  if (target == compiled_level()) return target;
  return target + " (" + compiled_level() + ")";
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// F16C from CPUID leaf 1 (ECX bit 29): clang 14's __builtin_cpu_supports has no "f16c".
static bool cpu_has_f16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & (1u << 29)) != 0;
}
#endif

int cpu_x86_64_level() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  const bool v2 = __builtin_cpu_supports("sse4.2") && __builtin_cpu_supports("popcnt") &&
                  __builtin_cpu_supports("ssse3");
  const bool v3 = v2 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                  __builtin_cpu_supports("bmi2") && cpu_has_f16c();
  const bool v4 = v3 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                  __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  return v4 ? 4 : v3 ? 3 : v2 ? 2 : 1;
#else
  return 0;
#endif
}

std::string isa_cpu_offers() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  const int v = cpu_x86_64_level();
  std::string level = v == 1 ? "x86-64" : "x86-64-v" + std::to_string(v);
  std::string have, lack;
  auto note = [&](const char* name, bool present) {
    (present ? have : lack) += std::string(" ") + name;
  };
  note("avx2", __builtin_cpu_supports("avx2"));
  note("fma", __builtin_cpu_supports("fma"));
  note("f16c", cpu_has_f16c());
  note("avx512f", __builtin_cpu_supports("avx512f"));
  std::string detail = have.empty() ? "" : have.substr(1);
  if (!lack.empty()) detail += (detail.empty() ? "no" : "; no") + lack;
  return level + " (" + detail + ")";
#else
  return "unknown";
#endif
}

std::string isa_summary() {
  return "built for " + isa_built_for() + "; CPU offers " + isa_cpu_offers();
}

}  // namespace gradcomp
