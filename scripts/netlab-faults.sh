#!/usr/bin/env bash
# Network faults in the network lab (scripts/netlab.sh: one namespace per rank, joined by
# a bridge in a namespace of its own), with a tiny 2-worker training run over Gloo:
#   clean   the reference: an unshaped link;
#   (a)     1% packet loss and 50 ms jitter (at every link end): the run completes
#           with the same test accuracy and loss as on the clean link;
#   (b)     rank 1's link taken down for 5 s mid-run (ip link set down/up): the run either
#           continues to the same result, or every rank exits within --timeout-ms naming
#           the peer it lost;
#   (c)     rank 1 SIGSTOPped for longer than --timeout-ms: rank 0 exits within the timeout
#           naming rank 1; continued, rank 1 exits too, naming rank 0.
# Prints one line per scenario (ok / FAIL / skipped, and what happened); exits non-zero
# if any scenario failed. Needs root and iproute2 (exit 77 without them). (a) uses the
# kernel's netem qdisc where there is one, else netlab's delay line (an NFQUEUE program,
# tools/netlab/nfq-delay, fed by iptables; needs install-deps.sh --netlab), and names which
# in its line; with neither it is skipped and (a') drops 1% of each rank's TCP segments
# with nftables instead: loss without the jitter. Every namespace and delay line it creates
# is removed on exit, also on failure or Ctrl-C.
#
#   usage: sudo scripts/netlab-faults.sh [--gradcomp PATH] [--timeout-ms T] [--keep-logs]
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
# shellcheck source=scripts/netlab.sh
source scripts/netlab.sh

gradcomp=build/bin/gradcomp
timeout_ms=3000
keep_logs=0
while [ $# -gt 0 ]; do
  case $1 in
    --gradcomp) gradcomp=${2:?--gradcomp needs a path}; shift 2 ;;
    --timeout-ms) timeout_ms=${2:?--timeout-ms needs a value}; shift 2 ;;
    --keep-logs) keep_logs=1; shift ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "netlab-faults.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ -x "$gradcomp" ] || { echo "netlab-faults.sh: $gradcomp is not built" >&2; exit 2; }
gradcomp=$(realpath "$gradcomp")
netlab_require_root

logs=$(mktemp -d "${TMPDIR:-/tmp}/netlab-faults.XXXXXX")
RANK_PIDS=()
stop_ranks() {
  local pid
  for pid in "${RANK_PIDS[@]}"; do kill -CONT "$pid" 2>/dev/null; kill -KILL "$pid" 2>/dev/null; done
  for pid in "${RANK_PIDS[@]}"; do wait "$pid" 2>/dev/null; done
  RANK_PIDS=()
}
finish() {
  stop_ranks
  netlab_down
  if [ "$keep_logs" -eq 1 ] || [ "${failures:-0}" -ne 0 ]; then
    echo "netlab-faults: logs in $logs"
  else
    rm -rf "$logs"
  fi
}
netlab_up 2 2 || { netlab_log "could not build the lab"; finish; exit 1; }
trap finish EXIT
trap 'finish; trap - EXIT; exit 130' INT TERM

train=(train --compressor "ef(topk:ratio=0.1)" --dataset synthetic --synthetic-train 2048
       --mlp-hidden 128 --batch-size 32 --lr 0.1 --seed 7 --threads 1 --timeout-ms "$timeout_ms")

