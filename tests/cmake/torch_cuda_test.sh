#!/usr/bin/env bash
# cmake/GradcompTorchCuda.cmake against stand-ins for torch's CMake package: a CUDA build's
# (whose package stops unless torch::cudart exists or it is handed a toolkit), a CPU build's,
# a LibTorch tree's. The real CUDA wheel is scripts/test-cuda-torch.sh's (5.5 GB); this runs
# the choices in seconds.
# Usage: torch_cuda_test.sh SOURCE_DIR
set -euo pipefail
src=$(cd "$1" && pwd)
work=$(mktemp -d /tmp/gradcomp-torch-cuda.XXXXXX)
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

# torch's install prefix: lib/, share/cmake/Torch/TorchConfig.cmake, and what says its CUDA.
fake_torch() {  # fake_torch DIR (cuda VERSION | cpu | libtorch TAG)
  local dir=$1 kind=$2 what=${3:-}
  mkdir -p "$dir/lib" "$dir/share/cmake/Torch"
  touch "$dir/lib/libtorch.so"
  case $kind in
    cuda) touch "$dir/lib/libtorch_cuda.so"; echo "cuda: Optional[str] = '$what'" >"$dir/version.py"
          mkdir -p "$dir/../nvidia/cu${what%%.*}/lib" ;;
    cpu) echo "cuda: Optional[str] = None" >"$dir/version.py" ;;
    libtorch) touch "$dir/lib/libtorch_cuda.so"; echo "$what" >"$dir/build-version" ;;
  esac
  cat >"$dir/share/cmake/Torch/TorchConfig.cmake" <<'CFG'
# What a CUDA build's Caffe2 cuda.cmake does first.
if(EXISTS "${CMAKE_CURRENT_LIST_DIR}/../../../lib/libtorch_cuda.so")
  if(TARGET torch::cudart)
    message(STATUS "fake torch: runtime given")
  elseif(CUDA_TOOLKIT_ROOT_DIR)
    message(STATUS "fake torch: toolkit ${CUDA_TOOLKIT_ROOT_DIR}, archs [${TORCH_CUDA_ARCH_LIST}]")
    set(CMAKE_CUDA_ARCHITECTURES OFF)
  else()
    message(FATAL_ERROR "Your installed Caffe2 version uses CUDA but I cannot find the CUDA libraries.")
  endif()
endif()
set(Torch_FOUND TRUE)
CFG
}

mkdir -p "$work/probe"
cat >"$work/probe/CMakeLists.txt" <<EOF2
cmake_minimum_required(VERSION 3.24)
project(probe LANGUAGES CXX)
list(APPEND CMAKE_MODULE_PATH "$src/cmake")
include(GradcompTorchCuda)
gradcomp_prepare_cuda_torch("\${Torch_DIR}")
find_package(Torch REQUIRED CONFIG)
gradcomp_finish_cuda_torch()
gradcomp_find_kernel_toolkit()
set(options "")
if(TARGET torch::cudart)
  get_target_property(options torch::cudart INTERFACE_LINK_OPTIONS)
endif()
message(STATUS "probe: cuda=[\${GRADCOMP_TORCH_CUDA}] toolkit=\${GRADCOMP_TORCH_CUDA_TOOLKIT} archs=[\${CMAKE_CUDA_ARCHITECTURES}] options=[\${options}]")
EOF2

n=0
configure() {  # configure PREFIX [CMAKE ARGS...]: the log in $log
  local prefix=$1; shift
  n=$((n + 1))
  log=$work/case$n.log
  cmake -S "$work/probe" -B "$work/build$n" -DTorch_DIR="$prefix/share/cmake/Torch" "$@" >"$log" 2>&1
}
expect() {  # expect WHAT PATTERN: the last configure's log has it
  grep -q -E -- "$2" "$log" || { fail "$1: no /$2/ in:"; grep -E "gradcomp:|probe:|fake torch|Error" "$log" >&2; }
}

# nvcc's CUDA major version here (empty without nvcc): the kernels' toolkit must match torch's.
nvcc_major=$(nvcc --version 2>/dev/null | sed -n 's/.*release \([0-9]*\)\..*/\1/p' || true)

