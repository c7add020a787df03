#!/usr/bin/env bash
# The accuracy table (docs/measurements/accuracy.md): every method trained the same
# way -- 4 local workers, Fashion-MNIST, the default MLP (784-1536-1536-10), 3 epochs,
# seeds 42 43 44, the trainer's default optimizer and schedule -- one row per method
# with the test accuracy's mean over the seeds and its spread (sample standard
# deviation, min..max), bytes per worker per step, the compression ratio and the gap
# of the mean to the dense row's mean. A method the binary does not know, or a seed
# that fails, is listed as "not available" with the reason.
#
#   usage: scripts/accuracy-table.sh [--epochs N] [--seeds "42 43 44"] [--workers W]
#                                    [--out DIR] [-- extra train flags]
#   env:   GRADCOMP (default build/bin/gradcomp), METHODS (space-separated
#          "label=spec" pairs overriding the default list)
#   a quick check of the script itself: METHODS="dense=none 2bit=2bit" \
#          scripts/accuracy-table.sh --out /tmp/t -- --steps 3
#
# Writes DIR/<label>-s<seed>.log and .jsonl per run, DIR/table.md and DIR/table.json;
# prints the markdown table. Runs one after the other (each uses every core): ~30
# minutes per seed for the full list on a quiet 2-core machine.
set -euo pipefail
cd "$(dirname "$0")/.."

epochs=3
seeds="42 43 44"
workers=4
out=accuracy-table
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --epochs) epochs=${2:?--epochs needs a value}; shift 2 ;;
    --seeds) seeds=${2:?--seeds needs a value}; shift 2 ;;
    --workers) workers=${2:?--workers needs a value}; shift 2 ;;
    --out) out=${2:?--out needs a value}; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "accuracy-table: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
gradcomp=${GRADCOMP:-build/bin/gradcomp}
[ -x "$gradcomp" ] || { echo "accuracy-table: $gradcomp not found (run scripts/build.sh)" >&2; exit 1; }

# The rows of docs/measurements/accuracy.md: every method with its default spec (a bare
# biased codec runs as efm(...) under the trainer's momentum), then the variants the page
# compares them with.
default_methods="dense=none topk=topk:ratio=0.01 dgc=dgc:density=0.001 2bit=2bit efsign=efsign
qsgd=qsgd terngrad=terngrad sketched-sgd=sketched-sgd fetchsgd=fetchsgd powersgd=powersgd:rank=2
atomo=atomo:budget=3 randomk=randomk threshold=threshold 1bit=1bit
topk-ef=ef(topk:ratio=0.01) 2bit-ef=ef(2bit) 2bit-mxnet=ef(2bit:threshold=0.5)
efsign-ef=ef(efsign)"
methods=${METHODS:-$default_methods}

mkdir -p "$out"
json_rows=()
for pair in $methods; do
  label=${pair%%=*}
  spec=${pair#*=}
  runs=()
  for seed in $seeds; do
    log="$out/$label-s$seed.log"
    metrics="$out/$label-s$seed.jsonl"
    rm -f "$metrics"
    echo "== $label ($spec), seed $seed" >&2
    if "$gradcomp" train --workers "$workers" --epochs "$epochs" --seed "$seed" --compressor "$spec" \
         --metrics "$metrics" "${extra[@]}" > "$log" 2>&1; then
      summary=$(grep '"type":"summary"' "$metrics" | tail -n 1)
      runs+=("{\"seed\":$seed,\"available\":true,\"summary\":$summary}")
    else
      reason=$(tail -n 1 "$log" | sed 's/\\/\\\\/g; s/"/\\"/g')
      runs+=("{\"seed\":$seed,\"available\":false,\"error\":\"$reason\"}")
    fi
  done
  joined=$(IFS=,; echo "${runs[*]}")
  json_rows+=("{\"label\":\"$label\",\"spec\":\"$spec\",\"runs\":[$joined]}")
done

{
  printf '[\n'
  for i in "${!json_rows[@]}"; do
    printf '  %s%s\n' "${json_rows[$i]}" "$([ "$i" -lt $((${#json_rows[@]} - 1)) ] && echo ,)"
  done
  printf ']\n'
} > "$out/table.json"

/usr/bin/python3 - "$out/table.json" > "$out/table.md" <<'PY'
import json, statistics, sys
rows = json.load(open(sys.argv[1]))
def ok(r):
    return r["runs"] and all(x["available"] for x in r["runs"])
def accs(r):
    return [x["summary"]["test_accuracy"] for x in r["runs"]]
def mean(v):
    return sum(v) / len(v)
dense = next((mean(accs(r)) for r in rows if ok(r) and r["label"] == "dense"), None)
def size(b):
    return f"{b/1e6:.2f} MB" if b >= 1e6 else f"{b/1e3:.1f} kB"
# The gap to dense is the fourth column, with U+2212 as the minus sign: the layout of
# docs/measurements/accuracy.md, whose rows the advisor's accuracy column must match.
print("| method | spec | test accuracy (mean) | vs dense (points) | spread (sd; min..max) "
      "| seeds | sent per worker per step | compression | step ms (median) |")
print("|---|---|---|---|---|---|---|---|---|")
def points(v):
    return f"{v:+.2f}".replace("-", "\u2212")
for r in rows:
    seeds = " ".join(str(x["seed"]) for x in r["runs"])
    if not ok(r):
        bad = next(x for x in r["runs"] if not x["available"])
        print(f"| {r['label']} | `{r['spec']}` | not available | | | {seeds} | | | "
              f"seed {bad['seed']}: {bad['error']} |")
        continue
    a = accs(r)
    s = [x["summary"] for x in r["runs"]]
    m = mean(a)
    sd = statistics.stdev(a) if len(a) > 1 else 0.0
    gap = "" if dense is None or r["label"] == "dense" else points((m - dense) * 100)
    print(f"| {r['label']} | `{r['spec']}` | {m:.4f} | {gap} | {sd * 100:.2f} pt; "
          f"{min(a):.4f}..{max(a):.4f} | {seeds} | "
          f"{size(mean([x['bytes_sent_per_worker_per_step'] for x in s]))} | "
          f"{mean([x['compression_ratio'] for x in s]):.1f}x | "
          f"{statistics.median([x['step_ms_median'] for x in s]):.1f} |")
PY
cat "$out/table.md"
