#!/usr/bin/env bash
# The whole test suite on a fresh machine: installs dependencies, builds every target in
# build/ against Debian's torch 1.13 (reusing what scripts/run.sh built there) and runs
# every ctest; then the torch 2.x lane (scripts/test-torch2.sh: a pip wheel of torch 2.13.0
# in .venv-torch2, `pip install .` into it, the C++ exchange, Python and installed-package
# tests against it); then builds the core with clang, AddressSanitizer and
# UndefinedBehaviorSanitizer (build-sanitize/), runs the core tests under them and runs
# every fuzz target for a short while (libFuzzer). Exits non-zero on the first failure.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${GRADCOMP_JOBS:-2}
quiet=()
[ -t 1 ] || quiet=(--quiet)  # Ninja: only warnings and errors when logged

bash scripts/install-deps.sh

echo "== build (Release, every target) (at ${SECONDS} s)"
bash scripts/build.sh all
# The Python package is optional for users, not for the test suite: its tests must run.
if ! ls build/python/gradcomp/_C*.so >/dev/null 2>&1; then
  echo "test.sh: the Python package was not built (cmake found no pybind11 or no torch for /usr/bin/python3)" >&2
  exit 1
fi
# One sanitizer build serves the core tests and the fuzzers: clang, ASan + UBSan, and
# libFuzzer's coverage instrumentation (harmless for the tests). -ffp-contract=off: clang
# would fuse a*b+c where GCC (ISO mode) does not, and some tests compare kernels bit for bit
# with scalar references. GRADCOMP_ASSERTIONS keeps assert() (and so Eigen's range checks)
# on in this RelWithDebInfo build. scripts/fuzz.sh configures it identically.
CXX=clang++ cmake -S . -B build-sanitize -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS=-ffp-contract=off -DGRADCOMP_BUILD_FUZZ=ON -DGRADCOMP_ASSERTIONS=ON \
  -DGRADCOMP_SANITIZE=fuzzer-no-link,address,undefined -DGRADCOMP_BUILD_TOOLS=OFF \
  -DGRADCOMP_BUILD_BENCH=OFF -DGRADCOMP_BUILD_DIST=OFF >/dev/null

# Debian's OpenBLAS falls back to its generic Prescott kernels on CPUs it does not know
# (Sapphire Rapids: 2.6x slower matrix products). gradcomp-torch sets OPENBLAS_CORETYPE for
# itself (tools/gradcomp/blas_core.h) and its --version says which; the tests get the same.
if [ -z "${OPENBLAS_CORETYPE:-}" ]; then
  core=$(build/bin/gradcomp-torch --version |
    sed -n 's/.*OPENBLAS_CORETYPE=\([A-Za-z0-9]*\), set by gradcomp.*/\1/p')
  if [ -n "$core" ]; then
    echo "test.sh: OPENBLAS_CORETYPE=$core for the tests (OpenBLAS does not know this CPU)"
    export OPENBLAS_CORETYPE=$core
  fi
fi

echo "== tests (Release) (at ${SECONDS} s)"
ctest --test-dir build --output-on-failure -j "$jobs"

echo "== torch 2.x lane (at ${SECONDS} s)"
bash scripts/test-torch2.sh

# Built after the Release tests, not beside them: beside them, even at nice 19, it slowed
# them more than it saved (a niced process still shares caches and memory bandwidth, and
# the tests sleep and wake often enough to hand it much of the CPU;
# docs/measurements/test-command.md).
echo "== core tests under ASan+UBSan, assertions on (clang; build-sanitize/) (at ${SECONDS} s)"
cmake --build build-sanitize -j "$jobs" --target gradcomp_core_tests -- "${quiet[@]}"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-sanitize --output-on-failure -j "$jobs" -L core

# Every fuzz target (decoders, spec parser, checkpoint reader) a few seconds each, on the
# kept corpus in build-sanitize/corpus/ (scripts/fuzz.sh; longer runs: --seconds N).
echo "== fuzzing (libFuzzer + ASan/UBSan, ${GRADCOMP_FUZZ_SECONDS:-10} s per target) (at ${SECONDS} s)"
bash scripts/fuzz.sh --seconds "${GRADCOMP_FUZZ_SECONDS:-10}"

echo "== all tests passed (at ${SECONDS} s)"
