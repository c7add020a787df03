#!/usr/bin/env bash
# The network lab (scripts/netlab.sh), for real: namespaces, shaped veth links, a
# 2-worker gradcomp run inside them, and nothing left behind afterwards, also when a rank
# fails or the lab is interrupted (ctest: netlab). Needs root with CAP_NET_ADMIN:
# otherwise it exits 77, which ctest reports as skipped.
#   usage: netlab_test.sh /path/to/gradcomp
set -uo pipefail

GRADCOMP=${1:?usage: netlab_test.sh /path/to/gradcomp}
GRADCOMP=$(realpath "$GRADCOMP")
NETLAB=$(realpath "$(dirname "$0")/../../scripts/netlab.sh")
WORK=$(mktemp -d "${TMPDIR:-/tmp}/gradcomp-netlab.XXXXXX")
# Namespaces of this test carry this prefix (netlab adds -sw, -r0, ...).
export NETLAB_PREFIX="gcnltest$$"
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"

# Skip (77) where the lab cannot be built: the same probe netlab itself runs.
bash -c "source '$NETLAB'; netlab_require_root" || exit 77

failures=0
pass() { echo "ok   $1"; }
fail() { echo "FAIL $1"; failures=$((failures + 1)); }
leftovers() { ip netns list | grep -c "^${NETLAB_PREFIX}-"; }

# Without root: says so, exits 77, creates nothing.
if command -v setpriv >/dev/null; then
  setpriv --reuid=65534 --regid=65534 --clear-groups bash "$NETLAB" --verify > nonroot.txt 2>&1
  st=$?
  if [ "$st" -eq 77 ] && grep -q "needs root" nonroot.txt; then pass "without root: says so, exits 77"; else
    fail "without root (status $st)"; cat nonroot.txt; fi
fi

# A 2-worker, 20-step run inside the lab completes; Gloo's traffic went over the lab's
# links (each rank's lab0 transmitted at least what gradcomp counts it sent).
small=(--dataset synthetic --synthetic-train 2560 --mlp-hidden 64 --batch-size 32 --steps 20
       --threads 1 --compressor "ef(topk:ratio=0.05)")
# With a delay when the kernel has netem (many VM kernels do not; the delay line is tested
# below).
delay=()
ns="${NETLAB_PREFIX}-netem"
if ip netns add "$ns" 2>/dev/null; then
  ip netns exec "$ns" tc qdisc add dev lo root netem delay 1ms 2>/dev/null && delay=(--delay 0.2ms)
  ip netns del "$ns"
