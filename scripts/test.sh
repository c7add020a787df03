#!/usr/bin/env bash
# The whole test suite on a fresh machine: installs dependencies, builds, runs every
# ctest, then rebuilds the core with AddressSanitizer + UndefinedBehaviorSanitizer
# and runs the core tests under them. Exits non-zero on the first failure.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${GRADCOMP_JOBS:-2}

bash scripts/install-deps.sh

echo "== build (Release)"
bash scripts/build.sh
echo "== tests (Release)"
ctest --test-dir build --output-on-failure -j "$jobs"

echo "== core under ASan+UBSan"
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DGRADCOMP_SANITIZE=address,undefined -DGRADCOMP_BUILD_TOOLS=OFF -DGRADCOMP_BUILD_BENCH=OFF >/dev/null
cmake --build build-asan -j "$jobs"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure -j "$jobs" -L core

echo "== all tests passed"
