#!/usr/bin/env bash
# Regenerates outer-loop.md's two tables and the SVG curves from the data kept here.
set -euo pipefail
cd "$(dirname "$0")/../../.."
O=docs/measurements/outer-loop
C=$O/curves
python3 scripts/outer_loop_report.py --lab $O/lab-100mbit --lab $O/lab-100mbit-streaming \
  --target-row "gradcomp dense" --target-step 234 \
  --row "gradcomp dense|$C/dense.jsonl|none" --row "DDP dense|$C/dense.jsonl|ddp dense" \
  --row "powersgd:rank=2 (best per-step)|$C/powersgd2.jsonl|powersgd:rank=2" \
  --row "DiLoCo fp32, H=30|$C/diloco-fp32.jsonl|none+--sync-every=30" \
  --row "DiLoCo fp16, H=30|$C/diloco-fp16.jsonl|fp16+--sync-every=30" \
  --row "fp16, H=30, 3 fragments, delay 9|$C/diloco-fp16-f3d9.jsonl|fp16+--sync-every=30+--fragments=3+--delay=9" \
  --row "fp16, H=30, 2 fragments, delay 14|$C/diloco-fp16-f2d14.jsonl|fp16+--sync-every=30+--fragments=2+--delay=14" \
  --row "fp16, H=30, delay 29|$C/diloco-fp16-d29.jsonl|fp16+--sync-every=30+--delay=29" \
  --row "fp16, H=60, 2 fragments, delay 29|$C/diloco-fp16-h60f2d29.jsonl|fp16+--sync-every=60+--fragments=2+--delay=29" \
  --row "SparseLoCo (ef(chunktopk)), H=30|$C/sparseloco.jsonl|ef(chunktopk)+--sync-every=30+--outer=sparseloco" \
  --row "SparseLoCo, H=30, delay 29|$C/sparseloco-d29.jsonl|ef(chunktopk)+--sync-every=30+--outer=sparseloco+--delay=29" \
  --baseline "DDP dense" --baseline "powersgd:rank=2 (best per-step)" --svg $O/curves-100mbit.svg \
  --title "MLP, 4 workers, 100 Mbit/s + 48 ms: test accuracy against wall-clock time"
echo
python3 scripts/outer_loop_report.py --lab $O/lab-1gbit --target-row "gradcomp dense" --target-step 234 \
  --row "gradcomp dense|$C/dense.jsonl|none" --row "DDP dense|$C/dense.jsonl|ddp dense" \
  --row "powersgd:rank=2|$C/powersgd2.jsonl|powersgd:rank=2" \
  --row "DiLoCo fp16, H=30|$C/diloco-fp16.jsonl|fp16+--sync-every=30" \
  --row "fp16, H=30, 3 fragments, delay 9|$C/diloco-fp16-f3d9.jsonl|fp16+--sync-every=30+--fragments=3+--delay=9" \
  --baseline "DDP dense" --baseline "powersgd:rank=2" --svg $O/curves-1gbit.svg \
  --title "MLP, 4 workers, 1 Gbit/s: test accuracy against wall-clock time"
