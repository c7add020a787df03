#!/usr/bin/env bash
# The main job on a fresh machine: installs dependencies, builds the CLI (and nothing
# else), and trains the FC-heavy MLP on Fashion-MNIST with 4 local worker processes
# exchanging rank-4 PowerSGD factors with error feedback (the classifier layer kept dense)
# over Gloo, for 3 epochs (about 70 s
# on 2 cores), ending with the report table. Extra arguments go to `gradcomp train`
# (e.g. --compressor 2bit, --epochs 1, --metrics run.jsonl).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh --torch2  # Debian's packages, and torch 2.x from pip
echo "run: building the CLI into build/bin (the first build takes a few minutes)"
bash scripts/build.sh gradcomp
exec build/bin/gradcomp train "$@"
