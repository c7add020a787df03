#!/usr/bin/env bash
# Configures build/ (Release, Ninja, ccache) and builds the given targets.
#
#   usage: scripts/build.sh [TARGET ...] [-- CMAKE_CONFIGURE_ARGS ...]
#   default target: gradcomp, the CLI (build/bin/gradcomp and build/bin/gradcomp-torch);
#   "all": every library, test and benchmark.
#   env:   GRADCOMP_JOBS (default 2)
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

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
ninja_args=()
[ -t 1 ] || ninja_args=(--quiet)
cmake --build build -j "$jobs" --target "${targets[@]}" -- "${ninja_args[@]}"
