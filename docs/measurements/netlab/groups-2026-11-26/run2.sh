#!/usr/bin/env bash
# Exchange groups on the default MLP: min-group-mb 1 (two groups) and 8 (one group).
# Ran on 2026-11-26 with the binaries of commit d9db951 (copied aside); from the repository root: sudo bash docs/measurements/netlab/groups-2026-11-26/run2.sh
set -u
cd "$(dirname "$0")/../../../.."
mkdir -p "${OUT:-groups}"
for g in 1 8; do
  bash scripts/bench-net.sh --gradcomp "${GRADCOMP:-build/bin/gradcomp}" --workers 4 --bandwidths 1gbit \
    --steps 40 --repeats 2 --min-group-mb $g \
    --methods "none powersgd:rank=2 efm(topk:ratio=0.01) dgc:density=0.001,warmup_epochs=0" --ddp "" \
    --out "${OUT:-groups}"/mlp-g$g > "${OUT:-groups}"/mlp-g$g.log 2>&1
  echo "g=$g exit $?"
done
