#!/usr/bin/env bash
# Configures build-sanitize/, the one sanitizer build that serves the core tests
# (scripts/test.sh) and the fuzzers (scripts/fuzz.sh): clang, ASan + UBSan, and libFuzzer's
# coverage instrumentation (harmless for the tests). Torch-free: the core and its tests.
#   -ffp-contract=off: clang would fuse a*b+c where GCC (ISO mode) does not, and some tests
#     compare kernels bit for bit with scalar references;
#   GRADCOMP_ASSERTIONS keeps assert() (and so Eigen's range checks) on in this optimised
#     build;
#   -gline-tables-only instead of -g: the sanitizers' reports keep their files and lines,
#     and the build compiles in about 3/4 of the time (the factorization stress test's unit
#     40 -> 26 s; docs/measurements/test-command.md).
set -euo pipefail
cd "$(dirname "$0")/.."
CXX=clang++ cmake -S . -B build-sanitize -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS=-ffp-contract=off -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -gline-tables-only -DNDEBUG" \
  -DGRADCOMP_BUILD_FUZZ=ON -DGRADCOMP_ASSERTIONS=ON \
  -DGRADCOMP_SANITIZE=fuzzer-no-link,address,undefined -DGRADCOMP_BUILD_TOOLS=OFF \
  -DGRADCOMP_BUILD_BENCH=OFF -DGRADCOMP_BUILD_DIST=OFF >/dev/null
