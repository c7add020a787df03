#!/usr/bin/env bash
# The whole test suite on a fresh machine: installs dependencies, builds, runs every
# ctest, then rebuilds the core with AddressSanitizer + UndefinedBehaviorSanitizer
# and runs the core tests under them, then fuzzes every decoder for a short while
# (clang's libFuzzer). Exits non-zero on the first failure.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${GRADCOMP_JOBS:-2}

bash scripts/install-deps.sh

echo "== build (Release)"
bash scripts/build.sh
echo "== tests (Release; label dist: Gloo over 127.0.0.1, well under a minute)"
ctest --test-dir build --output-on-failure -j "$jobs"

echo "== core under ASan+UBSan, with assertions (Eigen's range checks) on"
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGRADCOMP_ASSERTIONS=ON \
  -DGRADCOMP_SANITIZE=address,undefined -DGRADCOMP_BUILD_TOOLS=OFF -DGRADCOMP_BUILD_BENCH=OFF \
  -DGRADCOMP_BUILD_DIST=OFF >/dev/null
cmake --build build-asan -j "$jobs"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure -j "$jobs" -L core

echo "== decoder fuzzing (libFuzzer + ASan/UBSan, ${GRADCOMP_FUZZ_SECONDS:-30} s)"
CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGRADCOMP_BUILD_FUZZ=ON \
  -DGRADCOMP_SANITIZE=fuzzer-no-link,address,undefined -DGRADCOMP_BUILD_TOOLS=OFF -DGRADCOMP_BUILD_BENCH=OFF \
  -DGRADCOMP_BUILD_DIST=OFF >/dev/null
cmake --build build-fuzz -j "$jobs" --target gradcomp_decode_fuzz
mkdir -p build-fuzz/corpus
if ! build-fuzz/bin/gradcomp_decode_fuzz build-fuzz/corpus -max_total_time="${GRADCOMP_FUZZ_SECONDS:-30}" \
    -print_final_stats=1 >build-fuzz/fuzz.log 2>&1; then
  tail -n 60 build-fuzz/fuzz.log
  echo "decoder fuzzing found a failure (log: build-fuzz/fuzz.log)" >&2
  exit 1
fi
grep -E "^Done" build-fuzz/fuzz.log

echo "== all tests passed"
