// Debian 12's OpenBLAS (0.3.21, DYNAMIC_ARCH) does not know Intel's Sapphire Rapids and
// later CPUs: it falls back to its generic Prescott (SSE3) kernels, and the MLP's step ran
// 2.6x slower than with the AVX-512 kernels the CPU can run (89 against 34 ms; the run
// headers' "BLAS ... Prescott"). OpenBLAS reads OPENBLAS_CORETYPE when it loads, which
// for gradcomp-torch is before main(): so the binary re-executes itself once with it set.
#pragma once

#include <string>

namespace gradcomp::cli {

// The OPENBLAS_CORETYPE this process should have run with, or "" when there is nothing to
// fix: OpenBLAS is not loaded, it picked a core of its own, OPENBLAS_CORETYPE is already
// set (the user's choice stands), or the CPU is below x86-64-v3 (gradcomp/cpu.h).
// "SkylakeX" on x86-64-v4 (AVX-512), "Haswell" on v3 (AVX2, FMA).
std::string blas_core_to_use();

// If blas_core_to_use() names a core: sets OPENBLAS_CORETYPE (and
// train::kBlasCoreSetByGradcomp, which the run header's BLAS line reports) and re-executes
// this binary with the same arguments; worker processes it starts inherit both. Returns only
// when there is nothing to do or the exec failed (then it goes on with the slow kernels).
void rerun_with_a_known_blas_core(char** argv);

}  // namespace gradcomp::cli
