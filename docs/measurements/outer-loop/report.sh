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
# Fragments cut to equal size (2026-11-28, lab-100mbit-pieces: 2 repeats a row).
python3 scripts/outer_loop_report.py --lab $O/lab-100mbit --lab $O/lab-100mbit-pieces \
  --target-row "gradcomp dense" --target-step 234 \
  --row "gradcomp dense|$C/dense.jsonl|none" --row "DDP dense|$C/dense.jsonl|ddp dense" \
  --row "powersgd:rank=2 (best per-step)|$C/powersgd2.jsonl|powersgd:rank=2" \
  --row "DiLoCo fp16, H=30|$C/diloco-fp16.jsonl|fp16+--sync-every=30" \
  --row "fp16, H=45, 3 fragments, delay 14|$C/pieces-h45f3d14.jsonl|fp16+--sync-every=45+--fragments=3+--delay=14" \
  --row "fp16, H=60, 4 fragments, delay 14|$C/pieces-h60f4d14.jsonl|fp16+--sync-every=60+--fragments=4+--delay=14" \
  --row "fp16, H=60, 2 fragments, delay 29|$C/pieces-h60f2d29.jsonl|fp16+--sync-every=60+--fragments=2+--delay=29@lab-100mbit-pieces" \
  --baseline "DDP dense" --baseline "powersgd:rank=2 (best per-step)" --svg $O/curves-100mbit-pieces.svg \
  --title "MLP, 4 workers, 100 Mbit/s + 48 ms, fragments of equal size: test accuracy against wall-clock time"
echo
python3 scripts/outer_loop_report.py --lab $O/lab-1gbit --target-row "gradcomp dense" --target-step 234 \
  --row "gradcomp dense|$C/dense.jsonl|none" --row "DDP dense|$C/dense.jsonl|ddp dense" \
  --row "powersgd:rank=2|$C/powersgd2.jsonl|powersgd:rank=2" \
  --row "DiLoCo fp16, H=30|$C/diloco-fp16.jsonl|fp16+--sync-every=30" \
  --row "fp16, H=30, 3 fragments, delay 9|$C/diloco-fp16-f3d9.jsonl|fp16+--sync-every=30+--fragments=3+--delay=9" \
  --baseline "DDP dense" --baseline "powersgd:rank=2" --svg $O/curves-1gbit.svg \
  --title "MLP, 4 workers, 1 Gbit/s: test accuracy against wall-clock time"
echo
# The transformer LM (perplexity, lower is better; curves every 10 steps, lm/): two sittings
# at 100 Mbit/s + 48 ms, each row against its own sitting's compute floor.
L=$O/lm
python3 scripts/outer_loop_report.py --figure perplexity --lab $O/lab-lm-100mbit \
  --lab $O/lab-lm-100mbit-streaming --lab $O/lab-lm-100mbit-fp32 --target-row "gradcomp dense" \
  --row "gradcomp dense|$L/curve10-dense.jsonl|none" \
  --row "powersgd:rank=2 (best per-step)|$L/curve-powersgd2.jsonl|powersgd:rank=2" \
  --row "H=5, averaging|$L/curve10-h5-avg.jsonl|fp16+--sync-every=5+--outer=average" \
  --row "H=5, delay 3, lr 1e-3|$L/curve10-h5-avg-d3-lr1e-3.jsonl|fp16+--sync-every=5+--outer=average+--delay=3" \
  --row "H=5, delay 3, lr 3e-3|$L/curve10-h5-avg-d3.jsonl|fp16+--sync-every=5+--outer=average+--delay=3" \
  --row "H=10, 2 fragments, delay 4, lr 1e-3|$L/curve10-h10-avg-f2-d4-lr1e-3.jsonl|fp16+--sync-every=10+--fragments=2+--outer=average+--delay=4" \
  --row "the same, fp32|$L/curve10-h10-avg-f2-d4-lr1e-3-fp32.jsonl|none+--sync-every=10+--fragments=2+--outer=average+--delay=4" \
  --baseline "gradcomp dense" --svg $O/curves-lm-100mbit.svg \
  --title "LM, 4 workers, 100 Mbit/s + 48 ms: test perplexity against wall-clock time"
