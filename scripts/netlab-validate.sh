#!/usr/bin/env bash
# netlab-validate: the cost model (gradcomp advise, docs/cost-model.md) against a fresh
# sitting of the network lab, out of sample. One bench-net.sh sitting per worker count
# (1 Gbit/s and 100 Mbit/s) and one with added latency, every row run --repeats times
# interleaved; then `netlab_report.py --validate` prints measured beside predicted for
# every gradcomp row and exits 1 if any row misses by more than 15%. Needs root (77
# without, as bench-net.sh).
#
#   sudo scripts/netlab-validate.sh                        # W = 2, 4, 8; 4 + 5 ms
#   sudo scripts/netlab-validate.sh --workers "2" --steps 20 --repeats 1   # a quick check
#
# Options (or the environment variable in brackets):
#   --workers "2 4 8"          worker counts, each at every bandwidth         [WORKER_COUNTS]
#   --bandwidths "1gbit 100mbit"                                              [BANDWIDTHS]
#   --delay-workers 4          the worker count of the latency sitting ("" for none)
#   --delay 5ms                its added latency at each end of each link, at 1 Gbit/s [DELAY]
#   --steps 60                 steps per run                                  [STEPS]
#   --repeats 3                runs per row                                   [REPEATS]
#   --methods "SPEC ..."       (default: dense, top-k, DGC, 2-bit, PowerSGD and the two
#                              count-sketch schemes, each with its default settings, but
#                              DGC without its density warm-up: a lab run of 60 steps would
#                              be all warm-up, and the model predicts the steady state)  [METHODS]
#   --out DIR                  (default netlab-validate-out/<UTC time>)     [OUT]
# The predictions use the codec speeds advise measures on the spot, on this machine, after
# the runs (set GRADCOMP_CODEC_SPEEDS to a `gradcomp bench codec --json` file to pin them).
set -uo pipefail
cd "$(dirname "$0")/.."

WORKER_COUNTS=${WORKER_COUNTS:-"2 4 8"}
BANDWIDTHS=${BANDWIDTHS:-"1gbit 100mbit"}
DELAY_WORKERS=4
DELAY=${DELAY:-5ms}
STEPS=${STEPS:-60}
REPEATS=${REPEATS:-3}
METHODS=${METHODS:-"none topk:ratio=0.01 dgc:density=0.001,warmup_epochs=0 2bit powersgd fetchsgd sketched-sgd"}
OUT=${OUT:-netlab-validate-out/$(date -u +%Y%m%dT%H%M%SZ)}

while [ $# -gt 0 ]; do
  case $1 in
    --workers) WORKER_COUNTS=$2; shift 2 ;;
    --bandwidths) BANDWIDTHS=$2; shift 2 ;;
    --delay-workers) DELAY_WORKERS=$2; shift 2 ;;
    --delay) DELAY=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --repeats) REPEATS=$2; shift 2 ;;
    --methods) METHODS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "netlab-validate: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done

sittings=()
sit() {  # sit DIR WORKERS BANDWIDTHS [DELAY]
  local dir=$1 w=$2 bws=$3 delay=${4:-}
  local args=(--workers "$w" --bandwidths "$bws" --steps "$STEPS" --repeats "$REPEATS"
              --methods "$METHODS" --ddp "" --out "$dir")
  [ -n "$delay" ] && args+=(--delay "$delay")
  echo "netlab-validate: W = $w, $bws${delay:+, delay $delay} -> $dir" >&2
  bash scripts/bench-net.sh "${args[@]}" > /dev/null
  local st=$?
  [ "$st" -eq 77 ] && exit 77
  [ "$st" -ne 0 ] && { echo "netlab-validate: the sitting in $dir failed (exit $st)" >&2; exit 1; }
  sittings+=("$dir")
}

for w in $WORKER_COUNTS; do sit "$OUT/w$w" "$w" "$BANDWIDTHS"; done
[ -n "$DELAY_WORKERS" ] && sit "$OUT/w$DELAY_WORKERS-delay$DELAY" "$DELAY_WORKERS" 1gbit "$DELAY"
python3 scripts/netlab_report.py --validate "${sittings[@]}" | tee "$OUT/validation.md"
exit "${PIPESTATUS[0]}"
