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

# A failed run (the loss turns nan at --lr 1e30) must not destroy the metrics of the run
# before it (it truncated the file to 0 bytes): the file stays as it was, and the failed
# run's own lines are in FILE.partial.
if [ -s m.jsonl ]; then
  cp m.jsonl keepm.jsonl && cp m.jsonl keepm.before
  "$GRADCOMP" train --dataset synthetic --synthetic-train 512 --mlp-hidden 32 --batch-size 16 \
    --threads 1 --workers 2 --steps 20 --lr 1e30 --warmup-steps 0 --timeout-ms 8000 \
    --metrics "$WORK/keepm.jsonl" > keepm.txt 2> keepm.err
  rc=$?
  if [ "$rc" -ne 0 ] && cmp -s keepm.jsonl keepm.before && [ -e keepm.jsonl.partial ]; then
    pass "a failed run leaves the previous metrics file as it was (exit $rc)"
  else
    fail "a failed run and the previous metrics (exit $rc)"; ls -l keepm.*; cat keepm.err
  fi
  # The next run that finishes replaces both.
  if "$GRADCOMP" train --dataset synthetic --synthetic-train 512 --mlp-hidden 32 --batch-size 16 \
       --threads 1 --workers 2 --steps 3 --timeout-ms 8000 --metrics "$WORK/keepm.jsonl" \
       > keepm.txt 2> keepm.err &&
     [ "$(grep -c '"type":"summary"' keepm.jsonl)" -eq 1 ] && [ ! -e keepm.jsonl.partial ]; then
    pass "a finished run writes its metrics over the file"
  else
    fail "metrics after a finished run"; ls -l keepm.*; cat keepm.err
  fi
fi

# OpenBLAS's kernels: on a CPU with AVX2 the run never uses the generic Prescott ones
# (Debian's OpenBLAS falls back to them on CPUs it does not know; gradcomp-torch then sets
# OPENBLAS_CORETYPE, tools/gradcomp/blas_core.h), and a core the user names stands.
if grep -q "OpenBLAS" run1.txt && grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo; then
  if env -u OPENBLAS_CORETYPE "$GRADCOMP" train --workers 2 "${small[@]}" --steps 2 > blas1.txt 2>&1 &&
     grep -qE '^ +BLAS ' blas1.txt && ! grep -E '^ +BLAS ' blas1.txt | grep -q "Prescott" &&
     OPENBLAS_CORETYPE=Haswell "$GRADCOMP" train --workers 1 "${small[@]}" --steps 2 > blas2.txt 2>&1 &&
     grep -E '^ +BLAS ' blas2.txt | grep -q "Haswell" && ! grep -q "fell back" blas2.txt; then
    pass "OpenBLAS: no generic kernels on an AVX2 CPU; OPENBLAS_CORETYPE stands"
  else
    fail "OpenBLAS kernels"; cat blas1.txt blas2.txt
  fi
fi

# The same seed gives the same accuracy and loss (to the printed digits).
"$GRADCOMP" train --workers 3 --compressor "ef(topk:ratio=0.05)" "${small[@]}" > run2.txt 2>/dev/null
if [ "$(grep -E '^  test (accuracy|loss)' run1.txt)" = "$(grep -E '^  test (accuracy|loss)' run2.txt)" ] &&
   [ -n "$(grep -E 'test accuracy' run1.txt)" ]; then
  pass "same seed, same result"
else
  fail "same seed, same result"; diff run1.txt run2.txt
fi

# Error feedback with momentum correction (efm) runs and learns; the optimizer then
# leaves the compressed layers' momentum to the memory.
if "$GRADCOMP" train --workers 2 --compressor "efm(topk:ratio=0.05)" "${small[@]}" > efm.txt \
     2> efm.err && awk -v a="$(sed -n 's/^  test accuracy *//p' efm.txt)" 'BEGIN { exit !(a > 0.5) }'
then
  pass "efm(topk): $(grep -E '^  test accuracy' efm.txt | tr -s ' ')"
else
  fail "efm(topk)"; cat efm.err efm.txt
fi

# A bare biased codec gets momentum-corrected error feedback under momentum SGD (the
# default --momentum 0.9), plain error feedback without momentum; the report says which.
"$GRADCOMP" train --workers 2 --compressor "topk:ratio=0.05" "${small[@]}" --steps 4 > bare.txt 2>&1
"$GRADCOMP" train --workers 2 --compressor "topk:ratio=0.05" "${small[@]}" --steps 4 \
  --momentum 0 > bare0.txt 2>&1
if grep -qE '^  compressor +efm\(topk:ratio=0.05\)$' bare.txt &&
   grep -qE '^  compressor +ef\(topk:ratio=0.05\)$' bare0.txt; then
  pass "bare topk: efm under momentum, ef without"
else
  fail "bare topk's default memory"; grep -h compressor bare.txt bare0.txt
fi

