#!/usr/bin/env bash
# bench-net: gradcomp against dense allreduce and PyTorch DDP (+ PowerSGD) on shaped links.
#
# Every worker sits in its own network namespace behind a tc-shaped veth link
# (scripts/netlab.sh); the same MLP, data and batch run under each method at each
# bandwidth, and scripts/netlab_report.py prints one table and writes results.json,
# table.md and step-time.svg into the output directory. Needs root (exit 77 without).
#
#   sudo scripts/bench-net.sh                      # the full benchmark: 1 epoch per run
#   sudo STEPS=40 scripts/bench-net.sh             # a quick check of the pipeline
#   sudo scripts/bench-net.sh --bandwidths 1gbit --methods "none ef(topk:ratio=0.01)" \
#        --ddp dense --steps 40
#   sudo scripts/bench-net.sh --bandwidths 1gbit --delay 5ms   # "1 Gbit/s + 5 ms" rows
#
# Options (or the environment variable in brackets):
#   --bandwidths "1gbit 100mbit"   link rates, each direction per worker  [BANDWIDTHS]
#   --delay D                      added latency at each end of each link, e.g. 5ms: a
#                                  packet between two workers takes 2 x D one way
#                                  (4 x D round trip); netem where the kernel has it,
#                                  else netlab's delay line (an NFQUEUE program fed by
#                                  iptables, built on first use: install-deps.sh
#                                  --netlab; see scripts/netlab.sh)  [DELAY]
#   --workers N                    (default 4)                            [WORKERS]
#   --steps N                      stop every run at step N; 0: one full epoch  [STEPS]
#   --repeats N                    run every row N times, interleaved (all methods once,
#                                  then again), so that a drift in the machine's load
#                                  touches every method alike; the report gives the
#                                  median and the spread (default 1)      [REPEATS]
#   --methods "SPEC ..."           gradcomp compressors, space-separated  [METHODS]
#                                  (default: none ef(topk:ratio=0.01) dgc:density=0.001 2bit
#                                  powersgd:rank=2 fetchsgd); a spec the binary does not
#                                  know is reported "not available". SPEC+--flag=value+...
#                                  adds train flags, e.g. an outer loop:
#                                  "fp16+--sync-every=30+--outer=nesterov"
#   --ddp "dense powersgd"         DDP baselines ("" for none); gradcomp:SPEC is DDP with
#                                  gradcomp.torch's hook, e.g. gradcomp:powersgd:rank=2  [DDP_METHODS]
#   --hidden "1536,1536"           the MLP's hidden layers (784-H-10)      [HIDDEN]
#   --model mlp|transformer        the job: the MLP on Fashion-MNIST (default), or the
#                                  byte-level transformer LM on fortunes with AdamW (lr 3e-3,
#                                  batch 32 a worker; docs/training.md); no DDP baseline
#                                  for the LM (--ddp "")                  [MODEL]
#   --min-group-mb G               gradcomp train --min-group-mb (exchange groups of at
#                                  least G MiB; default the trainer's: 1 MiB for dense,
#                                  25 for a compressed exchange)          [MIN_GROUP_MB]
#   --no-floor                     skip the no-communication run
#   NETLAB_TCP_SLOW_START_AFTER_IDLE=0   (environment only) no restart of TCP's congestion
#                                  window on idle connections in the ranks' namespaces
#                                  (scripts/netlab.sh); recorded in meta.json and the table
#   --gradcomp PATH                (default build/bin/gradcomp)           [GRADCOMP]
#   --out DIR                      (default bench-net-out/<UTC time>)     [OUT]
#
# The compute floor: every worker runs as a world of one (same per-worker batch, same
# step count, --compressor none, so no exchange at all), all of them at once in their
# namespaces, so they share the CPU exactly as the real runs' workers do. Its median step
# is what a run would take if communication were free. Its accuracy is not comparable
# (each process trains on its own), so the table leaves it out.
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
# shellcheck source=netlab.sh
source scripts/netlab.sh

BANDWIDTHS=${BANDWIDTHS:-"1gbit 100mbit"}
DELAY=${DELAY:-}
WORKERS=${WORKERS:-4}
STEPS=${STEPS:-0}
REPEATS=${REPEATS:-1}
METHODS=${METHODS:-"none ef(topk:ratio=0.01) dgc:density=0.001 2bit powersgd:rank=2 fetchsgd"}
DDP_METHODS=${DDP_METHODS-"dense powersgd gradcomp:powersgd:rank=2 gradcomp:efm(topk:ratio=0.01)"}
GRADCOMP=${GRADCOMP:-build/bin/gradcomp}
OUT=${OUT:-bench-net-out/$(date -u +%Y%m%dT%H%M%SZ)}
FLOOR=1
HIDDEN=${HIDDEN:-1536,1536}
MODEL=${MODEL:-mlp}
MIN_GROUP_MB=${MIN_GROUP_MB:-}
BATCH=64
TRAIN_SAMPLES=60000  # Fashion-MNIST
# The Python whose torch build/python was built against: the venv's (scripts/build.sh), or
# Debian's for a build against its torch 1.13.
PY=${PY:-$REPO/.venv-torch2/bin/python}
[ -x "$PY" ] || PY=/usr/bin/python3

