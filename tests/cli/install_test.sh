#!/usr/bin/env bash
# The installed package: `cmake --install` into a temporary prefix, then examples/cpp (a
# project of its own, find_package(gradcomp)) configured, built and run on 2 ranks
# against it, and the Python package imported from it.
# Usage: install_test.sh BUILD_DIR SOURCE_DIR [PYTHON]
set -euo pipefail
build=$1
src=$2
py=${3:-}
work=$(mktemp -d /tmp/gradcomp-install.XXXXXX)
trap 'rm -rf "$work"' EXIT

cmake --install "$build" --prefix "$work/prefix" >/dev/null
test -f "$work/prefix/lib/cmake/gradcomp/gradcompConfig.cmake"
test -f "$work/prefix/include/gradcomp/torch/gradient_exchange.h"
test -f "$work/prefix/include/gradcomp/device/reducer.h"
grep -q "gradcomp::device" "$work/prefix/lib/cmake/gradcomp/gradcompTargets.cmake"

# The torch the build used (Debian's, or a pip wheel's, which CMake would not find alone).
torch_dir=$(sed -n 's/^Torch_DIR:PATH=//p' "$build/CMakeCache.txt")
# Quiet unless it fails (then the whole log: CMake's error comes after torch's warnings).
quietly() { "$@" >"$work/step.log" 2>&1 || { cat "$work/step.log" >&2; return 1; }; }
quietly cmake -S "$src/examples/cpp" -B "$work/own" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$work/prefix" -DTorch_DIR="$torch_dir"
quietly cmake --build "$work/own"

port=$((20000 + RANDOM % 20000))
for r in 1 0; do
  RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port OMP_NUM_THREADS=1 \
    timeout 120 "$work/own/own_model" "efm(topk:ratio=0.05)" 60 "${GRADCOMP_EXAMPLE_DEVICE:-cpu}" \
    >"$work/rank$r.log" 2>&1 &
done
status=0
wait -n || status=$?
wait -n || status=$?
cat "$work/rank0.log"
if [ "$status" -ne 0 ]; then
  cat "$work/rank1.log" >&2
  echo "install_test: the example failed (status $status)" >&2
  exit 1
fi
grep -q "held-out accuracy" "$work/rank0.log"
# On CUDA the example's compressor (efm(topk)) has a device reducer: GradientExchange must
# take the device path, not stage through the host.
if [ "${GRADCOMP_EXAMPLE_DEVICE:-cpu}" = cuda ] && ! grep -q "(device path)" "$work/rank0.log"; then
  echo "install_test: on CUDA the example did not take GradientExchange's device path" >&2
  exit 1
fi

if [ -n "$py" ]; then
  site=$(find "$work/prefix" -name _C*.so -path '*gradcomp*' -printf '%h\n' | head -n 1)
  test -n "$site" || { echo "install_test: the Python package was not installed" >&2; exit 1; }
  PYTHONPATH=$(dirname "$site") "$py" -c "import gradcomp.torch, gradcomp; print('python:', gradcomp.Codec('topk:ratio=0.1'))"
fi
echo "install_test: ok"
