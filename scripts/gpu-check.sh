#!/usr/bin/env bash
# The GPU check (issue 30), one prepared run on a lent GPU machine (H100 or H200; PyTorch
# 2.11 + CUDA 13, Python 3.12, CMake, ninja, nvcc, pybind11; no network), in under 8 min:
#   1. builds the package against that machine's torch (`pip install --no-build-isolation .`)
#      with what .gpu-carry/ brings (scripts/gpu-carry.sh, run here first);
#   2. runs the device and CUDA tests (tests/python: the device codecs against the CPU
#      codec on CUDA tensors; the hook on CUDA buckets, 2 ranks sharing the GPU over Gloo, a
#      world of one over cpu:gloo,cuda:nccl and one over nccl alone); the CPU tests run in
#      CI's torch 2.x lane;
#   3. times each device codec on a 100 M-element bucket against the copy bandwidth and
#      torch.topk (scripts/bench_device_codecs.py);
#   4. times DDP alone against DDP + hooks on ResNet-50 and AlexNet (scripts/bench_ddp_gpu.py);
#   5. runs examples/cpp's LibTorch model on the GPU through the installed C++ package
#      (GradientExchange with CUDA parameters).
# Every phase runs even if an earlier one failed (a later one may still say something);
# the exit status is the first failure's. Arguments name the phases after the build to run
# (tests codecs ddp libtorch, and profile, which only runs when named; default the four); GPU_CHECK_TESTS replaces the test selection
# (test files, relative to tests/python) and GPU_CHECK_K adds a pytest -k expression, e.g.
# for a short second run:
#   GPU_CHECK_K="not world_of_one and not nccl_only" bash scripts/gpu-check.sh tests codecs ddp Logs and JSON records go to $OUT (the device
# tool's folder; ./gpu-check-out elsewhere): copy them to docs/measurements/gpu/.
#
#   here:   bash scripts/gpu-carry.sh
#   device: run(command="bash scripts/gpu-check.sh", carry=[".gpu-carry"], timeout_s=540)
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-$PWD/gpu-check-out}
mkdir -p "$out"
py=${GRADCOMP_GPU_PYTHON:-python3}
carry=$PWD/.gpu-carry
status=0
phases=" ${*:-tests codecs ddp libtorch} "
wanted() { [[ "$phases" == *" $1 "* ]]; }
phase() { echo; echo "== $* (at ${SECONDS} s)"; }
fail() { echo "!! $* failed (at ${SECONDS} s)"; [ "$status" -ne 0 ] || status=1; }

phase "machine"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv,noheader || true
"$py" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "device", torch.cuda.get_device_name() if torch.cuda.is_available() else None)'
{ nvcc --version | tail -1; g++ --version | head -1; cmake --version | head -1; nproc; } 2>&1

phase "build: pip install --no-build-isolation . against this torch"
[ -d "$carry" ] || { echo "no .gpu-carry/: run scripts/gpu-carry.sh here and carry it"; exit 2; }
for l in liblapack.so:liblapack.so.3 libblas.so:libblas.so.3 libz.so:libz.so.1; do
  [ -e "$carry/lib/${l%%:*}" ] || ln -sf "${l##*:}" "$carry/lib/${l%%:*}"
done
export LD_LIBRARY_PATH=$carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export CMAKE_BUILD_PARALLEL_LEVEL=$(nproc)
# What a user's `pip install .` does with a CUDA torch: torch's CMake package gets no CUDA
# toolkit, gradcomp's kernels get the machine's nvcc (cmake/GradcompTorchCuda.cmake; AUTO:
# on where nvcc's CUDA major version is torch's), compiled for this GPU only.
export CUDAARCHS=${CUDAARCHS:-90}
# The machine's own packages first where it has them; the carried prefix otherwise.
export SKBUILD_CMAKE_ARGS="-DCMAKE_PREFIX_PATH=$carry;-DCMAKE_LIBRARY_PATH=$carry/lib;-DCMAKE_INCLUDE_PATH=$carry/include"
# pip_build LOG [CMAKE ARGS...]: the package into this Python, in build-gpu/.
pip_build() {
  local log=$1; shift
  local args=$SKBUILD_CMAKE_ARGS
  for a in "$@"; do args="$args;$a"; done
  SKBUILD_CMAKE_ARGS=$args timeout 270 "$py" -m pip install --no-build-isolation --no-deps \
    --no-index -v --config-settings=build-dir=build-gpu . > "$log" 2>&1
}
built() {  # built LOG [kernels]: what was built; with `kernels`, they must be in it
  sed -n 's/.*-- \(gradcomp: .*\)/\1/p' "$1" | sort -u  # CMake's choices
  (cd /tmp && "$py" -c "import gradcomp, gradcomp.torch; print('built:', gradcomp.__file__, 'device codecs:', gradcomp.device_codec_names(), 'CUDA kernels:', gradcomp.cuda_kernels_built())")
  if [ "${2:-}" = kernels ] && ! (cd /tmp && "$py" -c "import sys, gradcomp; sys.exit(not gradcomp.cuda_kernels_built())"); then
    fail "a build with the CUDA kernels (CMake left them out)"
  fi
}
nvcc_root=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")" 2>/dev/null || true)
if pip_build "$out/build.log"; then
  built "$out/build.log" kernels
