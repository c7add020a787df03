#!/usr/bin/env bash
# End-to-end tests of `gradcomp train` with real worker processes over Gloo on
# 127.0.0.1 (ctest: cli.train). Synthetic data keeps each run to a few seconds.
#   usage: train_test.sh /path/to/gradcomp
set -uo pipefail

GRADCOMP=${1:?usage: train_test.sh /path/to/gradcomp}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/gradcomp-train.XXXXXX")
trap 'rm -rf "$WORK"; pkill -KILL -f "$WORK" 2>/dev/null' EXIT
cd "$WORK"

failures=0
pass() { echo "ok   $1"; }
fail() { echo "FAIL $1"; failures=$((failures + 1)); }

small=(--dataset synthetic --synthetic-train 3072 --mlp-hidden 128 --batch-size 32 --epochs 2
       --lr 0.1 --seed 7 --timeout-ms 8000 --metrics "$WORK/m.jsonl")

# A compressed 3-worker run finishes, reports, and writes its summary.
if "$GRADCOMP" train --workers 3 --compressor "ef(topk:ratio=0.05)" "${small[@]}" > run1.txt 2> err1.txt &&
   grep -q "== gradcomp train report ==" run1.txt && grep -q '"type":"summary"' m.jsonl; then
  pass "3 workers, top-k: report and metrics"
else
  fail "3 workers, top-k"; cat err1.txt run1.txt
fi

# The same seed gives the same accuracy and loss (to the printed digits).
"$GRADCOMP" train --workers 3 --compressor "ef(topk:ratio=0.05)" "${small[@]}" > run2.txt 2>/dev/null
if [ "$(grep -E '^  test (accuracy|loss)' run1.txt)" = "$(grep -E '^  test (accuracy|loss)' run2.txt)" ] &&
   [ -n "$(grep -E 'test accuracy' run1.txt)" ]; then
  pass "same seed, same result"
else
  fail "same seed, same result"; diff run1.txt run2.txt
fi

# Training learns: accuracy well above chance (10 classes).
acc=$(sed -n 's/^  test accuracy *//p' run1.txt)
if awk -v a="${acc:-0}" 'BEGIN { exit !(a > 0.5) }'; then pass "learns (accuracy $acc)"; else
  fail "learns (accuracy ${acc:-none})"; fi

# Every reducer path runs: allreduce (random-k), dense and a scheme (PowerSGD).
for spec in 2bit "randomk:ratio=0.05" none "powersgd:rank=2"; do
  if "$GRADCOMP" train --workers 2 --compressor "$spec" "${small[@]}" --steps 20 > r.txt 2> e.txt; then
    pass "2 workers, $spec"; else fail "2 workers, $spec"; cat e.txt; fi
done

# A resumed distributed run continues the same trajectory: stopped at step 45 (mid
# epoch 2) and resumed, it ends with checkpoints byte-identical to an uninterrupted
# run's (model, optimizer and every rank's error-feedback memory).
for spec in "2bit" "ef(topk:ratio=0.05)" "powersgd:rank=2"; do
  rm -rf ck_full ck_split
  "$GRADCOMP" train --workers 3 --compressor "$spec" "${small[@]}" --checkpoint-dir ck_full \
    > /dev/null 2> e.txt &&
  "$GRADCOMP" train --workers 3 --compressor "$spec" "${small[@]}" --checkpoint-dir ck_split \
    --steps 45 > /dev/null 2>> e.txt &&
  "$GRADCOMP" train --workers 3 --compressor "$spec" "${small[@]}" --checkpoint-dir ck_split \
    --resume > resumed.txt 2>> e.txt
  status=$?
  same=1
  for r in 0 1 2; do cmp -s "ck_full/rank-$r.ckpt" "ck_split/rank-$r.ckpt" || same=0; done
  if [ $status -eq 0 ] && [ $same -eq 1 ] && grep -q "resumed from .* at step 45" resumed.txt; then
    pass "3 workers, $spec: stopped at step 45 and resumed == uninterrupted (every rank)"
  else
    fail "3 workers, $spec: resume (exit $status, identical $same)"; cat e.txt resumed.txt
  fi
done

# Bad input: one line, exit 1, before any worker starts.
"$GRADCOMP" train --workers 2 --compressor 'topk:ratio=7' "${small[@]}" > /dev/null 2> e.txt
status=$?
if [ $status -eq 1 ] && [ "$(wc -l < e.txt)" -eq 1 ] && grep -q "^gradcomp: topk: ratio=7" e.txt; then
  pass "bad compressor: one line, exit 1"; else fail "bad compressor (exit $status)"; cat e.txt; fi
"$GRADCOMP" train --workers 2 --dataset fashion-mnist --data-dir "$WORK/none" "${small[@]:2}" > /dev/null 2> e.txt
status=$?
if [ $status -ne 0 ] && grep -q "none" e.txt; then pass "missing data dir names it"; else
  fail "missing data dir (exit $status)"; cat e.txt; fi

# A worker killed mid-run ends the whole run with an error naming it, within the
# timeout, and leaves no process behind.
"$GRADCOMP" train --workers 3 --compressor 2bit "${small[@]}" --epochs 50 > k.txt 2> kerr.txt &
launcher=$!
for _ in $(seq 100); do
  victim=$(pgrep -f -- "--epochs 50" | grep -v "^$launcher$" | tail -n 1)
  [ -n "$victim" ] && grep -q "^epoch\|^model" k.txt 2>/dev/null && break
  sleep 0.2
done
start=$(date +%s)
kill -KILL "$victim" 2>/dev/null
wait "$launcher"
status=$?
took=$(( $(date +%s) - start ))
if [ $status -ne 0 ] && [ $took -lt 30 ] && grep -q "rank [0-9]" kerr.txt; then
  pass "killed worker: run fails in ${took}s ($(head -c 120 kerr.txt | tr '\n' ' '))"
else
  fail "killed worker (exit $status after ${took}s)"; cat kerr.txt
fi
sleep 0.5
if pgrep -f -- "--epochs 50" > /dev/null; then fail "processes left behind"; pgrep -af -- "--epochs 50";
else pass "no process left behind"; fi

[ $failures -eq 0 ] && echo "all train CLI tests passed" || echo "$failures train CLI test(s) failed"
exit $(( failures > 0 ))