# AdamW (--optimizer adamw) learns; a bare biased codec gets plain error feedback under it
# (AdamW has no momentum for a memory to carry); its checkpoint resumes under adamw and
# an SGD run's is refused in one line.
rm -rf "$WORK/adamw-ckpt"
if "$GRADCOMP" train --workers 2 --optimizer adamw --lr 3e-3 --weight-decay 0.01 \
     --compressor "topk:ratio=0.05" "${small[@]}" --epochs 1 --checkpoint-dir "$WORK/adamw-ckpt" \
     > adamw.txt 2> adamw.err &&
   grep -qE '^  compressor +ef\(topk:ratio=0.05\)$' adamw.txt &&
   awk -v a="$(sed -n 's/^  test accuracy *//p' adamw.txt)" 'BEGIN { exit !(a > 0.5) }'; then
  pass "adamw learns, ef(topk): $(grep -E '^  test accuracy' adamw.txt | tr -s ' ')"
else
  fail "adamw"; cat adamw.err adamw.txt
fi
if "$GRADCOMP" train --workers 2 --optimizer adamw --lr 3e-3 --weight-decay 0.01 \
     --compressor "topk:ratio=0.05" "${small[@]}" --epochs 2 --steps 60 \
     --checkpoint-dir "$WORK/adamw-ckpt" --resume > adamw2.txt 2> adamw2.err &&
   grep -q "resumed from" adamw2.txt; then
  pass "adamw resumes from its checkpoint"
else
  fail "adamw resume"; cat adamw2.err adamw2.txt
fi
"$GRADCOMP" train --workers 2 --compressor "topk:ratio=0.05" "${small[@]}" --epochs 2 \
  --checkpoint-dir "$WORK/adamw-ckpt" --resume > sgd-on-adamw.txt 2> sgd-on-adamw.err
rc=$?
if [ "$rc" -eq 1 ] && [ "$(wc -l < sgd-on-adamw.err)" -eq 1 ] && [ ! -s sgd-on-adamw.txt ] &&
   grep -q "written by an --optimizer adamw run, this run's is sgd" sgd-on-adamw.err; then
  pass "an adamw checkpoint under sgd is refused: $(grep -m1 'optimizer adamw run' sgd-on-adamw.err)"
else
  fail "adamw checkpoint under sgd (exit $rc)"; cat sgd-on-adamw.err
fi

# The byte-level language model on Debian's fortunes: within 60 steps of 32-byte windows
# (13 s on a 2-core Zen 3 VM; 80 steps of 64 bytes took 36 s) its test perplexity drops
# below the unigram baseline's (25.6 against 28.0), and the report and the metrics say the
# figure is perplexity.
if [ -d /usr/share/games/fortunes ]; then
  if "$GRADCOMP" train --workers 1 --threads 1 --model transformer --dataset fortunes \
       --optimizer adamw --lr 5e-3 --lr-decay constant --warmup-steps 5 --batch-size 32 \
       --context 32 --steps 60 --compressor none --metrics "$WORK/lm.jsonl" > lm.txt 2> lm.err; then
    summary=$(grep '"type":"summary"' lm.jsonl)
    ppl=$(echo "$summary" | grep -o '"test_perplexity":[0-9.e+-]*' | cut -d: -f2)
    unigram=$(echo "$summary" | grep -o '"unigram_perplexity":[0-9.e+-]*' | cut -d: -f2)
    if echo "$summary" | grep -q '"figure":"perplexity"' && grep -q '^  test perplexity' lm.txt &&
       grep -q '^  unigram baseline' lm.txt && ! grep -q '^  test accuracy' lm.txt &&
       grep -q 'test ppl' lm.txt && awk -v p="$ppl" -v u="$unigram" 'BEGIN { exit !(p > 0 && p < u) }'
    then
      pass "transformer on fortunes: test perplexity $ppl < unigram $unigram after 60 steps"
    else
      fail "transformer on fortunes: perplexity '$ppl', unigram '$unigram'"; cat lm.txt
    fi
  else
    fail "transformer on fortunes"; cat lm.err lm.txt
  fi
else
  echo "skip transformer on fortunes: /usr/share/games/fortunes absent (scripts/install-deps.sh)"
fi