echo
# The MLP at W = 8 (curves every 13 steps, 117 a epoch; curves-w8/): 8 workers on the 2 cores.
C8=$O/curves-w8
python3 scripts/outer_loop_report.py --lab $O/lab-w8-100mbit \
  --target-row "gradcomp dense" --target-step 117 \
  --row "gradcomp dense|$C8/dense.jsonl|none" --row "DDP dense|$C8/dense.jsonl|ddp dense" \
  --row "powersgd:rank=2 (best per-step)|$C8/powersgd2.jsonl|powersgd:rank=2" \
  --row "DiLoCo fp32, H=30|$C8/diloco-fp32.jsonl|none+--sync-every=30" \
  --row "DiLoCo fp16, H=30|$C8/diloco-fp16.jsonl|fp16+--sync-every=30" \
  --row "fp16, H=30, 3 fragments, delay 9|$C8/diloco-fp16-f3d9.jsonl|fp16+--sync-every=30+--fragments=3+--delay=9" \
  --row "fp16, H=60, 2 fragments, delay 29|$C8/diloco-fp16-h60f2d29.jsonl|fp16+--sync-every=60+--fragments=2+--delay=29" \
  --baseline "DDP dense" --baseline "powersgd:rank=2 (best per-step)" --svg $O/curves-w8-100mbit.svg \
  --title "MLP, 8 workers, 100 Mbit/s + 48 ms: test accuracy against wall-clock time"
echo
# W = 8 with fragments of equal size (2026-11-28, lab-w8-100mbit-pieces).
python3 scripts/outer_loop_report.py --lab $O/lab-w8-100mbit --lab $O/lab-w8-100mbit-pieces \
  --target-row "gradcomp dense" --target-step 117 \
  --row "gradcomp dense|$C8/dense.jsonl|none" --row "DDP dense|$C8/dense.jsonl|ddp dense" \
  --row "powersgd:rank=2 (best per-step)|$C8/powersgd2.jsonl|powersgd:rank=2" \
  --row "fp16, H=45, 3 fragments, delay 14|$C8/pieces-h45f3d14.jsonl|fp16+--sync-every=45+--fragments=3+--delay=14" \
  --row "fp16, H=60, 2 fragments, delay 29|$C8/pieces-h60f2d29.jsonl|fp16+--sync-every=60+--fragments=2+--delay=29@lab-w8-100mbit-pieces" \
  --baseline "DDP dense" --baseline "powersgd:rank=2 (best per-step)" --svg $O/curves-w8-100mbit-pieces.svg \
  --title "MLP, 8 workers, 100 Mbit/s + 48 ms, fragments of equal size: test accuracy against wall-clock time"
echo
# What the delay costs (2026-11-28, a new machine): five seeds, then the v5-d4 sitting.
python3 scripts/seed_table.py $O/seeds/summaries.jsonl --prefix v5/ --baseline v5/dense \
  --label "v5/dense=dense" --label "v5/h45f1d0=H=45 (no fragments, no delay)" \
  --label "v5/h45f3d0=H=45, 3 fragments, no delay" --label "v5/h45f3d4=H=45, 3 fragments, delay 4" \
  --label "v5/h60f6d6=H=60, 6 fragments, delay 6" --label "v5/h30f5d5=H=30, 5 fragments, delay 5" \
  --label "v5/h45f5d8=H=45, 5 fragments, delay 8" --label "v5/h60f6d9=H=60, 6 fragments, delay 9" \
  --label "v5/h45f3d14=H=45, 3 fragments, delay 14" --label "v5/h90f3d14=H=90, 3 fragments, delay 14" \
  --label "v5/h45f3d14mix5=H=45, 3 fragments, delay 14, --mix 0.5" \
  --label "v5/h45f3d14avg=H=45, 3 fragments, delay 14, --outer average" \
  --label "v5/h45f3d14-eager=H=45, 3 fragments, delay 14, eager (dropped)" \
  --label "v5/qsgd16-h45f3d4=qsgd:levels=16, H=45, 3 fragments, delay 4" \
  --label "v5/efsign32-h45f3d4=efsign:block=32, the same" --label "v5/2bit-h45f3d4=2bit, the same"