while [ $# -gt 0 ]; do
  case $1 in
    --bandwidths) BANDWIDTHS=$2; shift 2 ;;
    --delay) DELAY=${2:?--delay needs a duration such as 5ms}; shift 2 ;;
    --workers) WORKERS=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --repeats) REPEATS=$2; shift 2 ;;
    --methods) METHODS=$2; shift 2 ;;
    --ddp) DDP_METHODS=$2; shift 2 ;;
    --hidden) HIDDEN=${2:?--hidden needs sizes such as 1536,1536}; shift 2 ;;
    --model) MODEL=${2:?--model needs mlp or transformer}; shift 2 ;;
    --min-group-mb) MIN_GROUP_MB=${2:?--min-group-mb needs a size in MiB}; shift 2 ;;
    --no-floor) FLOOR=0; shift ;;
    --gradcomp) GRADCOMP=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench-net: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done

log() { echo "bench-net: $*" >&2; }

case $MODEL in
  mlp) MODEL_NAME="MLP 784-$HIDDEN-10 on Fashion-MNIST" ;;
  transformer)
    # The LM of docs/training.md: 283 steps an epoch at 4 workers x 32 sequences.
    BATCH=32
    TRAIN_SAMPLES=36224
    MODEL_NAME="transformer LM (834 k parameters) on fortunes, AdamW"
    if [ -n "$DDP_METHODS" ]; then
      echo "bench-net: --model transformer has no DDP baseline (scripts/ddp_baseline.py trains the MLP): pass --ddp \"\"" >&2
      exit 2
    fi
    ;;
  *) echo "bench-net: --model '$MODEL': expected mlp or transformer" >&2; exit 2 ;;
esac

if [ -n "$DELAY" ] && ! [[ $DELAY =~ ^[0-9]+(\.[0-9]+)?(s|ms|us)$|^0$ ]]; then
  echo "bench-net: --delay '$DELAY': expected a duration such as 5ms, 500us or 0.1s" >&2
  exit 2
fi
if ! [[ $REPEATS =~ ^[1-9][0-9]*$ ]]; then
  echo "bench-net: --repeats '$REPEATS': expected a positive whole number" >&2
  exit 2
fi
netlab_require_root
[ -x "$GRADCOMP" ] || { log "no gradcomp binary at $GRADCOMP (bash scripts/build.sh)"; exit 1; }
GRADCOMP=$(realpath "$GRADCOMP")
mkdir -p "$OUT/runs" "$OUT/logs"
OUT=$(realpath "$OUT")

length="1 epoch"
[ "$STEPS" -gt 0 ] && length="$STEPS steps"
steps_per_epoch=$((TRAIN_SAMPLES / WORKERS / BATCH))
run_steps=$([ "$STEPS" -gt 0 ] && echo "$STEPS" || echo "$steps_per_epoch")

have_torch=0
"$PY" -c "import torch.distributed" 2>/dev/null && have_torch=1
torch_version=$([ "$have_torch" = 1 ] && "$PY" -c "import torch; print(torch.__version__)" || echo "not installed")

# A run's record, one JSON file in $OUT/runs (python3 does the quoting).
# write_run FILE BANDWIDTH SYSTEM METHOD STATUS NOTE SUMMARY_FILE TX_BEFORE TX_AFTER
#           [REPEAT LOAD]: LOAD is the 1-minute load average when the run started.
write_run() {
  python3 - "$WORKERS" "$@" <<'EOF'
import json, sys
workers, path, bw, system, method, status, note, summary_file, tx0, tx1 = sys.argv[1:11]
repeat = sys.argv[11] if len(sys.argv) > 11 else "1"
load = sys.argv[12] if len(sys.argv) > 12 else ""
summary = None
try:
    with open(summary_file) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            obj = json.loads(line)
            if system == "ddp" or obj.get("type") == "summary":
                summary = obj
except (OSError, ValueError):
    pass
a = [int(x) for x in tx0.split()] if tx0 else []
b = [int(x) for x in tx1.split()] if tx1 else []
rec = {"bandwidth": bw, "system": system, "method": method, "status": status, "note": note,
       "workers": int(workers), "summary": summary, "repeat": int(repeat),
       "load_at_start": float(load) if load else None,
       "tx_bytes_per_rank": [y - x for x, y in zip(a, b)] if a and b else None}
if status == "ok" and summary is None:
    rec["status"], rec["note"] = "failed", "no summary written"
with open(path, "w") as f:
    json.dump(rec, f)
EOF
}