# start_ranks DIR ARGS...: gradcomp once per rank in its namespace (ip netns exec execs
# it: the PIDs are gradcomp's own), logs DIR/rank-R.log.
start_ranks() {
  local dir=$1 r
  shift
  mkdir -p "$dir"
  RANK_PIDS=()
  for r in 0 1; do
    ip netns exec "$(netlab_ns "$r")" env RANK="$r" WORLD_SIZE=2 LOCAL_RANK="$r" \
      LOCAL_WORLD_SIZE=2 MASTER_ADDR="$(netlab_addr 0)" MASTER_PORT="$NETLAB_PORT" \
      GLOO_SOCKET_IFNAME="$NETLAB_IF" OMP_WAIT_POLICY=passive \
      "$gradcomp" "$@" --metrics "$dir/m-$r.jsonl" >"$dir/rank-$r.log" 2>&1 &
    RANK_PIDS+=($!)
  done
}
# wait_rank R SECONDS: waits up to SECONDS for rank R; sets STATUS (124: still running).
wait_rank() {
  local pid=${RANK_PIDS[$1]} i
  for ((i = 0; i < $2 * 10; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then STATUS=124; return; fi
  wait "$pid"
  STATUS=$?
}
# last_step DIR: the last step rank 0 logged. A run writes its metrics to FILE.partial until
# it ends (a failed or killed one leaves them there), so both are read.
last_step() {
  cat "$1/m-0.jsonl" "$1/m-0.jsonl.partial" 2>/dev/null | grep -oE '"step":[0-9]+' | tail -n 1 | cut -d: -f2
}
# wait_step DIR N: until rank 0 has logged step N (or 30 s).
wait_step() {
  local i s
  for ((i = 0; i < 300; i++)); do
    s=$(last_step "$1")
    [ -n "$s" ] && [ "$s" -ge "$2" ] && return 0
    sleep 0.1
  done
  return 1
}
result_of() { grep -E '^  test (accuracy|loss)' "$1" | tr -s ' ' | sed 's/^ //' | tr '\n' ' ' | sed 's/ $//'; }
last_error() { grep -v '^netlab' "$1" | tail -n 1 | cut -c1-160; }

failures=0
report() {  # report ok|FAIL|skipped SCENARIO WHAT
  echo "$1 $2: $3"
  [ "$1" = FAIL ] && failures=$((failures + 1))
}

# clean: the reference.
steps=40
start_ranks "$logs/clean" "${train[@]}" --steps "$steps"
t0=$(date +%s%N)
wait_rank 0 120; s0=$STATUS
wait_rank 1 20; s1=$STATUS
clean_ms=$((($(date +%s%N) - t0) / 1000000))
clean=$(result_of "$logs/clean/rank-0.log")
if [ "$s0" -eq 0 ] && [ "$s1" -eq 0 ] && [ -n "$clean" ]; then
  report ok clean "$steps steps in ${clean_ms} ms: $clean"
else
  report FAIL clean "exit $s0/$s1: $(last_error "$logs/clean/rank-0.log") | $(last_error "$logs/clean/rank-1.log")"
  exit 1
fi

# (a) loss and jitter: netem's "delay 10ms 50ms loss 1%" at both ends of every link (netem
# where the kernel has it, else the delay line: scripts/netlab.sh, netlab_shape), i.e. a
# path with two independent draws of 1% loss and 10 ms +- 50 ms (uniform, clamped at 0,
# reordering) each way.
netlab_have_netem  # probed once, in this shell
mech=$(netlab_impairment)
scen="(a) 1% loss + 50 ms jitter ($mech)"
if netlab_shape none 10ms 50ms 1% 2>"$logs/shape-a.err"; then
  start_ranks "$logs/lossy" "${train[@]}" --steps "$steps"
  t0=$(date +%s%N)
  wait_rank 0 300; s0=$STATUS
  wait_rank 1 30; s1=$STATUS
  lossy_ms=$((($(date +%s%N) - t0) / 1000000))
  got=$(result_of "$logs/lossy/rank-0.log")
  what="$steps steps in ${lossy_ms} ms"
  if [ "$mech" = delayline ]; then
    # What the delay lines did: packets seen and dropped, summed over both ranks.
    netlab_delayline_stats >"$logs/lossy/delayline.txt"
    what+=", $(sed -E 's/.* ([0-9]+) packets, ([0-9]+) dropped.*/\1 \2/' "$logs/lossy/delayline.txt" |
      awk '{ p += $1; d += $2 } END { printf "%d of %d packets dropped (%.2f%%)", d, p, p ? 100 * d / p : 0 }')"
    what+=", $(sed -E 's/.* ([0-9]+) of them passed undelayed$/\1/' "$logs/lossy/delayline.txt" |
      awk '{ u += $1 } END { print u + 0 }') passed undelayed"
    what+=", delay mean $(sed -n 's/.*delay mean \([0-9.]*\) ms max \([0-9.]*\) ms.*/\1 ms (max \2)/p' \
      "$logs/lossy/delayline.txt" | head -n 1) per pass"
  fi
  if [ "$s0" -eq 0 ] && [ "$s1" -eq 0 ] && [ "$got" = "$clean" ]; then
    report ok "$scen" "completed, $what, same result as the clean link ($got)"
  else
    report FAIL "$scen" "exit $s0/$s1, $what, result '$got' vs clean '$clean': $(last_error "$logs/lossy/rank-0.log")"
  fi
  stop_ranks
else
  report skipped "$scen" "$(grep -v '^$' "$logs/shape-a.err" | head -n 1 | sed 's/^netlab: //')"
  # Loss alone needs neither netem nor the delay line: nftables drops 1% of the TCP
  # segments each rank sends (numgen random), so each direction of the link loses 1%.
  nft_ok=1
  for r in 0 1; do
    ns=$(netlab_ns "$r")
    { ip netns exec "$ns" nft add table inet lab &&
      ip netns exec "$ns" nft add chain inet lab out \
        '{ type filter hook output priority 0; policy accept; }' &&
      ip netns exec "$ns" nft add rule inet lab out meta l4proto tcp numgen random mod 100 '<' 1 \
        counter drop; } 2>/dev/null || nft_ok=0
  done
  if [ $nft_ok -eq 0 ]; then
    report skipped "(a') 1% loss (nftables)" "no nft (install-deps.sh --netlab) or no nf_tables: not run"
  else
    start_ranks "$logs/lossy" "${train[@]}" --steps "$steps"
    wait_rank 0 300; s0=$STATUS
    wait_rank 1 30; s1=$STATUS
    got=$(result_of "$logs/lossy/rank-0.log")
    dropped=0
    for r in 0 1; do
      n=$(ip netns exec "$(netlab_ns "$r")" nft list chain inet lab out 2>/dev/null |
        sed -n 's/.*counter packets \([0-9]*\).*/\1/p')
      dropped=$((dropped + ${n:-0}))
    done
    if [ "$s0" -eq 0 ] && [ "$s1" -eq 0 ] && [ "$got" = "$clean" ]; then
      report ok "(a') 1% loss (nftables)" "completed, $dropped segments dropped, same result as the clean link ($got)"
    else
      report FAIL "(a') 1% loss (nftables)" "exit $s0/$s1, result '$got' vs clean '$clean'"
    fi
    stop_ranks
  fi
  for r in 0 1; do ip netns exec "$(netlab_ns "$r")" nft delete table inet lab 2>/dev/null; done