echo
# The baselines of the later sittings (the dense target, DDP dense and the best per-step
# method, from the first machine's curves), and the columns they give.
baselines=(--target-row "gradcomp dense" --target-step 234
  --row "gradcomp dense|$C/dense.jsonl|none" --row "DDP dense|$C/dense.jsonl|ddp dense"
  --row "powersgd:rank=2 (best per-step)|$C/powersgd2.jsonl|powersgd:rank=2")
baseline_columns=(--baseline "DDP dense" --baseline "powersgd:rank=2 (best per-step)")
python3 scripts/outer_loop_report.py --lab $O/lab-100mbit-v5-d4 \
  "${baselines[@]}" \
  --row "fp16, H=45, 3 fragments, delay 14|$C/pieces-h45f3d14.jsonl|fp16+--sync-every=45+--fragments=3+--delay=14" \
  --row "fp16, H=45, 3 fragments, delay 4|$C/v5-h45f3d4.jsonl|fp16+--sync-every=45+--fragments=3+--delay=4" \
  "${baseline_columns[@]}"
echo
# The scatter reducer and 4-bit pseudo-gradients (2026-12-01, an AMD EPYC VM): five seeds,
# then the lab sitting v6-scatter.
python3 scripts/seed_table.py $O/seeds/summaries.jsonl --prefix v6/ --baseline v6/dense \
  --label "v6/dense=dense" --label "v6/h45f3d4-fp16=fp16 (allreduce), H=45, 3 fragments, delay 4" \
  --label "v6/h45f3d4-int-scatter=int + scatter, H=45, 3 fragments, delay 4" \
  --label "v6/h45f3d2-int-scatter=int + scatter, H=45, 3 fragments, delay 2" \
  --label "v6/h45f3d2-int-scatter-fp32slices=the same, uncompressed buckets as fp32 slices" \
  --label "v6/h45f3d1-int-scatter=int + scatter, H=45, 3 fragments, delay 1 (fp32 slices)"
echo
python3 scripts/outer_loop_report.py --lab $O/lab-100mbit-v6-scatter \
  "${baselines[@]}" \
  --row "fp16, H=45, 3 fragments, delay 4|$C/v5-h45f3d4.jsonl|fp16+--sync-every=45+--fragments=3+--delay=4" \
  --row "int + scatter, H=45, 3 fragments, delay 2|$C/v6-h45f3d2-int-scatter.jsonl|int+--sync-every=45+--fragments=3+--delay=2+--reducer=scatter" \
  "${baseline_columns[@]}"
echo
# The same after the uncompressed buckets joined the scatter as fp32 slices: the sitting
# lab-100mbit-v6-fp32slices for the outer-loop rows, v6-scatter's for the baselines.
python3 scripts/outer_loop_report.py --lab $O/lab-100mbit-v6-scatter --lab $O/lab-100mbit-v6-fp32slices \
  "${baselines[@]}" \
  --row "int + scatter, H=45, 3 fragments, delay 1|$C/v6-h45f3d1-int-scatter.jsonl|int+--sync-every=45+--fragments=3+--delay=1+--reducer=scatter@lab-100mbit-v6-fp32slices" \
  --row "int + scatter, H=45, 3 fragments, delay 2|$C/v6-h45f3d2-int-scatter.jsonl|int+--sync-every=45+--fragments=3+--delay=2+--reducer=scatter@lab-100mbit-v6-fp32slices" \
  "${baseline_columns[@]}"
