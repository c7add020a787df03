#!/usr/bin/env bash
# gradcomp against Debian's own torch 1.13 (libtorch-dev, python3-torch under
# /usr/bin/python3), the torch waves 1 and 2 were built on: every target in build-debian/
# and every ctest, the Python tests with /usr/bin/python3 included. Not part of the test
# command (scripts/test.sh tests the torch 2.x pip wheel); about 20 minutes on 2 cores
# from an empty compiler cache.
#   usage: scripts/test-debian-torch.sh     env: GRADCOMP_JOBS (default 2)
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${GRADCOMP_JOBS:-2}
quiet=()
[ -t 1 ] || quiet=(--quiet)

bash scripts/install-deps.sh --debian-torch
version=$(/usr/bin/python3 -c 'import torch; print(torch.__version__)')
echo "== torch $version (Debian): build (build-debian/) (at ${SECONDS} s)"
# No GRADCOMP_TORCH_PYTHON: find_package(Torch) finds Debian's package alone, and the
# Python package is built for /usr/bin/python3 (CMakeLists.txt).
cmake -S . -B build-debian -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build-debian -j "$jobs" -- "${quiet[@]}"

# Debian's OpenBLAS falls back to its generic kernels on CPUs it does not know; the tests
# get the core gradcomp-torch picks (scripts/test.sh).
if [ -z "${OPENBLAS_CORETYPE:-}" ]; then
  core=$(bash scripts/openblas-core.sh build-debian/bin/gradcomp-torch)
  [ -z "$core" ] || export OPENBLAS_CORETYPE=$core
fi

echo "== torch $version (Debian): every test (at ${SECONDS} s)"
ctest --test-dir build-debian --output-on-failure -j "$jobs"
echo "== torch $version (Debian) passed (at ${SECONDS} s)"
