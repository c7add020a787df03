#!/usr/bin/env bash
# The installed package: `cmake --install` into a temporary prefix, then examples/cpp (a
# project of its own, find_package(gradcomp)) configured and built against it, run on 2
# ranks with GradientExchange and with DiLoCo, and the Python package imported from it.
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

# run_example NAME ARGS...: own_model on 2 ranks; rank 0's report in $work/NAME.log.
run_example() {
  local name=$1; shift
  local port=$((20000 + RANDOM % 20000)) status=0
  for r in 1 0; do
    RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port OMP_NUM_THREADS=1 \
      timeout 120 "$work/own/own_model" "$@" >"$work/$name.rank$r.log" 2>&1 &
  done
  wait -n || status=$?
  wait -n || status=$?
  cat "$work/$name.rank0.log"
  if [ "$status" -ne 0 ]; then
    cat "$work/$name.rank1.log" >&2
    echo "install_test: the example ($name) failed (status $status)" >&2
    exit 1
  fi
  cp "$work/$name.rank0.log" "$work/$name.log"
  # Its held-out batch: 4 classes 3 standard deviations apart (chance: 0.25).
  awk '/held-out accuracy/ { for (i = 1; i < NF; i++) if ($i == "accuracy") a = $(i + 1) + 0 }
       END { exit !(a > 0.8) }' "$work/$name.log" \
    || { echo "install_test: the example ($name) did not learn" >&2; exit 1; }
}
device=${GRADCOMP_EXAMPLE_DEVICE:-cpu}
run_example exchange "efm(topk:ratio=0.05)" 60 "$device"
# gradcomp::DiLoCo through the same package: 60 inner steps, a round every 10.
run_example diloco "ef(topk:ratio=0.05)" 60 "$device" 10
grep -q "every 10 steps.*, 6 rounds," "$work/diloco.log"
# On CUDA the example's compressor (efm(topk)) has a device reducer: GradientExchange must
# take the device path, not stage through the host.
if [ "$device" = cuda ] && ! grep -q "(device path)" "$work/exchange.log"; then
  echo "install_test: on CUDA the example did not take GradientExchange's device path" >&2
  exit 1
fi

if [ -n "$py" ]; then
  site=$(find "$work/prefix" -name _C*.so -path '*gradcomp*' -printf '%h\n' | head -n 1)
  test -n "$site" || { echo "install_test: the Python package was not installed" >&2; exit 1; }
  PYTHONPATH=$(dirname "$site") "$py" -c "import gradcomp.torch, gradcomp; print('python:', gradcomp.Codec('topk:ratio=0.1'))"
fi
echo "install_test: ok"