# 1. A CUDA 13.0 wheel, as pip installs it: torch's package is given the runtime, and an
# executable gets the wheel's nvidia/*/lib folders.
fake_torch "$work/site/torch" cuda 13.0
configure "$work/site/torch" || fail "CUDA wheel: configure failed"
expect "CUDA wheel" "fake torch: runtime given"
expect "CUDA wheel" "probe: cuda=\[13.0\]"
expect "CUDA wheel" "options=\[.*-rpath-link,$work/site/nvidia/cu13/lib"
if [ "$nvcc_major" = 13 ]; then
  expect "CUDA wheel, nvcc 13" "toolkit=ON"
  expect "CUDA wheel, nvcc 13" "gradcomp: torch is a CUDA 13.0 build; CUDA toolkit 13\."
else
  expect "CUDA wheel, no nvcc 13" "toolkit=OFF"
fi

# 2. The same without a toolkit: accepted, no kernels, and why.
configure "$work/site/torch" -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON || fail "no toolkit: configure failed"
expect "no toolkit" "fake torch: runtime given"
expect "no toolkit" "toolkit=OFF"
expect "no toolkit" "CMake finds no CUDA toolkit .*: no gradcomp CUDA kernels"

# 3. GRADCOMP_CUDA_KERNELS=OFF: no toolkit looked for.
configure "$work/site/torch" -DGRADCOMP_CUDA_KERNELS=OFF || fail "kernels off: configure failed"
expect "kernels off" "toolkit=OFF"
expect "kernels off" "GRADCOMP_CUDA_KERNELS=OFF: no gradcomp CUDA kernels"

# 4. A toolkit of another CUDA major version than torch's: no kernels.
if [ -n "$nvcc_major" ]; then
  other=$((nvcc_major - 1)).8
  fake_torch "$work/other/torch" cuda "$other"
  configure "$work/other/torch" || fail "other CUDA: configure failed"
  expect "other CUDA" "toolkit=OFF"
  expect "other CUDA" "is not CUDA $((nvcc_major - 1)): no gradcomp CUDA kernels"
fi

# 5. CUDA_TOOLKIT_ROOT_DIR given: torch's own route, with gradcomp's architectures for it and
# the architectures it clears restored.
configure "$work/site/torch" -DCUDA_TOOLKIT_ROOT_DIR=/opt/some-cuda || fail "own route: configure failed"
expect "own route" "fake torch: toolkit /opt/some-cuda, archs \[8.0;9.0\]"
expect "own route" "archs=\[\]"
configure "$work/site/torch" -DCUDA_TOOLKIT_ROOT_DIR=/opt/some-cuda -DCMAKE_CUDA_ARCHITECTURES=86-real \
  || fail "own route, 86: configure failed"
expect "own route, 86" "archs \[8.6\]"
expect "own route, 86" "archs=\[86-real\]"

# 6. A CPU build: untouched.
fake_torch "$work/cpu/torch" cpu
configure "$work/cpu/torch" || fail "CPU torch: configure failed"
expect "CPU torch" "probe: cuda=\[\] toolkit=OFF"
! grep -q "gradcomp: torch is a CUDA" "$log" || fail "CPU torch: called a CUDA build"

# 7. A LibTorch tree says its CUDA in build-version.
fake_torch "$work/libtorch" libtorch "2.14.1+cu126"
configure "$work/libtorch" -DGRADCOMP_CUDA_KERNELS=OFF || fail "LibTorch: configure failed"
expect "LibTorch" "probe: cuda=\[12.6\]"

# 8. Torch_DIR not given: found through CMAKE_PREFIX_PATH, as find_package finds it.
n=$((n + 1)); log=$work/case$n.log
cmake -S "$work/probe" -B "$work/build$n" -DCMAKE_PREFIX_PATH="$work/site/torch" >"$log" 2>&1 \
  || fail "prefix path: configure failed"
expect "prefix path" "fake torch: runtime given"

[ "$failures" = 0 ] || { echo "torch_cuda_test: $failures failed" >&2; exit 1; }
echo "torch_cuda_test: ok ($n configures)"
