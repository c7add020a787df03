#!/usr/bin/env bash
# Configures build/ (Release, Ninja, ccache) and builds the given targets.
#
#   usage: scripts/build.sh [TARGET ...] [-- CMAKE_CONFIGURE_ARGS ...]
#   default target: gradcomp, the CLI (build/bin/gradcomp and build/bin/gradcomp-torch);
#   "all": every library, test and benchmark.
#   env:   GRADCOMP_JOBS (default 2)
#          GRADCOMP_TORCH_PYTHON: build against the torch of this Python (default
#          .venv-torch2/bin/python, the pip wheel scripts/install-deps.sh --torch2 installs)
#
# The device codecs' CUDA kernels compile wherever nvcc is, whatever the torch (a CPU
# wheel's build would skip them): nothing runs them without a GPU (scripts/gpu-check.sh),
# but CI then compiles them.
#
# Writes only warnings and errors when its output is not a terminal (on a terminal,
# Ninja's one-line progress).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${GRADCOMP_JOBS:-2}
targets=()
while [ $# -gt 0 ]; do
  case $1 in
    --) shift; break ;;
    *) targets+=("$1"); shift ;;
  esac
done
[ ${#targets[@]} -gt 0 ] || targets=(gradcomp)

torch_python=${GRADCOMP_TORCH_PYTHON:-$PWD/.venv-torch2/bin/python}
[ -x "$torch_python" ] || {
  echo "build.sh: no $torch_python (run scripts/install-deps.sh --torch2, or set GRADCOMP_TORCH_PYTHON)" >&2
  exit 1
}
cuda_kernels=OFF
if command -v nvcc >/dev/null; then cuda_kernels=ON; fi
# -U SKBUILD*: scripts/test.sh's `pip install` configures this tree last and leaves its markers.
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -U 'SKBUILD*' \
  -DGRADCOMP_TORCH_PYTHON="$torch_python" -DGRADCOMP_CUDA_KERNELS=$cuda_kernels "$@" >/dev/null
ninja_args=()
[ -t 1 ] || ninja_args=(--quiet)
cmake --build build -j "$jobs" --target "${targets[@]}" -- "${ninja_args[@]}"
