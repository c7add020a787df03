#!/usr/bin/env bash
# Exchange groups on a deeper MLP: min-group-mb 1, 8, 25; W = 4 on 2 cores, 1 Gbit/s.
# Ran on 2026-11-26 with the binaries of commit d9db951 (copied aside); from the repository root: sudo bash docs/measurements/netlab/groups-2026-11-26/run.sh
set -u
cd "$(dirname "$0")/../../../.."
mkdir -p "${OUT:-groups}"
for g in 1 8 25; do
  bash scripts/bench-net.sh --gradcomp "${GRADCOMP:-build/bin/gradcomp}" --workers 4 --bandwidths 1gbit \
    --steps 40 --repeats 2 --hidden 1024,1024,1024,1024,1024,1024 --min-group-mb $g \
    --methods "none powersgd:rank=2 efm(topk:ratio=0.01)" --ddp "" \
    --out "${OUT:-groups}"/g$g > "${OUT:-groups}"/g$g.log 2>&1
  echo "g=$g exit $?"
done
