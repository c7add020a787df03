#!/usr/bin/env bash
# The whole test suite on a fresh machine (what CI runs). Exits non-zero on the first
# failure.
#   1. installs dependencies: Debian's packages and .venv-torch2, a pip wheel of torch 2.x
#      (scripts/install-deps.sh --torch2);
#   2. builds every target in build/ against that torch (scripts/build.sh all, reusing what
#      scripts/run.sh built there): the core, the exchange, the device codecs (their CUDA
#      kernels compiled wherever nvcc is), the CLI trainer, the benchmarks, the Python
#      extension, the tests;
#   3. runs every ctest but the Python one: core, CLI end to end, trainer, exchange and
#      communicator, device codecs on CPU tensors, the installed C++ package with
#      examples/cpp on 2 ranks, the network lab;
#   4. `pip install .` into the venv, as a user with their own torch does (reusing build/,
#      so nothing compiles twice), and every Python test against the installed package;
#   5. builds the core with clang, AddressSanitizer and UndefinedBehaviorSanitizer
#      (build-sanitize/), runs the core tests under them and runs every fuzz target for a
#      short while (libFuzzer).
# Debian's torch 1.13 is tested by scripts/test-debian-torch.sh, outside this command.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${GRADCOMP_JOBS:-2}
quiet=()
[ -t 1 ] || quiet=(--quiet)  # Ninja: only warnings and errors when logged

bash scripts/install-deps.sh --torch2
py=$PWD/.venv-torch2/bin/python
version=$("$py" -c 'import torch; print(torch.__version__)')

echo "== build (Release, every target, torch $version) (at ${SECONDS} s)"
bash scripts/build.sh all
# The Python package is optional for users, not for the test suite: its tests must run.
if ! ls build/python/gradcomp/_C*.so >/dev/null 2>&1; then
  echo "test.sh: the Python package was not built (cmake found no pybind11 headers for $py's torch)" >&2
  exit 1
fi
cuda_kernels=$(sed -n 's/^GRADCOMP_CUDA_KERNELS:STRING=//p' build/CMakeCache.txt)
# The core tests under the sanitizers and the fuzzers share build-sanitize/.
bash scripts/configure-sanitize.sh

# Debian's OpenBLAS (the core's LAPACK) falls back to its generic Prescott kernels on CPUs
# it does not know (Sapphire Rapids: 2.6x slower matrix products). gradcomp-torch sets
# OPENBLAS_CORETYPE for itself (tools/gradcomp/blas_core.h) and its --version says which;
# the tests get the same.
if [ -z "${OPENBLAS_CORETYPE:-}" ]; then
  core=$(bash scripts/openblas-core.sh build/bin/gradcomp-torch)
  if [ -n "$core" ]; then
    echo "test.sh: OPENBLAS_CORETYPE=$core for the tests (OpenBLAS does not know this CPU)"
    export OPENBLAS_CORETYPE=$core
  fi
fi

echo "== tests (Release) (at ${SECONDS} s)"
# The Python tests run once, below, against the installed package.
ctest --test-dir build --output-on-failure -j "$jobs" -LE python

echo "== pip install . into .venv-torch2 (at ${SECONDS} s)"
# As a user installs it: pip's isolated build (scikit-build-core from .wheelhouse/, which
# install-deps.sh filled from PyPI: nothing is downloaded here), against the
# venv's torch (cmake/GradcompTorch.cmake looks past the isolation). build/ as pip's build
# folder, configured as build.sh configured it (pyproject.toml's defaults would drop the
# tests and the CLI from it): pip compiles nothing, and installs what was just tested.
# build.sh clears pip's SKBUILD markers on its next configure.
"$py" -m pip install -q --disable-pip-version-check --no-deps \
  --no-index --find-links .wheelhouse \
  --config-settings=build-dir=build \
  --config-settings=cmake.define.GRADCOMP_BUILD_TESTS=ON \
  --config-settings=cmake.define.GRADCOMP_BUILD_TOOLS=ON \
  --config-settings=cmake.define.GRADCOMP_BUILD_BENCH=ON \
  --config-settings=cmake.define.GRADCOMP_CUDA_KERNELS="$cuda_kernels" \
  . 2>&1 | { grep -v "^WARNING: Location" || true; }
# Imported from the venv's site-packages, not from a build tree.
(cd /tmp && "$py" -c "import gradcomp.torch, gradcomp, sys; \
assert 'site-packages' in gradcomp.__file__, gradcomp.__file__; print('installed:', gradcomp.__file__)")

echo "== Python tests against the installed package (at ${SECONDS} s)"
GRADCOMP_EXPECT_CUDA_KERNELS=$([ "$cuda_kernels" = ON ] && echo 1 || echo 0) \
  "$py" -m pytest -q -p no:cacheprovider tests/python

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