safe() { echo "$1" | tr -c 'A-Za-z0-9=.+-' '_' | sed 's/_*$//'; }

# Is SPEC known to this binary? The CLI validates the spec before touching data or the
# network; an unknown one exits 1 with one line naming it.
NOT_AVAILABLE=""
spec_available() {
  local err
  err=$("$GRADCOMP" train --rank 0 --world-size 1 --compressor "$1" --dataset synthetic \
    --synthetic-train 256 --mlp-hidden 16 --batch-size 32 --steps 1 --threads 1 2>&1 >/dev/null)
  if [ $? -ne 0 ] && echo "$err" | grep -qi "unknown"; then
    NOT_AVAILABLE=$(echo "$err" | head -n 1 | sed 's/^gradcomp: //; s/; known:.*//' | cut -c1-100)
    return 1
  fi
  return 0
}

gradcomp_args() {  # the common flags of every gradcomp run
  local a=(--batch-size "$BATCH" --epochs 1 --threads 1)
  if [ "$MODEL" = transformer ]; then
    a+=(--model transformer --dataset fortunes --optimizer adamw --lr 3e-3)
  else
    a+=(--mlp-hidden "$HIDDEN" --dataset fashion-mnist)
  fi
  [ "$STEPS" -gt 0 ] && a+=(--steps "$STEPS")
  [ -n "$MIN_GROUP_MB" ] && a+=(--min-group-mb "$MIN_GROUP_MB")
  printf '%s\n' "${a[@]}"
}
mapfile -t COMMON < <(gradcomp_args)

# run_one BANDWIDTH SYSTEM METHOD REPEAT: one run in the lab, its record in $OUT/runs.
run_one() {
  local bw=$1 system=$2 method=$3 repeat=${4:-1}
  local tag
  tag="$(safe "$bw")__${system}__$(safe "$method")"
  [ "$REPEATS" -gt 1 ] && tag="${tag}__r${repeat}"
  local logs="$OUT/logs/$tag" rec="$OUT/runs/$tag.json" summary
  rm -rf "$logs"
  mkdir -p "$logs"
  local cmd=()
  case $system in
    gradcomp)
      summary="$logs/metrics.jsonl"
      # SPEC+--flag=value+...: the compressor and flags of its own (an outer loop).
      local spec=${method%%+*} extra=()
      [ "$spec" != "$method" ] && IFS=+ read -r -a extra <<< "${method#*+}"
      cmd=("$GRADCOMP" train --compressor "$spec" "${extra[@]}" "${COMMON[@]}" --metrics "$summary")
      ;;
    floor)
      summary="$logs/metrics-0.jsonl"
      # --rank/--world-size flags win over the lab's RANK/WORLD_SIZE: a world of one.
      cmd=("$GRADCOMP" train --rank 0 --world-size 1 --compressor none "${COMMON[@]}"
           --steps "$run_steps" --metrics "$logs/metrics-{rank}.jsonl")
      ;;
    ddp)
      summary="$logs/ddp.json"
      local steps_flag=()
      [ "$STEPS" -gt 0 ] && steps_flag=(--steps "$STEPS")
      local hook_flags=(--hook "$method")
      # gradcomp:SPEC: DDP with gradcomp.torch's hook (the Python package in build/python)
      [ "${method#gradcomp:}" != "$method" ] && hook_flags=(--hook gradcomp --gradcomp "${method#gradcomp:}")
      cmd=(env OMP_NUM_THREADS=1 PYTHONPATH="$REPO/build/python" "$PY" "$REPO/scripts/ddp_baseline.py"
           "${hook_flags[@]}" --hidden "$HIDDEN" --batch-size "$BATCH" --epochs 1 "${steps_flag[@]}"
           --json "$summary")
      ;;
  esac
  local label=$method
  [ "$system" = ddp ] && label="ddp $method"
  [ "$system" = floor ] && label="compute floor"
  [ "$REPEATS" -gt 1 ] && label="$label (run $repeat of $REPEATS)"
  local load
  load=$(cut -d' ' -f1 /proc/loadavg)
  log "$bw: $label ... (load $load)"
  local tx0 tx1 st
  tx0=$(netlab_tx_bytes | tr '\n' ' ')
  local t0=$SECONDS
  netlab_run "$logs" "${cmd[@]}"
  st=$?
  tx1=$(netlab_tx_bytes | tr '\n' ' ')
  local record_method=$method
  if [ "$system" = ddp ]; then
    case $method in
      powersgd) record_method="ddp+powersgd:rank=2" ;;
      gradcomp:*) record_method="ddp+gradcomp ${method#gradcomp:}" ;;
      *) record_method="ddp dense" ;;
    esac
  fi
  [ "$system" = floor ] && record_method="compute floor"
  local record_system=$system
  [ "$system" = floor ] && record_system=gradcomp
  if [ "$st" -eq 0 ]; then
    write_run "$rec" "$bw" "$record_system" "$record_method" ok "" "$summary" "$tx0" "$tx1" \
      "$repeat" "$load"
    log "$bw: $label done in $((SECONDS - t0)) s"
  else
    local why
    why=$(grep -h -m1 -i "error\|gradcomp:" "$logs"/rank-*.log 2>/dev/null | head -n 1 | cut -c1-120)
    write_run "$rec" "$bw" "$record_system" "$record_method" failed "${why:-exit $st}" "" "" "" \
      "$repeat" "$load"
    log "$bw: $label FAILED (status $st; logs in $logs)"
  fi
}

cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
commit=$(git -C "$REPO" describe --always --dirty 2>/dev/null || echo unknown)
impairment=""
if [ -n "$DELAY" ]; then
  netlab_have_netem  # probed once, in this shell
  impairment=$(netlab_impairment)
fi
python3 - "$OUT/meta.json" <<EOF
import json, sys
json.dump({"date": "$(date -u +%Y-%m-%dT%H:%M:%SZ)", "cpu": "$cpu", "cores": $(nproc),
           "kernel": "$(uname -r)", "load_start": "$(cut -d' ' -f1-3 /proc/loadavg)",
           "commit": "$commit", "torch": "$torch_version", "workers": $WORKERS,
           "model": "$MODEL_NAME", "batch": $BATCH,
           "min_group_mb": "${MIN_GROUP_MB:-auto}",
           "length": "$length", "repeats": $REPEATS, "delay": "$DELAY", "delay_by": "$impairment", "bandwidths": "$BANDWIDTHS",
           "tcp_slow_start_after_idle": "${NETLAB_TCP_SLOW_START_AFTER_IDLE:-kernel default}",
           "methods": "$METHODS", "ddp": "$DDP_METHODS"}, open(sys.argv[1], "w"))
EOF

# Which gradcomp methods this binary has (no lab needed for that).
available=()
for m in $METHODS; do
  if spec_available "${m%%+*}"; then
    available+=("$m")
  else
    log "$m: not available in this build ($NOT_AVAILABLE)"
    write_run "$OUT/runs/-__gradcomp__$(safe "$m").json" - gradcomp "$m" "not available" \
      "$NOT_AVAILABLE" "" "" ""
  fi
done
ddp_methods=()
if [ -n "$DDP_METHODS" ] && [ "$have_torch" = 0 ]; then
  log "DDP baselines skipped: $PY has no torch (scripts/install-deps.sh --torch2)"
  for m in $DDP_METHODS; do
    write_run "$OUT/runs/-__ddp__$m.json" - ddp "ddp $m" "not available" \
      "no torch for $PY" "" "" ""
  done
else
  for m in $DDP_METHODS; do ddp_methods+=("$m"); done
fi

netlab_up "$WORKERS" || { log "could not build the lab"; exit 1; }
log "lab up: $WORKERS workers (namespaces ${NETLAB_PREFIX}-*); results in $OUT"

if [ "$FLOOR" = 1 ]; then
  netlab_shape none || exit 1
  for ((r = 1; r <= REPEATS; r++)); do run_one - floor "compute floor" "$r"; done
fi
for bw in $BANDWIDTHS; do
  netlab_shape "$bw" "$DELAY" || { log "could not shape the links to $bw${DELAY:+ + $DELAY}"; exit 1; }
  [ -n "$DELAY" ] && log "$bw: delay $DELAY at each end of each link ($impairment)"
  for ((r = 1; r <= REPEATS; r++)); do
    for m in "${available[@]}"; do run_one "$bw" gradcomp "$m" "$r"; done
    for m in "${ddp_methods[@]}"; do run_one "$bw" ddp "$m" "$r"; done
  done
  if [ "$impairment" = delayline ]; then
    # What the delay lines did over this bandwidth's runs; a packet passed undelayed
    # (hold full) or an overrun would make the rows' delay smaller than asked.
    netlab_delayline_stats | tee "$OUT/logs/delayline-$(safe "$bw").txt" | sed "s/^/bench-net: $bw: delay line /" >&2
  fi
done
netlab_down

python3 - "$OUT/meta.json" <<EOF
import json, sys
m = json.load(open(sys.argv[1])); m["load_end"] = "$(cut -d' ' -f1-3 /proc/loadavg)"
json.dump(m, open(sys.argv[1], "w"))
EOF
python3 "$REPO/scripts/netlab_report.py" "$OUT"
log "wrote $OUT/results.json, $OUT/table.md, $OUT/step-time.svg"