# Without --compressor each --reducer gets a codec it can run: allreduce the linear fp16,
# allgather top-k, dense none; auto PowerSGD.
ok=1
for pair in "allreduce=fp16" "allgather=efm(topk:ratio=0.01)" "dense=none" "auto=powersgd"; do
  r=${pair%%=*}; want=${pair#*=}
  "$GRADCOMP" train --workers 2 --reducer "$r" "${small[@]}" --steps 2 > red.txt 2>&1 || ok=0
  got=$(sed -n 's/^  compressor  *//p' red.txt)
  [ "$got" = "$want" ] || { ok=0; echo "--reducer $r: compressor '$got', expected '$want'"; }
done
if [ $ok = 1 ]; then pass "default compressor per --reducer"; else
  fail "default compressor per --reducer"; tail -3 red.txt; fi

# A run whose loss climbs far above guessing's while staying finite says so, once:
# FetchSGD's one-row sketch at lr 0.1 on this tiny job (loss 2.2, 6.7, 109); dense does not.
tiny=(--dataset synthetic --synthetic-train 2048 --mlp-hidden 128 --batch-size 32 --epochs 3
      --lr 0.1 --seed 7 --timeout-ms 8000)
"$GRADCOMP" train --workers 2 --compressor fetchsgd "${tiny[@]}" > div.txt 2>&1
"$GRADCOMP" train --workers 2 --compressor none "${tiny[@]}" > nodiv.txt 2>&1
if [ "$(grep -c "^warning: epoch 2's training loss .* the run is diverging" div.txt)" = 1 ] &&
   ! grep -q 'diverging' nodiv.txt; then
  pass "a diverging run is named, once"
else
  fail "divergence warning"; grep -h -E '^(epoch|warning)' div.txt nodiv.txt
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

# The outer loop (--sync-every): stopped at step 46, a step whose delayed round is still
# to be merged (rounds of 2 fragments every 4 steps, merged 1 step later), and resumed,
# it ends with checkpoints byte-identical to an uninterrupted run's (the replica, the
# global weights, the outer momentum, every rank's error feedback; under the scatter
# reducer each rank's memory of every slice and its owner memory).
for recipe in "allgather(ef(topk|--compressor ef(topk:ratio=0.05) --outer sparseloco:lr=0.9,decay=0.8" \
              "scatter(ef(int|--compressor int --reducer scatter"; do
  header=${recipe%%|*}
  read -r -a flags <<< "${recipe#*|}"
  outer=(--sync-every 4 --fragments 2 --delay 1 "${flags[@]}")
  rm -rf ck_full ck_split
  "$GRADCOMP" train --workers 3 "${outer[@]}" "${small[@]}" --checkpoint-dir ck_full \
    > outer.txt 2> e.txt &&
  "$GRADCOMP" train --workers 3 "${outer[@]}" "${small[@]}" --checkpoint-dir ck_split \
    --steps 46 > /dev/null 2>> e.txt &&
  "$GRADCOMP" train --workers 3 "${outer[@]}" "${small[@]}" --checkpoint-dir ck_split \
    --resume > resumed.txt 2>> e.txt
  status=$?
  same=1
  for r in 0 1 2; do cmp -s "ck_full/rank-$r.ckpt" "ck_split/rank-$r.ckpt" || same=0; done
  if [ $status -eq 0 ] && [ $same -eq 1 ] && grep -q "resumed from .* at step 46" resumed.txt &&
     grep -q "reducer  *.* every 4 steps over $header" outer.txt; then
    pass "outer loop over $header...), 2 fragments, delay 1: stopped at step 46 and resumed == uninterrupted"
  else
    fail "outer loop over $header...) resume (exit $status, identical $same)"; cat e.txt resumed.txt outer.txt
  fi
done
# Killed while rank 0 had written an epoch's checkpoint and rank 1 had not: the ranks
# agree on the newest step both hold (rank 0 keeps its previous checkpoint as .prev).
rm -rf ck_lag ck_ref
"$GRADCOMP" train --workers 2 --compressor 2bit "${small[@]}" --checkpoint-dir ck_ref > /dev/null 2> e.txt &&
"$GRADCOMP" train --workers 2 --compressor 2bit "${small[@]}" --checkpoint-dir ck_lag --steps 48 \
  > /dev/null 2>> e.txt && cp ck_lag/rank-1.ckpt rank-1.at48 &&
"$GRADCOMP" train --workers 2 --compressor 2bit "${small[@]}" --checkpoint-dir ck_lag --resume \
  > /dev/null 2>> e.txt && cp rank-1.at48 ck_lag/rank-1.ckpt && rm ck_lag/rank-1.ckpt.prev &&
"$GRADCOMP" train --workers 2 --compressor 2bit "${small[@]}" --checkpoint-dir ck_lag --resume \
  > resumed.txt 2>> e.txt
status=$?
if [ $status -eq 0 ] && grep -q "resumed from ck_lag/rank-0.ckpt.prev at step 48" resumed.txt &&
   cmp -s ck_ref/rank-0.ckpt ck_lag/rank-0.ckpt && cmp -s ck_ref/rank-1.ckpt ck_lag/rank-1.ckpt; then
  pass "ranks one epoch apart resume together from the older step == uninterrupted"
else
  fail "ranks one epoch apart (exit $status)"; cat e.txt resumed.txt
fi
rm -f ck_lag/rank-1.ckpt ck_lag/rank-1.ckpt.prev
"$GRADCOMP" train --workers 2 --compressor 2bit "${small[@]}" --checkpoint-dir ck_lag --resume \
  > /dev/null 2> e.txt
if [ $? -ne 0 ] && grep -q "share no step (rank 0: 96, 48; rank 1: none)" e.txt; then
  pass "ranks with no common checkpoint: refused, naming what each holds"; else
  fail "ranks with no common checkpoint"; cat e.txt; fi

# One local worker is a world of one, with no rendezvous flags or environment.
if env -u RANK -u WORLD_SIZE "$GRADCOMP" train --workers 1 "${small[@]}" --steps 5 > w1.txt 2> e.txt &&
   grep -q "== gradcomp train report ==" w1.txt; then
  pass "--workers 1 runs alone"; else fail "--workers 1"; cat e.txt; fi
# ... and its report says that it sent nothing instead of a ratio of zero.
if grep -q "^  sent per worker per step *nothing (a single worker has no peers)" w1.txt &&
   grep -q "^  compression ratio *- (nothing is sent)" w1.txt && ! grep -q "0\.0x" w1.txt; then
  pass "--workers 1: the report says nothing is sent"; else fail "--workers 1 report"; cat w1.txt; fi

# Shards of 501 and 500 samples in batches of 167: counted per rank, 3 and 2 steps an
# epoch, and the run failed at the first epoch's end ("lost rank" from the rank left
# waiting). Every rank takes the smallest shard's steps.
if "$GRADCOMP" train --workers 2 --dataset synthetic --synthetic-train 1001 --batch-size 167 \
     --mlp-hidden 32 --epochs 2 --threads 1 > us.txt 2> e.txt &&
   grep -qE "^  steps \(epochs\) +4 \(2\)" us.txt; then
  pass "unequal shards: every rank takes the smallest shard's steps"; else
  fail "unequal shards"; cat e.txt; tail -5 us.txt; fi

# Bad input: one line, exit 1, before any worker starts.
"$GRADCOMP" train --workers 2 --compressor 'topk:ratio=7' "${small[@]}" > /dev/null 2> e.txt
status=$?
if [ $status -eq 1 ] && [ "$(wc -l < e.txt)" -eq 1 ] && grep -q "^gradcomp: topk: ratio=7" e.txt; then
  pass "bad compressor: one line, exit 1"; else fail "bad compressor (exit $status)"; cat e.txt; fi
"$GRADCOMP" train --workers 2 --dataset fashion-mnist --data-dir "$WORK/none" "${small[@]:2}" > /dev/null 2> e.txt
status=$?
if [ $status -ne 0 ] && grep -q "none" e.txt; then pass "missing data dir names it"; else
  fail "missing data dir (exit $status)"; cat e.txt; fi

# signal_last_rank SIGNAL LABEL ERROR_REGEX READY_REGEX ARGS...: starts `train ARGS`
# (which must name a file in $WORK, so that only this test's processes match it), waits
# until its output matches READY_REGEX, sends SIGNAL (KILL: a dead worker, STOP: a hung
# one) to the launcher's last-started rank, and expects the run to fail within 30 s with
# an error matching ERROR_REGEX and leave no process behind.
signal_last_rank() {
  local sig=$1 label=$2 error_re=$3 ready_re=$4
  shift 4
  "$GRADCOMP" train "$@" > k.txt 2> kerr.txt &
  local launcher=$! victim="" start status took
  for _ in $(seq 100); do
    victim=$(pgrep -P "$launcher" | tail -n 1)
    [ -n "$victim" ] && grep -q "$ready_re" k.txt 2>/dev/null && break
    sleep 0.2
  done
  sleep 1
  start=$(date +%s)
  kill -"$sig" "$victim" 2>/dev/null
  wait "$launcher"
  status=$?
  took=$(( $(date +%s) - start ))
  if [ $status -ne 0 ] && [ $took -lt 30 ] && grep -q "$error_re" kerr.txt; then
    pass "$label: run fails in ${took}s ($(tail -n 1 kerr.txt))"
  else
    fail "$label (exit $status after ${took}s)"; cat kerr.txt
  fi
  sleep 0.5
  if pgrep -f -- "$WORK" > /dev/null; then fail "$label: processes left behind"; pgrep -af -- "$WORK";
  else pass "$label: no process left behind"; fi
}

# A worker killed mid-run ends the whole run with an error naming it, within the
# timeout, and leaves no process behind. The surviving ranks' own lines name the rank
# they lost (the last started, rank 2), not just the launcher's.
signal_last_rank KILL "killed worker" "^gradcomp: .*: lost rank 2: " "^epoch\|^model" \
  --workers 3 --compressor 2bit "${small[@]}" --epochs 50

# A worker that hangs (here: stopped) ends the run within the timeout too; the message
# names it, since the ranks that fail first are only the ones that timed out waiting.
signal_last_rank STOP "stopped worker" "training failed: .*rank 2 (stopped) was still running" \
  "^epoch\|^model" --workers 3 --compressor 2bit "${small[@]}" --epochs 50 --timeout-ms 3000
# The stopped rank still holds its connections: no surviving rank may say it lost it.
if grep -q "lost rank 2" kerr.txt; then fail "stopped worker named as lost"; cat kerr.txt;
else pass "stopped worker: no rank claims to have lost it"; fi
# The outer loop: a worker killed between rounds ends every rank at the next round,
# naming it. Averaged (--outer average): with the default Nesterov outer step, H = 4 and
# --lr 0.1 this run diverges, and at epoch 14 (about 1.2 s in) its fp16 pseudo-gradients'
# sum overflows, which ended the run before the kill did about one time in twenty.
signal_last_rank KILL "outer loop, killed worker" "^gradcomp: .*: lost rank 2: " "^epoch\|^model" \
  --workers 3 --sync-every 4 --outer average "${small[@]}" --epochs 50

# ---- parameter server (--topology ps-sync / ps-async)
ps=(--dataset synthetic --synthetic-train 2048 --mlp-hidden 128 --batch-size 32 --epochs 1
    --lr 0.1 --seed 7 --timeout-ms 8000)

# ps-sync with a dense downlink is the allgather reducer: with 2 workers the dense sums
# are even bit-identical (a + b in either order), so the printed results match exactly.
"$GRADCOMP" train --workers 2 --compressor "ef(topk:ratio=0.05)" --reducer allgather "${ps[@]}" \
  > ag.txt 2> ag.err
"$GRADCOMP" train --workers 2 --servers 1 --topology ps-sync --compressor "ef(topk:ratio=0.05)" \
  "${ps[@]}" --metrics "$WORK/ps.jsonl" > pss.txt 2> pss.err
if [ -n "$(grep -E '^  test accuracy' ag.txt)" ] &&
   [ "$(grep -E '^  test (accuracy|loss)' ag.txt)" = "$(grep -E '^  test (accuracy|loss)' pss.txt)" ]; then
  pass "ps-sync (1 server, dense downlink) = allgather: $(grep -E '^  test accuracy' pss.txt | tr -s ' ')"
else
  fail "ps-sync = allgather"; cat ag.err pss.err; grep -E '^  test' ag.txt pss.txt
fi
if grep -q "received per worker" pss.txt && grep -q '"type":"ps"' ps.jsonl &&
   grep -q '"bytes_received_per_worker_per_step"' ps.jsonl; then
  pass "ps-sync reports bytes up and down"; else fail "ps-sync byte report"; cat pss.txt; fi

# Two servers, compressed downlink; ps-async bounded and unbounded: they run and learn.
# (MXNet's 2-bit threshold 0.5 sends next to nothing in 32 steps of this small run,
# with any topology: a smaller one here.)
for args in "--topology ps-sync --servers 2 --ps-downlink compressed --compressor ef(topk:ratio=0.05)" \
            "--topology ps-sync --servers 2 --compressor sketched-sgd:ratio=0.05,table=0.2" \
            "--topology ps-async --servers 2 --max-staleness 0 --compressor none" \
            "--topology ps-async --servers 1 --compressor 2bit:threshold=0.01"; do
  # shellcheck disable=SC2086
  if "$GRADCOMP" train --workers 2 $args "${ps[@]}" --metrics "$WORK/psa.jsonl" > r.txt 2> e.txt &&
     awk -v a="$(sed -n 's/^  test accuracy *//p' r.txt)" 'BEGIN { exit !(a > 0.3) }'; then
    pass "$args: $(grep -E '^  test accuracy' r.txt | tr -s ' ')"
  else
    fail "$args"; cat e.txt r.txt
  fi
done
if grep -q '"staleness_histogram":{"' psa.jsonl; then pass "ps-async staleness histogram"; else
  fail "ps-async staleness histogram"; cat psa.jsonl; fi

# The servers checkpoint their own state. ps-sync with a compressed downlink (the servers'
# error feedback): stopped at step 45 and resumed, every worker's and server's checkpoint
# is byte-identical to an uninterrupted run's; without the servers' files, resume fails.
pss=(--workers 2 --servers 2 --topology ps-sync --ps-downlink compressed
     --compressor "ef(topk:ratio=0.05)" "${small[@]}")
rm -rf ck_full ck_split
"$GRADCOMP" train "${pss[@]}" --checkpoint-dir ck_full > /dev/null 2> e.txt &&
"$GRADCOMP" train "${pss[@]}" --checkpoint-dir ck_split --steps 45 > /dev/null 2>> e.txt &&
"$GRADCOMP" train "${pss[@]}" --checkpoint-dir ck_split --resume > resumed.txt 2>> e.txt
status=$?
files=$(cd ck_full && ls)
same=1
for f in $files; do cmp -s "ck_full/$f" "ck_split/$f" || same=0; done
if [ $status -eq 0 ] && [ $same -eq 1 ] && echo "$files" | grep -q "^server-1.step-96.ckpt$" &&
   grep -q "resumed from .* at step 45" resumed.txt; then
  pass "ps-sync, compressed downlink: stopped and resumed == uninterrupted ($(echo $files))"
else
  fail "ps-sync compressed downlink resume (exit $status, identical $same: $(echo $files))"
  cat e.txt resumed.txt
fi
# Killed after the servers saved an epoch but before the workers did: the workers resume
# one epoch back, which the servers still hold (they keep two).
rm -rf ck_two && mkdir -p kept
"$GRADCOMP" train "${pss[@]}" --checkpoint-dir ck_two --steps 48 > /dev/null 2> e.txt &&
  cp ck_two/rank-*.ckpt kept/ &&
"$GRADCOMP" train "${pss[@]}" --checkpoint-dir ck_two --resume > /dev/null 2>> e.txt &&
  cp kept/rank-*.ckpt ck_two/ &&
"$GRADCOMP" train "${pss[@]}" --checkpoint-dir ck_two --resume > resumed.txt 2>> e.txt
status=$?
same=1
for f in $files; do cmp -s "ck_full/$f" "ck_two/$f" || same=0; done
if [ $status -eq 0 ] && [ $same -eq 1 ] && grep -q "resumed from .* at step 48" resumed.txt; then
  pass "ps-sync: workers one epoch behind their servers resume == uninterrupted"
else
  fail "ps-sync: workers one epoch behind (exit $status, identical $same)"; cat e.txt resumed.txt
fi
rm -rf ck_split
"$GRADCOMP" train "${pss[@]}" --checkpoint-dir ck_split --steps 45 > /dev/null 2> e.txt
rm -f ck_split/server-1.*
"$GRADCOMP" train "${pss[@]}" --checkpoint-dir ck_split --resume > /dev/null 2> e.txt
if [ $? -ne 0 ] && grep -q "server 1 (rank 3): the workers resume at step 45 but this server has no checkpoint" e.txt; then
  pass "ps-sync resume without a server's checkpoint fails, naming it"; else
  fail "ps-sync resume without a server's checkpoint"; cat e.txt; fi

# ps-async: the server's weights version continues across the restart: 2 workers x 45
# pushes, then 2 x 51 more (files are numbered by version: 90, then 192, not 102).
psa=(--workers 2 --servers 1 --topology ps-async --compressor "2bit:threshold=0.01" "${small[@]}")
rm -rf ck_async
"$GRADCOMP" train "${psa[@]}" --checkpoint-dir ck_async --steps 45 > /dev/null 2> e.txt &&
  ls ck_async > first.txt &&
"$GRADCOMP" train "${psa[@]}" --checkpoint-dir ck_async --resume > resumed.txt 2>> e.txt
status=$?
acc=$(sed -n 's/^  test accuracy *//p' resumed.txt)
if [ $status -eq 0 ] && grep -q "^server-0.step-90.ckpt$" first.txt && [ -f ck_async/server-0.step-192.ckpt ] &&
   awk -v a="${acc:-0}" 'BEGIN { exit !(a > 0.5) }'; then
  pass "ps-async: the server resumes its weights and version (accuracy $acc)"
else
  fail "ps-async resume (exit $status)"; cat first.txt; ls ck_async; cat e.txt resumed.txt
fi

# ps-async workers drift apart and may share no checkpointed step: each resumes from its
# own newest (rank 0 from step 20, rank 1 from step 45, the server from its newest).
rm -rf ck_a ck_b ck_drift
"$GRADCOMP" train "${psa[@]}" --checkpoint-dir ck_a --steps 20 > /dev/null 2> e.txt &&
"$GRADCOMP" train "${psa[@]}" --checkpoint-dir ck_b --steps 45 > /dev/null 2>> e.txt &&
  cp -r ck_b ck_drift && cp ck_a/rank-0.ckpt ck_drift/rank-0.ckpt &&
  rm -f ck_drift/rank-0.ckpt.prev &&
"$GRADCOMP" train "${psa[@]}" --checkpoint-dir ck_drift --resume > drift.txt 2>> e.txt
status=$?
if [ $status -eq 0 ] && grep -q "test accuracy" drift.txt; then
  pass "ps-async: workers resume from checkpoints of different steps"
else
  fail "ps-async resume from drifted workers (exit $status)"; ls ck_drift; cat e.txt
fi

# Flags that do not fit a topology are refused before anything starts.
"$GRADCOMP" train --workers 2 --topology ps-sync --max-staleness 1 "${ps[@]}" > /dev/null 2> e.txt
if [ $? -eq 1 ] && grep -q "max-staleness" e.txt; then pass "--max-staleness needs ps-async"; else
  fail "--max-staleness with ps-sync"; cat e.txt; fi
# ps-async servers apply momentum themselves: a memory that carries it would apply it twice.
"$GRADCOMP" train --workers 2 --topology ps-async --compressor "efm(topk:ratio=0.05)" "${ps[@]}" \
  > /dev/null 2> e.txt
if [ $? -eq 1 ] && grep -q "applied twice" e.txt && [ "$(wc -l < e.txt)" -eq 1 ]; then
  pass "ps-async refuses a momentum-carrying memory"; else
  fail "ps-async with efm"; cat e.txt; fi

# Methods that keep the compressed tensors' momentum themselves must use the optimizer's.
for spec in "dgc:density=0.01" "sketched-sgd:k=50" "fetchsgd:k=50,momentum=0.95"; do
  "$GRADCOMP" train --workers 2 --compressor "$spec" --momentum 0.5 "${small[@]}" \
    > /dev/null 2> e.txt
  if [ $? -eq 1 ] && grep -q "differs from the optimizer's momentum 0.5" e.txt && [ "$(wc -l < e.txt)" -eq 1 ]; then
    pass "$spec with --momentum 0.5 is refused"; else
    fail "$spec with --momentum 0.5"; cat e.txt; fi
done
"$GRADCOMP" train --workers 2 --compressor "dgc:density=0.01,nesterov=1" "${small[@]}" \
  > /dev/null 2> e.txt
if [ $? -eq 1 ] && grep -q "nesterov" e.txt && [ "$(wc -l < e.txt)" -eq 1 ]; then
  pass "dgc nesterov=1 without --nesterov is refused"; else
  fail "dgc nesterov without --nesterov"; cat e.txt; fi

# A killed server ends the run with an error naming the rank and its role.
signal_last_rank KILL "killed server" "rank 2 .*(server 0)" "^model" --workers 2 --servers 1 \
  --topology ps-sync --compressor 2bit "${ps[@]}" --metrics "$WORK/kill.jsonl" --epochs 50

# The evaluator reads the run's checkpoints: one JSON line each, the same accuracy. The
# run is a parameter server's, whose server-*.ckpt files (no model) it passes over.
"$GRADCOMP" train --workers 2 --servers 1 --topology ps-sync --ps-downlink compressed \
  --compressor "ef(topk:ratio=0.05)" "${ps[@]}" --checkpoint-dir "$WORK/ck" > t.txt 2> /dev/null
"$GRADCOMP" eval --checkpoint-dir "$WORK/ck" --dataset synthetic --synthetic-train 2048 \
  --mlp-hidden 128 --seed 7 > ev.jsonl 2> ev.err
want=$(sed -n 's/^  test accuracy *//p' t.txt)
got=$(grep '"file":"rank-0.ckpt"' ev.jsonl | sed 's/.*"test_accuracy":\([0-9.e-]*\).*/\1/')
if [ "$(wc -l < ev.jsonl)" -eq 2 ] && awk -v a="$want" -v b="${got:-x}" 'BEGIN { exit !(a - b < 1e-4 && b - a < 1e-4) }'; then
  pass "eval: 2 checkpoints, accuracy $got = $want"
else
  fail "eval (want $want)"; cat ev.err ev.jsonl
fi
# Another seed draws other synthetic data: refused, naming the run's (it evaluated the
# model on other data and exited 0).
"$GRADCOMP" eval --checkpoint-dir "$WORK/ck" --dataset synthetic --synthetic-train 2048 \
  --mlp-hidden 128 --seed 8 > ev8.jsonl 2> ev8.err
status=$?
if [ "$status" -eq 1 ] && [ "$(wc -l < ev8.err)" -eq 1 ] && grep -q "^gradcomp: eval: rank-0.ckpt was trained with --seed 7; --seed 8 draws other synthetic data (give --seed 7)$" ev8.err; then
  pass "eval --seed other than the run's: refused"
else
  fail "eval --seed 8 (status $status)"; cat ev8.err ev8.jsonl
fi
# --follow: picks up a checkpoint written while it waits, stops when idle.
rm -rf "$WORK/ck2"; mkdir -p "$WORK/ck2"
"$GRADCOMP" eval --checkpoint-dir "$WORK/ck2" --follow --idle-seconds 6 --poll-ms 200 \
  --dataset synthetic --synthetic-train 2048 --mlp-hidden 128 --seed 7 > fo.jsonl 2> fo.err &
evaluator=$!
cp "$WORK/ck/rank-1.ckpt" "$WORK/ck2/rank-1.ckpt.tmp" && mv "$WORK/ck2/rank-1.ckpt.tmp" "$WORK/ck2/rank-1.ckpt"
wait $evaluator
if [ "$(grep -c '"type":"eval"' fo.jsonl)" -eq 1 ]; then pass "eval --follow"; else
  fail "eval --follow"; cat fo.err fo.jsonl; fi

# Ranks started with different models (issue #15, where rank 0 aborted inside Gloo and
# rank 1 saw a connection reset): both stop at rendezvous, within seconds, with exit 1
# and the same one line naming the parameter and both shapes.
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
mismatch=(--dataset synthetic --synthetic-train 512 --batch-size 32 --steps 5 --seed 7
          --timeout-ms 20000 --threads 1)
# mismatch_case NAME WANT_REGEX "RANK0 FLAGS" "RANK1 FLAGS": both ranks exit 1 within 15 s
# with exactly the line WANT_REGEX.
mismatch_case() {
  local name=$1 want=$2 port started status0 status1 took rank0 rank1
  local -a f0 f1
  read -ra f0 <<< "$3"
  read -ra f1 <<< "$4"
  port=$(free_port)
  started=$SECONDS
  RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
    "$GRADCOMP" train "${mismatch[@]}" "${f0[@]}" > mm0.txt 2> mm0.err &
  rank0=$!
  RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
    "$GRADCOMP" train "${mismatch[@]}" "${f1[@]}" > mm1.txt 2> mm1.err &
  rank1=$!
  wait $rank0; status0=$?
  wait $rank1; status1=$?
  took=$((SECONDS - started))
  if [ $status0 -eq 1 ] && [ $status1 -eq 1 ] && [ "$(wc -l < mm0.err)" -eq 1 ] &&
     [ "$(wc -l < mm1.err)" -eq 1 ] && grep -qE "$want" mm0.err && grep -qE "$want" mm1.err &&
     [ $took -lt 15 ]; then
    pass "$name: both ranks exit 1 in ${took}s: $(cat mm0.err)"
  else
    fail "$name (exit $status0 / $status1, ${took}s)"; cat mm0.err mm1.err
  fi
}
mismatch_case "different --mlp-hidden" \
  '^gradcomp: ranks disagree on model parameter 1 \(fc1\.weight\) shape: rank 0 has \[256, 784\], rank 1 has \[512, 784\]$' \
  "--mlp-hidden 256,256" "--mlp-hidden 512,256"
# Exchange groups decide which collectives run: ranks must agree on them too.
# (The value compared is the one in effect: a compressed exchange's default is 25.)
mismatch_case "different --min-group-mb" \
  '^gradcomp: ranks disagree on --min-group-mb: rank 0 has 25, rank 1 has 1$' \
  "--mlp-hidden 64" "--mlp-hidden 64 --min-group-mb 1"

# Rendezvous failures are one line each, c10d's and Gloo's own logs (a stack trace per
# failed connect try) kept quiet. A rank whose rank 0 never starts:
port=$(free_port)
RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
  "$GRADCOMP" train "${mismatch[@]}" --timeout-ms 1500 > rz.txt 2> rz.err
status=$?
if [ $status -eq 1 ] && [ "$(wc -l < rz.err)" -eq 1 ] &&
   grep -qE "^gradcomp: rendezvous: TCPStore at 127\.0\.0\.1:$port: " rz.err; then
  pass "no rank 0: exit 1, one line: $(cat rz.err)"
else
  fail "no rank 0 (exit $status)"; cat rz.err
fi
# Ranks started with different world sizes: rank 1 names both, rank 0 asks.
port=$(free_port)
RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
  "$GRADCOMP" train "${mismatch[@]}" --timeout-ms 3000 > ws0.txt 2> ws0.err &
rank0=$!
RANK=1 WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
  "$GRADCOMP" train "${mismatch[@]}" --timeout-ms 3000 > ws1.txt 2> ws1.err
status1=$?
wait $rank0; status0=$?
if [ $status0 -eq 1 ] && [ $status1 -eq 1 ] && [ "$(wc -l < ws0.err)" -eq 1 ] &&
   [ "$(wc -l < ws1.err)" -eq 1 ] &&
   grep -qx "gradcomp: rendezvous: rank 0 started a world of 2 ranks, rank 1 a world of 3: every rank needs the same world size" ws1.err &&
   grep -q "with the same world size?)$" ws0.err; then
  pass "different world sizes: one line each: $(cat ws1.err)"
else
  fail "different world sizes (exit $status0 / $status1)"; cat ws0.err ws1.err
fi

# A parameter server takes part in the check: a server started with another compressor
# than the workers stops them all before the first push.
port=$(free_port)
pids=()
for r in 0 1 2; do
  spec="ef(topk:ratio=0.05)"; [ $r -eq 2 ] && spec=2bit
  RANK=$r WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
    "$GRADCOMP" train "${mismatch[@]}" --mlp-hidden 128 --topology ps-sync --servers 1 \
    --compressor "$spec" > ps$r.txt 2> ps$r.err &
  pids+=($!)
done
statuses=""
for p in "${pids[@]}"; do wait "$p"; statuses+="$? "; done
want='^gradcomp: ranks disagree on --compressor: rank 0 has ef\(topk:ratio=0\.05.*\), rank 2 has [^ ]*2bit'
if [ "$statuses" = "1 1 1 " ] && grep -qE "$want" ps0.err && grep -qE "$want" ps2.err &&
   [ "$(cat ps0.err ps1.err ps2.err | wc -l)" -eq 3 ]; then
  pass "server with another --compressor: every rank exits 1: $(cat ps2.err)"
else
  fail "server with another --compressor (exit $statuses)"; cat ps0.err ps1.err ps2.err
fi
if ! grep -q "terminate called" mm0.err mm1.err ps0.err ps1.err ps2.err; then
  pass "no 'terminate called' from any rank"; else fail "a rank aborted"; fi

[ $failures -eq 0 ] && echo "all train CLI tests passed" || echo "$failures train CLI test(s) failed"
exit $(( failures > 0 ))
