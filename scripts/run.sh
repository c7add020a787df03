#!/usr/bin/env bash
# The main job on a fresh machine: installs dependencies, builds, and runs the codec
# benchmark on a ResNet-50-sized gradient (25,000,000 floats), printing its table.
# Extra arguments go to `gradcomp bench codec` (e.g. --threads 2, --spec 2bit).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
exec build/bin/gradcomp bench codec --size 25000000 "$@"
