#!/usr/bin/env bash
# gradcomp installed into a CUDA build of torch, the torch most users have (`pip install
# torch` on Linux), on a machine without a GPU: .venv-torch2-cuda/ (torch 2.14.1+cu130 here,
# scripts/install-deps.sh --cuda-torch). Not part of the test command: the venv is 5.5 GB,
# ~3 GB of it CUDA's libraries from PyPI.
#   1. `pip install .` as a user does (pip's isolated build), with gradcomp's CUDA kernels
#      where nvcc of torch's CUDA major version is (cmake/GradcompTorchCuda.cmake), and every
#      Python test against the installed package (the CUDA ones skip: no GPU);
#   2. scripts/gpu-check.sh's benchmarks (bench_ddp_gpu.py, every variant; bench_device_codecs.py)
#      on the CPU: a script error found here does not cost a GPU session;
#   3. the C++ package built against the same torch, installed, and examples/cpp built
#      against it and run on 2 ranks (tests/cli/install_test.sh);
#   4. a configure as on a machine without a CUDA toolkit (CMake told not to find one):
#      torch's CMake package must accept it, and gradcomp must build no kernels.
#   usage: scripts/test-cuda-torch.sh     env: GRADCOMP_JOBS (default 2)
set -euo pipefail
cd "$(dirname "$0")/.."
export CMAKE_BUILD_PARALLEL_LEVEL=${GRADCOMP_JOBS:-2}

bash scripts/install-deps.sh --cuda-torch
py=$PWD/.venv-torch2-cuda/bin/python
read -r version cuda < <("$py" -c 'import torch; print(torch.__version__, torch.version.cuda)')
[ "$cuda" != None ] || { echo "test-cuda-torch: $py's torch $version is not a CUDA build" >&2; exit 1; }
# The kernels are expected where nvcc's major version is torch's.
nvcc_cuda=$(nvcc --version 2>/dev/null | sed -n 's/.*release \([0-9]*\)\..*/\1/p' || true)
expect_kernels=0
[ "$nvcc_cuda" = "${cuda%%.*}" ] && expect_kernels=1

# CMake's lines about gradcomp's choices.
choices() { sed -n 's/.*-- \(gradcomp: .*\)/\1/p' "$1" | sort -u; }
logs=build-cuda-torch-logs
mkdir -p "$logs"

echo "== torch $version: pip install . (build-cuda-torch/) (at ${SECONDS} s)"
log=$logs/pip.log
if ! "$py" -m pip install -v --disable-pip-version-check --no-deps \
     --config-settings=build-dir=build-cuda-torch . >"$log" 2>&1; then
  grep -v "^WARNING: Location" "$log" | tail -40 >&2
  echo "test-cuda-torch: pip install failed (whole log: $log)" >&2
  exit 1
fi
choices "$log"
(cd /tmp && "$py" -c "import gradcomp, gradcomp.torch; \
assert 'site-packages' in gradcomp.__file__, gradcomp.__file__; \
print('installed:', gradcomp.__file__, 'CUDA kernels:', gradcomp.cuda_kernels_built())")

echo "== torch $version: Python tests against the installed package (at ${SECONDS} s)"
GRADCOMP_EXPECT_CUDA_KERNELS=$expect_kernels "$py" -m pytest -q -p no:cacheprovider tests/python

echo "== torch $version: gpu-check.sh's benchmarks, every variant, on the CPU (at ${SECONDS} s)"
# A script error found here does not cost a GPU session: the DDP variants (hooks, batches,
# amp, scatter, the profiler) on ResNet-18 for one step, and the codecs on a small bucket.
"$py" scripts/bench_ddp_gpu.py --device cpu --models resnet18:2 --steps 1 --warmup 1 \
  --json "$logs/ddp-smoke.json" --profile "$logs/ddp-smoke-profile.txt" >"$logs/ddp-smoke.log" 2>&1 \
  || { tail -30 "$logs/ddp-smoke.log" >&2; echo "test-cuda-torch: bench_ddp_gpu.py failed" >&2; exit 1; }
"$py" -c "import json, sys; rec = json.load(open(sys.argv[1])); r = rec['results']; \
assert len(r) == len(rec['variants']) and all(x['step_seconds'] > 0 for x in r), r; \
print(len(r), 'DDP variants ran')" "$logs/ddp-smoke.json"
"$py" scripts/bench_device_codecs.py --device cpu --elements 100003 --reps 2 \
  --json "$logs/codecs-smoke.json" >"$logs/codecs-smoke.log" 2>&1 \
  || { tail -30 "$logs/codecs-smoke.log" >&2; echo "test-cuda-torch: bench_device_codecs.py failed" >&2; exit 1; }

echo "== torch $version: the C++ package and examples/cpp (build-cuda-torch-pkg/) (at ${SECONDS} s)"
cmake -S . -B build-cuda-torch-pkg -G Ninja -DCMAKE_BUILD_TYPE=Release -DGRADCOMP_TORCH_PYTHON="$py" \
  -DGRADCOMP_BUILD_TESTS=OFF -DGRADCOMP_BUILD_BENCH=OFF -DGRADCOMP_BUILD_TOOLS=OFF \
  -DGRADCOMP_BUILD_PYTHON=OFF >$logs/pkg.log 2>&1 \
  || { tail -40 $logs/pkg.log >&2; exit 1; }
cmake --build build-cuda-torch-pkg -- --quiet
bash tests/cli/install_test.sh "$PWD/build-cuda-torch-pkg" "$PWD" ""

echo "== torch $version: configured as without a CUDA toolkit (build-cuda-torch-notk/) (at ${SECONDS} s)"
rm -rf build-cuda-torch-notk
cmake -S . -B build-cuda-torch-notk -G Ninja -DGRADCOMP_TORCH_PYTHON="$py" \
  -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON -DGRADCOMP_BUILD_TESTS=OFF -DGRADCOMP_BUILD_BENCH=OFF \
  -DGRADCOMP_BUILD_TOOLS=OFF >$logs/notk.log 2>&1 \
  || { tail -40 $logs/notk.log >&2; exit 1; }
choices $logs/notk.log
grep -q "no gradcomp CUDA kernels" $logs/notk.log && ! grep -q "CUDA kernels for" $logs/notk.log \
  || { echo "test-cuda-torch: without a toolkit, the kernels were configured anyway" >&2; exit 1; }

echo "== torch $version (CUDA build) passed (at ${SECONDS} s)"
