#include "blas_core.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "gradcomp/cpu.h"
#include "train/blas_core_env.h"

namespace gradcomp::cli {

std::string blas_core_to_use() {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return "";
  using GetCorename = char* (*)();
  auto* corename = reinterpret_cast<GetCorename>(::dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  const char* core = corename != nullptr ? corename() : nullptr;
  if (core == nullptr || std::strcmp(core, "Prescott") != 0) return "";
  const int level = cpu_x86_64_level();
  return level >= 4 ? "SkylakeX" : level == 3 ? "Haswell" : "";
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
