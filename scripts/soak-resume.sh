#!/usr/bin/env bash
# Resume-after-kill soak: each round picks a topology and a stateful compressor it accepts,
# runs the training, SIGKILLs a random rank at a random step, resumes it with --resume from
# the checkpoints and compares the result with the uninterrupted run (computed once per
# configuration and cached).
#
#   usage: scripts/soak-resume.sh [--rounds N] [--seed S] [--only REGEX] [--gradcomp PATH] [--keep]
#   (--only: the configurations 'topology|workers|servers|spec[|drift]' matching REGEX, grep -E)
#
# allreduce and ps-sync are deterministic: every checkpoint file of the resumed run (each
# rank's, each server's) must be byte-identical to the uninterrupted run's, and so must the
# printed test accuracy and loss. ps-async is not (the order in which the server applies
# the workers' pushes depends on timing), so there the resumed run must finish, resume from
# the checkpoints and reach an accuracy within 0.05 of the uninterrupted run's.
# The kill lands in epoch 1, 2 or 3 (after 0, 1 or 2 checkpoints; see the loop below).
# Forced drift (the configurations marked 'drift', ps-async): one worker is stopped
# (SIGSTOP) after its first checkpoint until another worker's checkpoint is three epochs
# ahead of its own (they share no checkpointed step), then a random rank is killed and
# the stopped one continued; a round where that drift was not reached is retried, then
# skipped.
# Prints one line per round and a summary; exits non-zero on any mismatch or failure.
# Runs are tiny (synthetic data, 3 epochs of 32 steps); the work directory is
# build/soak-resume/ (references cached in ref/, keyed by the binary's checksum).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

rounds=20
seed=$(date +%s)
gradcomp=build/bin/gradcomp
keep=0
only=""
while [ $# -gt 0 ]; do
  case $1 in
    --rounds) rounds=${2:?--rounds needs a value}; shift 2 ;;
    --seed) seed=${2:?--seed needs a value}; shift 2 ;;
    --gradcomp) gradcomp=${2:?--gradcomp needs a path}; shift 2 ;;
    --only) only=${2:?--only needs a regex}; shift 2 ;;
    --keep) keep=1; shift ;;
    -h|--help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "soak-resume.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ -x "$gradcomp" ] || {
  echo "soak-resume.sh: $gradcomp is not built (scripts/build.sh, or --gradcomp PATH)" >&2; exit 2; }
gradcomp=$(realpath "$gradcomp")
RANDOM=$seed

work=$(realpath -m build/soak-resume)
mkdir -p "$work/ref"
binsum=$(md5sum "$gradcomp" | cut -c1-12)
launcher=""
cleanup() {
  if [ -n "$launcher" ] && kill -0 "$launcher" 2>/dev/null; then
    pkill -KILL -P "$launcher" 2>/dev/null
    kill -KILL "$launcher" 2>/dev/null
  fi
}
trap cleanup EXIT
trap 'cleanup; exit 130' INT TERM

