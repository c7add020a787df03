#!/usr/bin/env bash
# Configures and builds gradcomp into build/ (Release, Ninja, ccache). The CLI lands
# at build/bin/gradcomp. Extra arguments go to cmake's configure step.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${GRADCOMP_JOBS:-2}
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build build -j "$jobs"
