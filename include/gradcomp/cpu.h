// The instruction set a binary was built for and the one the CPU running it offers,
// for the run headers of `gradcomp train` and `gradcomp bench codec`: a benchmark figure
// means little without both (a portable x86-64-v2 build on an AVX-512 machine runs its
// hot kernels through runtime dispatch, a -march=native build does not run elsewhere).
#pragma once

#include <string>

namespace gradcomp {

// "x86-64-v2" (the GRADCOMP_ARCH baseline) or "native (x86-64-v3: ...)" for a
// GRADCOMP_NATIVE build, with the level the compiler was allowed to assume.
std::string isa_built_for();

// The highest x86-64 level the CPU supports and its vector extensions, e.g.
// "x86-64-v3 (avx2 fma f16c; no avx512f)".
std::string isa_cpu_offers();

// The same level as a number: 1 (baseline x86-64) to 4 (x86-64-v4: AVX-512 F/BW/DQ/VL);
// 0 off x86-64.
int cpu_x86_64_level();

// One line for a run header: "ISA: built for x86-64-v2; CPU offers x86-64-v3 (...)".
std::string isa_summary();

// The most threads a trainer, evaluator or benchmark runs (intra-op, OpenMP, BLAS): far
// above any machine's cores (the largest hosts have a few hundred hardware threads), far
// below what libgomp can start (100000 threads crash it inside GOMP_parallel).
inline constexpr int kMaxThreads = 1024;

}  // namespace gradcomp
