#!/usr/bin/env bash
# The torch 2.x lane of the test suite (scripts/test.sh runs it after Debian's 1.13 lane):
# gradcomp built against a pip wheel of torch in .venv-torch2 (scripts/install-deps.sh
# --torch2), as a user with their own torch builds it.
#   1. C++: gradcomp_dist, the exchange and their tests against the wheel's LibTorch
#      (build-torch2/): the communicator, reducers, schemes, dead peers, GradientExchange,
#      the device codecs on CPU tensors; the CUDA kernels compiled with the machine's nvcc;
#   2. Python: `pip install --no-build-isolation .` into the venv (reusing build-torch2/, so
#      nothing compiles twice), then every Python test against the installed package;
#   3. the installed C++ package: examples/cpp built with find_package(Torch) +
#      find_package(gradcomp) and run on 2 ranks.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${GRADCOMP_JOBS:-2}
quiet=()
[ -t 1 ] || quiet=(--quiet)
venv=.venv-torch2
py=$PWD/$venv/bin/python

bash scripts/install-deps.sh --torch2
version=$("$py" -c 'import torch; print(torch.__version__)')

echo "== torch $version: build (build-torch2/) (at ${SECONDS} s)"
# -U SKBUILD*: a tree that pip's build (step 2) configured last keeps its markers.
# The device codecs' CUDA kernels compile and link wherever nvcc is (this torch is a CPU
# build, so AUTO would skip them); nothing runs them without a GPU (scripts/gpu-check.sh).
cuda_kernels=OFF
if command -v nvcc >/dev/null; then cuda_kernels=ON; fi
cmake -S . -B build-torch2 -G Ninja -DCMAKE_BUILD_TYPE=Release -U 'SKBUILD*' \
  -DGRADCOMP_TORCH_PYTHON="$py" -DGRADCOMP_BUILD_TESTS=ON -DGRADCOMP_BUILD_TOOLS=OFF \
  -DGRADCOMP_BUILD_BENCH=OFF -DGRADCOMP_BUILD_PYTHON=ON -DGRADCOMP_CUDA_KERNELS=$cuda_kernels >/dev/null
cmake --build build-torch2 -j "$jobs" --target gradcomp_dist_tests gradcomp_torch_tests gradcomp_device_tests \
  gradcomp_python -- "${quiet[@]}"

echo "== torch $version: C++ exchange and communicator tests (at ${SECONDS} s)"
ctest --test-dir build-torch2 --output-on-failure -j "$jobs" -L dist

echo "== torch $version: pip install --no-build-isolation . (at ${SECONDS} s)"
"$py" -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps \
  --config-settings=build-dir=build-torch2 . 2>&1 | grep -v "^WARNING: Location" || true
# Imported from the venv's site-packages, not from a build tree.
(cd /tmp && "$py" -c "import gradcomp.torch, gradcomp, sys; \
assert 'site-packages' in gradcomp.__file__, gradcomp.__file__; print('installed:', gradcomp.__file__)")

echo "== torch $version: Python tests against the installed package (at ${SECONDS} s)"
GRADCOMP_EXPECT_CUDA_KERNELS=$([ "$cuda_kernels" = ON ] && echo 1 || echo 0) \
  "$py" -m pytest -q -p no:cacheprovider tests/python

echo "== torch $version: the installed C++ package and examples/cpp (at ${SECONDS} s)"
bash tests/cli/install_test.sh build-torch2 "$PWD"

echo "== torch $version lane passed (at ${SECONDS} s)"