fi
netlab_shape none

# (b) rank 1's link down for 5 s mid-run. Long enough a run that it is still going.
long=(--steps 100000)
start_ranks "$logs/linkdown" "${train[@]}" "${long[@]}"
if ! wait_step "$logs/linkdown" 5; then
  report FAIL "(b) link down 5 s" "the run did not reach step 5: $(last_error "$logs/linkdown/rank-0.log")"
else
  ip -n "$(netlab_switch)" link set p1 down
  down_at=$(date +%s%N)
  sleep 5
  ip -n "$(netlab_switch)" link set p1 up
  wait_rank 0 $((timeout_ms / 1000 + 15)); s0=$STATUS
  t0_ms=$((($(date +%s%N) - down_at) / 1000000))
  wait_rank 1 $((timeout_ms / 1000 + 15)); s1=$STATUS
  t1_ms=$((($(date +%s%N) - down_at) / 1000000))
  e0=$(last_error "$logs/linkdown/rank-0.log"); e1=$(last_error "$logs/linkdown/rank-1.log")
  if [ "$s0" -eq 124 ] && [ "$s1" -eq 124 ] && [ -n "$(last_step "$logs/linkdown")" ]; then
    report ok "(b) link down 5 s" "the run continued through the outage (still training $((t0_ms / 1000)) s later)"
  elif [ "$s0" -ne 0 ] && [ "$s0" -ne 124 ] && [ "$s1" -ne 0 ] && [ "$s1" -ne 124 ] &&
       [ "$t0_ms" -le $((timeout_ms + 5000 + 3000)) ] && [ "$t1_ms" -le $((timeout_ms + 5000 + 3000)) ] &&
       echo "$e0" | grep -q "rank 1" && echo "$e1" | grep -q "rank 0"; then
    report ok "(b) link down 5 s" "every rank exited (${t0_ms} ms / ${t1_ms} ms after the link went down, timeout ${timeout_ms} ms), naming its peer: rank 0: '$e0'; rank 1: '$e1'"
  else
    report FAIL "(b) link down 5 s" "exit $s0 after ${t0_ms} ms, $s1 after ${t1_ms} ms: rank 0: '$e0'; rank 1: '$e1'"
  fi
fi
stop_ranks

# (c) rank 1 stopped for longer than the timeout.
start_ranks "$logs/stopped" "${train[@]}" "${long[@]}"
if ! wait_step "$logs/stopped" 5; then
  report FAIL "(c) worker SIGSTOPped" "the run did not reach step 5: $(last_error "$logs/stopped/rank-0.log")"
else
  kill -STOP "${RANK_PIDS[1]}"
  stop_at=$(date +%s%N)
  wait_rank 0 $((timeout_ms / 1000 + 15)); s0=$STATUS
  t0_ms=$((($(date +%s%N) - stop_at) / 1000000))
  kill -CONT "${RANK_PIDS[1]}"
  cont_at=$(date +%s%N)
  wait_rank 1 $((timeout_ms / 1000 + 15)); s1=$STATUS
  t1_ms=$((($(date +%s%N) - cont_at) / 1000000))
  e0=$(last_error "$logs/stopped/rank-0.log"); e1=$(last_error "$logs/stopped/rank-1.log")
  if [ "$s0" -ne 0 ] && [ "$s0" -ne 124 ] && [ "$t0_ms" -le $((timeout_ms + 3000)) ] &&
     echo "$e0" | grep -q "rank 1" && [ "$s1" -ne 0 ] && [ "$s1" -ne 124 ]; then
    report ok "(c) worker SIGSTOPped" "rank 0 exited ${t0_ms} ms after the stop (timeout ${timeout_ms} ms): '$e0'; rank 1, continued, exited after ${t1_ms} ms: '$e1'"
  else
    report FAIL "(c) worker SIGSTOPped" "rank 0: exit $s0 after ${t0_ms} ms: '$e0'; rank 1: exit $s1 ${t1_ms} ms after SIGCONT: '$e1'"
  fi
fi
stop_ranks
exit $((failures > 0))
