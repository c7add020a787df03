#!/usr/bin/env bash
# Builds tests/device/cuda_check.cc against the python3's (CUDA) torch with plain g++, no
# CMake (a GPU machine may lack the project's other dependencies: GTest, LAPACK), and runs
# it: the device codecs on CUDA against the CPU codecs, and their speed.
# Usage: scripts/device_cuda_check.sh [EIGEN_INCLUDE_DIR] [device] [n]
set -euo pipefail
cd "$(dirname "$0")/.."
EIGEN=${1:-/usr/include/eigen3}
T=$(python3 -c 'import torch, os; print(os.path.dirname(torch.__file__))')
ABI=$(python3 -c 'import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))')
B=${BUILD:-/tmp/cuda_check}
mkdir -p "$B"
# LAPACK is only reached by powersgd's SVD: stubs keep the link free of it.
printf 'extern "C" { void sgesdd_() { __builtin_trap(); } void sgesvd_() { __builtin_trap(); } }\n' > "$B/lapack_stub.cc"
FLAGS="-std=c++20 -O2 -fopenmp -DGRADCOMP_OPENMP=1 -D_GLIBCXX_USE_CXX11_ABI=$ABI -Iinclude -Isrc/core -I$EIGEN -I$T/include -I$T/include/torch/csrc/api/include"
srcs=$(ls src/core/*.cc src/core/*/*.cc src/device/*.cc src/device/codecs/*.cc tests/device/cuda_check.cc "$B/lapack_stub.cc")
echo "$srcs" | xargs -P "$(nproc)" -I{} sh -c 'g++ '"$FLAGS"' -c {} -o '"$B"'/$(echo {} | tr / _).o'
g++ -fopenmp "$B"/*.o -o "$B/cuda_check" -L"$T/lib" -Wl,--no-as-needed -ltorch -ltorch_cpu \
  $( [ -e "$T/lib/libtorch_cuda.so" ] && echo -ltorch_cuda -lc10_cuda ) -lc10 -Wl,-rpath,"$T/lib"
"$B/cuda_check" "${2:-cuda}" "${3:-100000000}"
