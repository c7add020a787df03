#!/usr/bin/env bash
# The accuracy table (docs/measurements/accuracy.md): every method trained the same
# way -- 4 local workers, Fashion-MNIST, the default MLP (784-1536-1536-10), 3 epochs,
# seed 42, the trainer's default optimizer and schedule -- one row per method with the
# test accuracy, bytes per worker per step, the compression ratio and the accuracy gap
# to the dense row. A method the binary does not know is listed as "not available".
#
#   usage: scripts/accuracy-table.sh [--epochs N] [--out DIR] [-- extra train flags]
#   env:   GRADCOMP (default build/bin/gradcomp), METHODS (space-separated
#          "label=spec" pairs overriding the default list)
#
# Writes DIR/<label>.log and .jsonl per row, DIR/table.md and DIR/table.json; prints the
# markdown table. Runs rows one after the other (each uses every core): ~30 minutes
# for the full list on a quiet 2-core machine.
set -euo pipefail
cd "$(dirname "$0")/.."

epochs=3
out=accuracy-table
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --epochs) epochs=${2:?--epochs needs a value}; shift 2 ;;
    --out) out=${2:?--out needs a value}; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "accuracy-table: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
gradcomp=${GRADCOMP:-build/bin/gradcomp}
[ -x "$gradcomp" ] || { echo "accuracy-table: $gradcomp not found (run scripts/build.sh)" >&2; exit 1; }

# The rows of docs/measurements/accuracy.md, measured with `-- --dense-share 0.01`.
default_methods="dense=none dgc=dgc:density=0.001,warmup_epochs=0.25 topk=ef(topk:ratio=0.01)
topk-efm=efm(topk:ratio=0.01) 2bit=2bit 2bit-tau0.003=2bit:threshold=0.003 qsgd=qsgd
terngrad=terngrad efsign=efsign efsign-block256=efsign:block=256 efsign-efm=efm(efsign)
sketched-sgd=sketched-sgd fetchsgd=fetchsgd atomo=atomo:budget=3 powersgd=powersgd:rank=2"
methods=${METHODS:-$default_methods}

mkdir -p "$out"
json_rows=()
for pair in $methods; do
  label=${pair%%=*}
  spec=${pair#*=}
  log="$out/$label.log"
  metrics="$out/$label.jsonl"
  rm -f "$metrics"
  echo "== $label ($spec)" >&2
  if "$gradcomp" train --workers 4 --epochs "$epochs" --seed 42 --compressor "$spec" \
       --metrics "$metrics" "${extra[@]}" > "$log" 2>&1; then
    summary=$(grep '"type":"summary"' "$metrics" | tail -n 1)
    json_rows+=("{\"label\":\"$label\",\"spec\":\"$spec\",\"available\":true,\"summary\":$summary}")
  else
    reason=$(tail -n 1 "$log" | sed 's/"/\\"/g')
    json_rows+=("{\"label\":\"$label\",\"spec\":\"$spec\",\"available\":false,\"error\":\"$reason\"}")
  fi
done

{
  printf '[\n'
  for i in "${!json_rows[@]}"; do
    printf '  %s%s\n' "${json_rows[$i]}" "$([ "$i" -lt $((${#json_rows[@]} - 1)) ] && echo ,)"
  done
  printf ']\n'
} > "$out/table.json"

/usr/bin/python3 - "$out/table.json" "$epochs" > "$out/table.md" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))
dense = next((r["summary"]["test_accuracy"] for r in rows
              if r["available"] and r["label"] == "dense"), None)
def size(b):
    return f"{b/1e6:.2f} MB" if b >= 1e6 else f"{b/1e3:.1f} kB"
print(f"| method | spec | test accuracy | vs dense | sent per worker per step | compression | step ms (median) |")
print("|---|---|---|---|---|---|---|")
for r in rows:
    if not r["available"]:
        print(f"| {r['label']} | `{r['spec']}` | not available | | | | {r['error']} |")
        continue
    s = r["summary"]
    gap = "" if dense is None or r["label"] == "dense" else f"{(s['test_accuracy'] - dense) * 100:+.2f} pt"
    print(f"| {r['label']} | `{r['spec']}` | {s['test_accuracy']:.4f} | {gap} | "
          f"{size(s['bytes_sent_per_worker_per_step'])} | {s['compression_ratio']:.1f}x | "
          f"{s['step_ms_median']:.1f} |")
PY
cat "$out/table.md"