# topology | workers | servers | compressor (those the topology accepts: the reducer
# schemes run on allreduce only; DGC carries the momentum, which ps-async's servers apply)
configs=(
  "allreduce|2|0|ef(topk:ratio=0.1)"
  "allreduce|2|0|dgc"
  "allreduce|2|0|powersgd:rank=2"
  "allreduce|2|0|fetchsgd"
  "ps-sync|2|1|ef(topk:ratio=0.1)"
  "ps-sync|2|1|dgc"
  "ps-async|2|1|ef(topk:ratio=0.1)"
  "ps-async|2|1|ef(topk:ratio=0.1)|drift"
)
if [ -n "$only" ]; then
  mapfile -t configs < <(printf '%s\n' "${configs[@]}" | grep -E -- "$only")
  [ ${#configs[@]} -gt 0 ] || { echo "soak-resume.sh: no configuration matches '$only'" >&2; exit 2; }
fi
steps_per_epoch=32  # 2048 examples / (2 workers x 32)
epochs=3
total_steps=$((steps_per_epoch * epochs))

common=(--dataset synthetic --synthetic-train 2048 --mlp-hidden 128 --batch-size 32
        --epochs "$epochs" --lr 0.1 --seed 7 --timeout-ms 8000)

# args TOPOLOGY WORKERS SERVERS SPEC [MODE]: the run's flags. Drift rounds run 6 epochs:
# a run this small trains an epoch in about 0.1 s, so the stopped worker may be an epoch
# past its first checkpoint when the stop lands, and the others need room to get three
# checkpoints ahead of it before they finish.
args_of() {
  local a=(--topology "$1" --workers "$2" --compressor "$4" "${common[@]}")
  [ "$3" -gt 0 ] && a+=(--servers "$3")
  [ "${5:-}" != drift ] || a+=(--epochs 6)
  printf '%s\n' "${a[@]}"
}

# The smallest step in the workers' checkpoints in DIR (0 while one is missing).
min_checkpoint_step() {
  local min="" r step
  for ((r = 0; r < $2; r++)); do
    step=$(od -An -t u8 -j 24 -N 8 "$1/rank-$r.ckpt" 2>/dev/null | tr -d ' ')
    [ -n "$step" ] || { echo 0; return; }
    [ -z "$min" ] || [ "$step" -lt "$min" ] && min=$step
  done
  echo "${min:-0}"
}

# The step in one rank's checkpoint (0 when it has none).
checkpoint_step() {
  local step
  step=$(od -An -t u8 -j 24 -N 8 "$1/rank-$2.ckpt" 2>/dev/null | tr -d ' ')
  echo "${step:-0}"
}

# The printed test accuracy and loss of a report.
result_of() { grep -E '^  test (accuracy|loss)' "$1" | tr -s ' ' | sed 's/^ //' | tr '\n' ' '; }
accuracy_of() { sed -n 's/^  test accuracy *//p' "$1" | head -n 1; }

passed=0
failed=0
for round in $(seq 1 "$rounds"); do
  cfg=${configs[$((RANDOM % ${#configs[@]}))]}
  IFS='|' read -r topo workers servers spec mode <<<"$cfg"
  mapfile -t args < <(args_of "$topo" "$workers" "$servers" "$spec" "$mode")
  run_steps=$total_steps
  [ "$mode" != drift ] || run_steps=$((6 * steps_per_epoch))
  world=$((workers + servers))
  key="$topo-$(printf '%s' "$spec" | tr -c 'a-zA-Z0-9=.:-' '_')${mode:+-$mode}-$binsum"
  ref="$work/ref/$key"
  if [ ! -f "$ref/done" ]; then
    rm -rf "$ref" && mkdir -p "$ref"
    t0=$(date +%s%N)
    if ! "$gradcomp" train "${args[@]}" --checkpoint-dir "$ref/ck" >"$ref/out.txt" 2>"$ref/err.txt"; then
      echo "round $round: $topo $spec: the uninterrupted run failed: $(tail -n 1 "$ref/err.txt")"
      failed=$((failed + 1)); rm -rf "$ref"; continue
    fi
    echo $((($(date +%s%N) - t0) / 1000000)) >"$ref/wall_ms"
    touch "$ref/done"
  fi
  wall_ms=$(cat "$ref/wall_ms")
  # One epoch's training time in the uninterrupted run (its report's cumulative seconds
  # after the last epoch, over the epochs): most of a run this small is start-up.
  epoch_ms=$(sed -n 's/^epoch [0-9]* step [0-9]* .* \([0-9.]*\) s$/\1/p' "$ref/out.txt" | tail -n 1 |
    awk -v e="$epochs" '{ ms = int($1 * 1000 / e) } END { print (ms > 20 ? ms : 20) }')

  run="$work/round-$round"
  # Where the kill lands: after the checkpoint of epoch 0, 1 or 2 (drawn uniformly), so
  # that resumes from step 0, 32 and 64 are all exercised (a kill timed against the wall
  # time alone mostly lands before the first checkpoint: the start-up of LibTorch and
  # Gloo is much of a run this small). Epoch 0: 10-40% of the uninterrupted run's wall
  # time after the launch. Epoch e > 0: once every worker's rank-R.ckpt holds step
  # >= 32e (checkpoints are renamed into place, so they are read whole), plus a random
  # delay of up to half an epoch's training time in the uninterrupted run (the poll
  # itself lags under load). A kill that comes after the run or the victim
  # rank has finished is retried (at most 4 attempts) with the delay halved, instead of
  # skipping the round.
  attempt=0
  retried=""
  kstatus=0
  while :; do
    attempt=$((attempt + 1))
    rm -rf "$run" && mkdir -p "$run"
    victim_rank=$((RANDOM % world))
    target_epoch=$((RANDOM % epochs))
    if [ "$target_epoch" -eq 0 ]; then
      delay_ms=$((wall_ms / 10 + RANDOM % (wall_ms * 3 / 10 + 1)))
    else
      delay_ms=$((RANDOM % (epoch_ms / 2 + 1)))
    fi
    delay_ms=$((delay_ms >> (attempt - 1)))
    t_launch=$(date +%s%N)
    "$gradcomp" train "${args[@]}" --checkpoint-dir "$run/ck" >"$run/killed.txt" 2>"$run/killed.err" &
    launcher=$!
    # Ranks are the launcher's children in rank order.
    pids=()
    for _ in $(seq 200); do
      mapfile -t pids < <(pgrep -P "$launcher" | sort -n)
      [ "${#pids[@]}" -ge "$world" ] && break
      sleep 0.05
    done
    drift=""
    if [ "$mode" = drift ]; then
      # Stop one worker until another's checkpoint is three epochs ahead of its own: they
      # share no checkpointed step (each keeps two).
      laggard=$((RANDOM % workers))
      # Once it has written its first checkpoint: stopped earlier, it may hold up the
      # servers' handshake, and every rank times out instead of drifting.
      while kill -0 "$launcher" 2>/dev/null &&
            [ "$(checkpoint_step "$run/ck" "$laggard")" -lt "$steps_per_epoch" ]; do
        sleep 0.005
      done
      kill -STOP "${pids[$laggard]}" 2>/dev/null
      while kill -0 "$launcher" 2>/dev/null; do
        lag=$(checkpoint_step "$run/ck" "$laggard")
        for ((r = 0; r < workers; r++)); do
          [ "$r" -ne "$laggard" ] || continue
          lead=$(checkpoint_step "$run/ck" "$r")
          [ "$lead" -ge $((lag + 3 * steps_per_epoch)) ] &&
            drift="rank $r at step $lead, rank $laggard stopped at $lag"
        done
        [ -z "$drift" ] || break
        sleep 0.01
      done
      delay_ms=0
    elif [ "$target_epoch" -gt 0 ]; then
      while kill -0 "$launcher" 2>/dev/null; do
        [ "$(min_checkpoint_step "$run/ck" "$workers")" -ge $((target_epoch * steps_per_epoch)) ] && break
        sleep 0.01
      done
    fi
    sleep "$(awk -v ms="$delay_ms" 'BEGIN { printf "%.3f", ms / 1000 }')"
    kill_ms=$((($(date +%s%N) - t_launch) / 1000000))
    miss=""
    if ! kill -0 "$launcher" 2>/dev/null; then
      wait "$launcher"
      launcher=""
      miss="the run ended before the kill at ${kill_ms} ms"
    else
      kill -KILL "${pids[$victim_rank]}" 2>/dev/null
      [ "$mode" != drift ] || kill -CONT "${pids[$laggard]}" 2>/dev/null
      wait "$launcher"
      kstatus=$?
      launcher=""
      # Exit 0: the victim had finished already, nothing was killed.
      [ $kstatus -ne 0 ] || miss="rank $victim_rank had finished before the kill at ${kill_ms} ms"
    fi
    [ "$mode" != drift ] || [ -n "$drift" ] || [ -n "$miss" ] || miss="no drift of three epochs"
    [ -n "$miss" ] || break
    retried+=" [attempt $attempt: $miss]"
    [ $attempt -lt 4 ] || break
  done
  if [ -n "$miss" ]; then
    echo "round $round: $topo $spec: skipped after $attempt attempts:$retried"
    continue
  fi

  "$gradcomp" train "${args[@]}" --checkpoint-dir "$run/ck" --resume >"$run/resumed.txt" \
    2>"$run/resumed.err"
  rstatus=$?
  from=$(sed -n 's/.*resumed from .* at step \([0-9]*\).*/\1/p' "$run/resumed.txt" | head -n 1)
  what="$topo $spec${drift:+ (drift: $drift)}: rank $victim_rank of $world killed ${kill_ms} ms into a ${wall_ms} ms run (exit $kstatus), resumed from step ${from:-0} of $run_steps${retried:+ (after$retried)}"
  verdict=""
  if [ $rstatus -ne 0 ]; then
    verdict="FAIL: resume exited $rstatus: $(tail -n 1 "$run/resumed.err")"
  elif [ "$topo" = ps-async ]; then
    acc_ref=$(accuracy_of "$ref/out.txt"); acc_run=$(accuracy_of "$run/resumed.txt")
    if awk -v a="${acc_ref:-0}" -v b="${acc_run:-0}" \
        'BEGIN { d = a - b; exit !(b > 0 && d < 0.05 && d > -0.05) }'; then
      verdict="ok (not deterministic: accuracy $acc_run, uninterrupted $acc_ref)"
    else
      verdict="FAIL: accuracy ${acc_run:-none}, uninterrupted ${acc_ref:-none}"
    fi
  else
    differ=()
    mapfile -t files < <(find "$ref/ck" -maxdepth 1 -type f -printf '%f\n' | sort)
    for f in "${files[@]}"; do
      cmp -s "$ref/ck/$f" "$run/ck/$f" || differ+=("$f")
    done
    if [ "$(result_of "$ref/out.txt")" != "$(result_of "$run/resumed.txt")" ]; then
      differ+=("report: $(result_of "$run/resumed.txt")vs $(result_of "$ref/out.txt")")
    fi
    if [ ${#differ[@]} -eq 0 ]; then
      verdict="ok (bit for bit: ${#files[@]} checkpoint files, $(result_of "$run/resumed.txt" | sed 's/ *$//'))"
    else
      verdict="FAIL: differs from the uninterrupted run: ${differ[*]}"
    fi
  fi
  echo "round $round: $what: $verdict"
  if [[ $verdict == ok* ]]; then
    passed=$((passed + 1))
    [ $keep -eq 1 ] || rm -rf "$run"
  else
    failed=$((failed + 1))
  fi
done
echo "soak-resume: $passed passed, $failed failed, $((rounds - passed - failed)) skipped of $rounds rounds (seed $seed)"
[ $failed -eq 0 ]
