#include "blas_core.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "train/blas_core_env.h"

namespace gradcomp::cli {

namespace {

bool cpu_has(const char* feature) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  if (std::strcmp(feature, "avx512") == 0) {
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512cd");
  }
  if (std::strcmp(feature, "avx2") == 0) {
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }
#else
  (void)feature;
#endif
  return false;
}

}  // namespace

std::string blas_core_to_use() {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return "";
  using GetCorename = char* (*)();
  auto* corename = reinterpret_cast<GetCorename>(::dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  if (corename == nullptr || corename() == nullptr) return "";
  if (std::strcmp(corename(), "Prescott") != 0) return "";
  if (cpu_has("avx512")) return "SkylakeX";
  if (cpu_has("avx2")) return "Haswell";
  return "";
}

void rerun_with_a_known_blas_core(char** argv) {
  const std::string core = blas_core_to_use();
  if (core.empty()) return;
  // Silent: a bad flag must still get one line. The run header's BLAS line says it
  // (train::describe_blas), and so does `gradcomp-torch --version`.
  if (::setenv("OPENBLAS_CORETYPE", core.c_str(), 1) != 0 ||
      ::setenv(train::kBlasCoreSetByGradcomp, "1", 1) != 0) {
    return;
  }
  ::execv("/proc/self/exe", argv);
  // Not replaced: go on with the slow kernels, and say nothing was set.
  ::unsetenv("OPENBLAS_CORETYPE");
  ::unsetenv(train::kBlasCoreSetByGradcomp);
}

}  // namespace gradcomp::cli