fi
[ ${#delay[@]} -eq 0 ] && echo "note: no netem in this kernel: the run goes without --delay"
if bash "$NETLAB" --workers 2 --bandwidth 100mbit "${delay[@]}" --timeout-ms 60000 -- \
    sh -c '"$0" train "$@" --metrics "m-$RANK.jsonl" && cat /sys/class/net/lab0/statistics/tx_bytes > "tx-$RANK"' \
    "$GRADCOMP" "${small[@]}" > run.txt 2> run.err; then
  if grep -q '"type":"summary"' m-0.jsonl && grep -q '"steps":20' m-0.jsonl &&
     grep -q "== gradcomp train report ==" run.txt; then
    pass "2 workers, 20 steps in the lab"
  else
    fail "2 workers, 20 steps: no summary"; cat run.txt run.err m-0.jsonl
  fi
  sent=$(sed -n 's/.*"bytes_sent_per_worker_per_step":\([0-9.e+]*\).*/\1/p' m-0.jsonl | tail -n 1)
  tx0=$(cat tx-0 2>/dev/null || echo 0)
  tx1=$(cat tx-1 2>/dev/null || echo 0)
  if awk -v s="${sent:-0}" -v a="$tx0" -v b="$tx1" 'BEGIN { exit !(s > 0 && a >= 20 * s && b >= 20 * s) }'; then
    pass "traffic on the lab's links (lab0 sent $tx0 and $tx1 bytes; gradcomp counts $sent/step)"
  else
    fail "traffic on the lab's links (tx $tx0 $tx1, gradcomp $sent per step)"
  fi
else
  fail "2 workers, 20 steps in the lab: netlab failed"; cat run.err
fi
[ "$(leftovers)" -eq 0 ] && pass "nothing left after a run" || { fail "namespaces left after a run"; ip netns list; }

# The shaper is on: 100 Mbit/s links cannot carry more (an upper bound only; how far
# below it a loaded machine lands is not tested).
if bash "$NETLAB" --workers 2 --bandwidth 100mbit --verify > verify.txt 2>&1; then
  mbit=$(sed -n 's/.* = \([0-9.]*\) Mbit\/s.*/\1/p' verify.txt)
  if awk -v m="${mbit:-1e9}" 'BEGIN { exit !(m > 0 && m <= 105) }'; then
    pass "100mbit links carry at most 100 Mbit/s ($mbit)"
  else
    fail "shaping: $mbit Mbit/s through a 100mbit link"; cat verify.txt
  fi
else
  fail "--verify"; cat verify.txt
fi

# The delay line (netem's stand-in, tools/netlab/nfq-delay), forced even where the kernel
# has netem: 5 ms at each end of each link is 20 ms of TCP round trip (4 x 5 ms), plus
# little. Skipped, not failed, where it cannot run (no iptables, libnetfilter-queue or
# NFQUEUE in the kernel). `timeout` bounds it; on its SIGTERM netlab tears down.
if reason=$(bash -c "source '$NETLAB'; netlab_delayline_probe" 2>&1); then
  if NETLAB_IMPAIR=delayline timeout 120 bash "$NETLAB" --workers 2 --bandwidth 100mbit --delay 5ms \
      --verify > delay.txt 2>&1; then
    rtt=$(sed -n 's/.*RTT median \([0-9.]*\) ms.*/\1/p' delay.txt)
    if awk -v r="${rtt:-0}" 'BEGIN { exit !(r >= 19.5 && r <= 30) }' &&
       grep -q "delay line rank 1: .* 0 passed undelayed (hold full), 0 netlink overruns" delay.txt; then
      pass "delay line: 5 ms at each end, TCP round trip $rtt ms (20 expected)"
    else
      fail "delay line: round trip ${rtt:-?} ms, expected 20 (19.5..30)"; cat delay.txt
    fi
  else
    fail "delay line: netlab --delay 5ms --verify failed"; cat delay.txt
  fi
  dl=$(bash -c "source '$NETLAB'; echo \$NETLAB_DELAYLINE")
  if [ "$(leftovers)" -eq 0 ] && ! pgrep -f "^$dl " >/dev/null; then
    pass "delay line: nothing left (namespaces, nfq-delay processes)"
  else
    fail "delay line: left behind: $(leftovers) namespaces, processes: $(pgrep -af "^$dl " | tr '\n' ' ')"
  fi
else
  echo "skip delay line: $reason"
fi
# A bad value is one line and status 2, before anything is created.
bash "$NETLAB" --workers 2 --loss 1 --verify > badloss.txt 2>&1
st=$?
if [ "$st" -eq 2 ] && [ "$(wc -l < badloss.txt)" -eq 1 ] && grep -q "^netlab: --loss '1'" badloss.txt; then
  pass "--loss 1 (no %): one line, status 2"
else
  fail "--loss 1: status $st"; cat badloss.txt
fi

# A failing rank: netlab exits with its status, stops the other rank at once (not after
# the 300 s sleep) and tears down.
SECONDS=0
bash "$NETLAB" --workers 2 --bandwidth none -- sh -c '[ "$RANK" = 1 ] && exit 3; exec sleep 300' \
  > fail.txt 2>&1
st=$?
if [ "$st" -eq 3 ] && [ "$SECONDS" -lt 60 ] && [ "$(leftovers)" -eq 0 ]; then
  pass "a failing rank: status 3, the other stopped, nothing left"
else
  fail "a failing rank (status $st after ${SECONDS}s, $(leftovers) namespaces left)"; cat fail.txt
fi

# Interrupted (SIGTERM, as from Ctrl-C or a CI timeout): the ranks are stopped and the
# namespaces removed.
marker="netlab-test-sleep-$$"
bash "$NETLAB" --workers 3 --bandwidth 1gbit -- bash -c "exec -a $marker sleep 300" > int.txt 2>&1 &
lab=$!
for _ in $(seq 1 100); do
  [ "$(leftovers)" -ge 4 ] && pgrep -f "^$marker 300" >/dev/null && break
  sleep 0.1
done
up=$(leftovers)
kill -TERM "$lab"
wait "$lab"
st=$?
sleep 0.5
if [ "$up" -eq 4 ] && [ "$st" -ne 0 ] && [ "$(leftovers)" -eq 0 ] && ! pgrep -f "^$marker 300" >/dev/null; then
  pass "interrupted: ranks stopped, nothing left (status $st)"
else
  fail "interrupted (had $up namespaces, status $st, $(leftovers) left)"; cat int.txt
  pgrep -af "^$marker 300"
fi

[ "$failures" -eq 0 ] && echo "all netlab tests passed" || echo "$failures netlab test(s) failed"
[ "$failures" -eq 0 ]