else
  # Said, then the route runs 3-5 built by (torch's package handed the toolkit as
  # CUDA_TOOLKIT_ROOT_DIR), then the user's route without gradcomp's kernels (the ATen path).
  tail -30 "$out/build.log"; fail "build as a user's pip install . does"
  if pip_build "$out/build-toolkit.log" "-DCUDA_TOOLKIT_ROOT_DIR=$nvcc_root"; then
    built "$out/build-toolkit.log" kernels
  elif pip_build "$out/build-aten.log" -DCUDA_TOOLKIT_ROOT_DIR= -DGRADCOMP_CUDA_KERNELS=OFF; then
    tail -30 "$out/build-toolkit.log"; fail "build with the CUDA kernels"
    built "$out/build-aten.log"
  else
    tail -40 "$out/build-aten.log"; fail "build"; exit 1
  fi
fi

export PYTHONUNBUFFERED=1
export GRADCOMP_EXAMPLE_DATA=$carry/fashion-mnist  # the examples' data (a cut of Fashion-MNIST)
if wanted tests; then
  phase "device and CUDA tests"
  cuda_tests="test_device_codec.py test_hook_cuda.py test_diloco_cuda.py
    test_examples.py::test_the_ddp_example_trains_on_cuda_in_a_world_of_one_over_nccl
    test_examples.py::test_the_diloco_example_trains_on_cuda"
  # shellcheck disable=SC2086  # GPU_CHECK_TESTS is a list of pytest arguments
  (cd tests/python && timeout 240 "$py" -m pytest -q -p no:cacheprovider -rs ${GPU_CHECK_K:+-k "$GPU_CHECK_K"} \
     ${GPU_CHECK_TESTS:-$cuda_tests} 2>&1 | tee "$out/tests-cuda.log" | tail -25) \
    || fail "device and CUDA tests"
  grep -q -E "[0-9]+ passed" "$out/tests-cuda.log" && ! grep -q -E "[0-9]+ (failed|error)" "$out/tests-cuda.log" \
    || fail "device and CUDA tests"
fi

if wanted codecs; then
  phase "device codecs: 100 M elements against the copy bandwidth and torch.topk"
  timeout 90 "$py" scripts/bench_device_codecs.py --elements 100000000 --reps 10 \
    --json "$out/device-codecs.json" --jsonl "$out/device-codecs.jsonl" 2>&1 | tee "$out/device-codecs.log" | tail -26 \
    || fail "device codec benchmark"
fi

if wanted ddp; then
  phase "DDP alone against DDP + hooks (ResNet-50, AlexNet)"
  timeout 150 "$py" scripts/bench_ddp_gpu.py --models resnet50:64,alexnet:128 --steps 15 --warmup 5 \
    --json "$out/ddp-hooks.json" 2>&1 | tee "$out/ddp-hooks.log" | tail -18 || fail "DDP benchmark"
fi

if wanted profile; then
  phase "profile: where a ResNet-50 step's hook time goes (torch.profiler)"
  timeout 90 "$py" scripts/bench_ddp_gpu.py --models resnet50:64 --steps 5 --warmup 3 \
    --specs "efm(topk:ratio=0.01);efm(topk:ratio=0.01)@perbucket;2bit;2bit@perbucket;int@scatter;int@scatter+perbucket" --profile "$out/profile.txt" > "$out/profile.log" 2>&1 \
    && tail -6 "$out/profile.log" || { tail -20 "$out/profile.log"; fail "profile"; }
fi

if wanted libtorch; then
  phase "LibTorch GradientExchange on CUDA parameters (examples/cpp, 2 ranks sharing the GPU)"
  # The C++ package installed from the same build, examples/cpp built against it and run with
  # its model on the GPU (tests/cli/install_test.sh, as CI runs it on the CPU).
  if timeout 150 cmake --build build-gpu --target gradcomp_torch > "$out/libtorch-cuda.log" 2>&1 \
     && CMAKE_PREFIX_PATH=$carry GRADCOMP_EXAMPLE_DEVICE=cuda timeout 150 \
        bash tests/cli/install_test.sh "$PWD/build-gpu" "$PWD" "" >> "$out/libtorch-cuda.log" 2>&1; then
    tail -2 "$out/libtorch-cuda.log"
  else
    tail -25 "$out/libtorch-cuda.log"; fail "LibTorch on CUDA"
  fi
fi

phase "done, status $status"
exit $status
