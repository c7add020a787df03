#!/usr/bin/env bash
# netlab: a shaped network on one Linux machine. Every rank (worker, and server in
# parameter-server mode) gets its own network namespace, joined to a bridge through a
# veth pair whose two ends are each shaped with tc (token bucket; delay, jitter and loss
# with netem, or the delay line described below):
#
#      ns <P>-r0            ns <P>-sw (the switch)             ns <P>-r1
#   ┌────────────┐ veth  ┌──────────────────────────┐  veth ┌────────────┐
#   │ lab0       │───────│ p0 ─┐              ┌─ p1 │───────│ lab0       │  ...
#   │ 10.213.0.10│ tbf ↔ │ tbf └──── br0 ─────┘ tbf │ ↔ tbf │ 10.213.0.11│
#   └────────────┘       └──────────────────────────┘       └────────────┘
#
# Each link carries --bandwidth each way (egress shaping at both ends of the veth: the
# rank's upload on lab0, its download on p<r>). --delay adds latency at both ends, so a
# packet between two ranks is delayed 2 x delay one way (4 x delay round trip); --jitter
# and --loss apply at each end too, as netem's "delay D J loss P" would.
# The bridge lives in its own namespace too: nothing is created in, or addressed from,
# the machine's own namespace, and the addresses are used only inside the lab.
#
# Delay, jitter and loss come from the kernel's netem qdisc where it has one. Where it has
# not (CONFIG_NET_SCH_NETEM unset, as on many VM kernels), a userspace delay line does the
# same: in each rank's namespace iptables sends every packet lab0 receives to NFQUEUE 0
# twice, at PREROUTING (standing for the sending end of the path) and at INPUT (the
# receiving end), and tools/netlab/nfq-delay, started there, gives it its verdict after
# delay + jitter each time, or drops it with probability loss: two independent draws per
# packet, as netem on both ends of the path. Both draws are on the receive side because
# a packet the sender's stack still owns counts against TCP Small Queues, which then
# throttles the socket to ~1 ms of data in flight below TCP (netem orphans its packets;
# an OUTPUT-hook delay line cannot: 8.6 Mbit/s through a 100mbit link with 5 ms of
# delay). --queue-bypass: packets pass undelayed if the delay line is not running.
# netlab builds nfq-delay on first use into build/netlab/ (needs gcc and
# libnetfilter-queue-dev, and iptables: scripts/install-deps.sh --netlab; nftables' own
# "queue" statement needs CONFIG_NFT_QUEUE, which such kernels often lack too, while
# iptables' NFQUEUE target works through nft_compat). NETLAB_IMPAIR=netem|delayline
# forces either. Note: ping's round trip then misses the delay of the replies (its
# receive timestamp is taken before PREROUTING); `ping -U` (user to user) shows it all.
#
# Usage (CLI):
#   scripts/netlab.sh [options] -- COMMAND [ARGS...]   run COMMAND once per rank, inside
#                                                     its namespace; exit with the worst status
#   scripts/netlab.sh [options] --verify              measure throughput and RTT between
#                                                     rank 0 and rank 1, then tear down
# Options:
#   --workers N        worker ranks (default 4)
#   --servers S        extra ranks for a parameter server (default 0), ranks N..N+S-1
#   --bandwidth RATE   tc rate of each link direction, e.g. 1gbit, 100mbit; "none": unshaped
#   --delay D          added latency at each end, e.g. 0.5ms, 5ms (default: none)
#   --jitter J         random variation of the delay at each end, uniform in +-J (netem's
#                      default), e.g. 50ms; packets may be reordered (default: none)
#   --loss P           drop P of the packets at each end, e.g. 1% (default: none)
#   --queue-ms Q       token-bucket queue, in ms at the link rate (default 20: about a
#                      NIC's 1000-packet txqueue at 1 Gbit/s; 5 drops packets under TCP)
#   --port P           MASTER_PORT (default 29500)
#   --timeout-ms T     GRADCOMP_TIMEOUT_MS for the ranks (default 600000)
#   --log-dir DIR      per-rank logs rank-R.log (default: a temporary directory, removed
#                      unless a rank fails)
# Every rank runs with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR (rank 0's
# lab address), MASTER_PORT, GLOO_SOCKET_IFNAME=lab0, GRADCOMP_TIMEOUT_MS,
# OMP_WAIT_POLICY=passive (unless set), NETLAB_ROLE=worker|server, NETLAB_NS. "{rank}" in
# an argument is replaced by the rank. Rank 0's output goes to the terminal too.
# NETLAB_TCP_SLOW_START_AFTER_IDLE=0|1 sets net.ipv4.tcp_slow_start_after_idle in every
# rank's namespace (unset: the kernel's default, 1: an idle connection restarts from a small
# congestion window, which a long-distance link pays for in round trips; 0 is the usual
# tuning for such links).
#
# As a library (scripts/bench-net.sh): `source scripts/netlab.sh`, then netlab_require_root,
# netlab_up N, netlab_shape RATE [DELAY [JITTER [LOSS]]], netlab_run LOGDIR CMD...,
# netlab_tx_bytes, netlab_verify, netlab_impairment, netlab_delayline_stats, netlab_down.
# netlab_up installs an EXIT/INT/TERM trap that kills the ranks and delay lines it started
# and removes exactly the namespaces it created (named <prefix>-*, the prefix holding
# this shell's PID), also on failure or Ctrl-C.
#
# Needs root (network namespaces, veth, tc) and iproute2; /usr/bin/python3 for --verify.
# Without them it says so and exits 77 (the "skipped" code ctest is told about).

NETLAB_PREFIX=${NETLAB_PREFIX:-gcnl$$}
NETLAB_SUBNET=${NETLAB_SUBNET:-10.213.0}  # /24, lab-private: ranks get .10, .11, ...
NETLAB_IF=lab0
NETLAB_PORT=${NETLAB_PORT:-29500}
NETLAB_TIMEOUT_MS=${NETLAB_TIMEOUT_MS:-600000}
NETLAB_QUEUE_MS=${NETLAB_QUEUE_MS:-20}
NETLAB_RANKS=0
NETLAB_WORKERS=0
NETLAB_NAMESPACES=()  # exactly what netlab_up created, in creation order
NETLAB_PIDS=()        # ranks netlab_run started and has not reaped yet
NETLAB_DL_PIDS=()     # delay lines (nfq-delay) netlab_shape started, one per rank
NETLAB_DL_NS=()       # ... and the namespace of each, whose iptables rules feed it
NETLAB_DL_LOGDIR=""
NETLAB_IMPAIR=${NETLAB_IMPAIR:-auto}  # auto | netem | delayline
NETLAB_TCP_SLOW_START_AFTER_IDLE=${NETLAB_TCP_SLOW_START_AFTER_IDLE:-}  # "": the kernel's
NETLAB_NETEM=""                       # probed once: 1 if the kernel has netem
NETLAB_REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
NETLAB_DELAYLINE=${NETLAB_DELAYLINE:-$NETLAB_REPO/build/netlab/nfq-delay}
NETLAB_SKIP=77

netlab_log() { echo "netlab: $*" >&2; }

netlab_ns() { echo "${NETLAB_PREFIX}-r$1"; }
netlab_switch() { echo "${NETLAB_PREFIX}-sw"; }
netlab_addr() { echo "${NETLAB_SUBNET}.$((10 + $1))"; }

# Exits 77 with a message when the lab cannot be built here.
netlab_require_root() {
  if [ "$(id -u)" -ne 0 ]; then
    netlab_log "needs root (network namespaces, veth pairs, tc): run it with sudo"
    exit "$NETLAB_SKIP"
  fi
  local tool
  for tool in ip tc; do
    if ! command -v "$tool" >/dev/null; then
      netlab_log "needs '$tool' (Debian package iproute2: apt-get install iproute2)"
      exit "$NETLAB_SKIP"
    fi
  done
  # Root without CAP_NET_ADMIN/CAP_SYS_ADMIN (a restricted container) cannot make
  # namespaces: probe with a throwaway one.
  local probe="${NETLAB_PREFIX}-probe"
  if ! ip netns add "$probe" 2>/dev/null; then
    netlab_log "cannot create network namespaces here (no CAP_SYS_ADMIN/CAP_NET_ADMIN?)"
    exit "$NETLAB_SKIP"
  fi
  ip netns del "$probe"
}

# Kills the ranks still running (only the PIDs netlab_run started) and deletes the
# namespaces netlab_up created; deleting a namespace destroys its veth ends and bridge.
netlab_down() {
  local pid ns i
  for pid in "${NETLAB_PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  for pid in "${NETLAB_PIDS[@]}"; do
    for i in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  done
  NETLAB_PIDS=()
  # A process inside a namespace keeps it alive after `ip netns del`: the delay lines go
  # first.
  netlab_delayline_stop
  for ((i = ${#NETLAB_NAMESPACES[@]} - 1; i >= 0; i--)); do
    ns=${NETLAB_NAMESPACES[$i]}
    ip netns del "$ns" 2>/dev/null || netlab_log "warning: could not delete namespace $ns"
  done
  NETLAB_NAMESPACES=()
  if [ -n "$NETLAB_DL_LOGDIR" ]; then rm -rf "$NETLAB_DL_LOGDIR"; NETLAB_DL_LOGDIR=""; fi
}

netlab_on_signal() {
  netlab_log "interrupted: tearing the lab down"
  netlab_down
  trap - EXIT
  exit 130
}

netlab_add_ns() {
  ip netns add "$1" || return 1
  NETLAB_NAMESPACES+=("$1")
  ip -n "$1" link set lo up
}

# netlab_up RANKS [WORKERS]: the switch namespace, one namespace per rank, veth pairs,
# addresses. Unshaped until netlab_shape.
netlab_up() {
  NETLAB_RANKS=$1
  NETLAB_WORKERS=${2:-$1}
  trap netlab_down EXIT
  trap netlab_on_signal INT TERM
  local sw r ns
  sw=$(netlab_switch)
  netlab_add_ns "$sw" || return 1
  ip -n "$sw" link add br0 type bridge || return 1
  ip -n "$sw" link set br0 up || return 1
  for ((r = 0; r < NETLAB_RANKS; r++)); do
    ns=$(netlab_ns "$r")
    netlab_add_ns "$ns" || return 1
    # Both ends are created directly inside their namespaces: nothing passes through
    # the machine's own namespace, so no name there can clash.
    ip -n "$ns" link add "$NETLAB_IF" type veth peer name "p$r" netns "$sw" || return 1
    ip -n "$sw" link set "p$r" master br0 || return 1
    ip -n "$sw" link set "p$r" up || return 1
    ip -n "$ns" addr add "$(netlab_addr "$r")/24" dev "$NETLAB_IF" || return 1
    ip -n "$ns" link set "$NETLAB_IF" up || return 1
    if [ -n "$NETLAB_TCP_SLOW_START_AFTER_IDLE" ]; then
      ip netns exec "$ns" sysctl -qw \
        "net.ipv4.tcp_slow_start_after_idle=$NETLAB_TCP_SLOW_START_AFTER_IDLE" || return 1
    fi
  done
}

# _netlab_qdisc NS DEV RATE [NETEM_ARGS...]: replace DEV's root qdisc: a token bucket at
# RATE ("none": unpaced), behind netem NETEM_ARGS ("delay 5ms 1ms loss 1%") if given.
_netlab_qdisc() {
  local ns=$1 dev=$2 rate=$3
  shift 3
  local netem=("$@")
  ip netns exec "$ns" tc qdisc del dev "$dev" root 2>/dev/null
  [ "$rate" = none ] && [ ${#netem[@]} -eq 0 ] && return 0
  local tbf=()
  if [ "$rate" != none ]; then
    local bps
    bps=$(netlab_rate_bps "$rate") || return 1
    # Burst: 1 ms at the rate (at least two full frames); queue: NETLAB_QUEUE_MS of it.
    local burst=$((bps / 8 / 1000)) limit=$((bps / 8 / 1000 * NETLAB_QUEUE_MS))
    [ "$burst" -lt 3028 ] && burst=3028
    [ "$limit" -lt $((4 * burst)) ] && limit=$((4 * burst))
    tbf=(tbf rate "$rate" burst "$burst" limit "$limit")
  fi
  if [ ${#netem[@]} -gt 0 ]; then
    # netem delays, then the token bucket paces (the netem wiki's recipe).
    ip netns exec "$ns" tc qdisc add dev "$dev" root handle 1: netem "${netem[@]}" limit 100000 ||
      return 1
    if [ ${#tbf[@]} -gt 0 ]; then
      ip netns exec "$ns" tc qdisc add dev "$dev" parent 1:1 handle 10: "${tbf[@]}" || return 1
    fi
  else
    ip netns exec "$ns" tc qdisc add dev "$dev" root handle 1: "${tbf[@]}" || return 1
  fi
}

# netlab_have_netem: does this kernel have the netem qdisc? Probed once, in a throwaway
# namespace's loopback.
netlab_have_netem() {
  if [ -z "$NETLAB_NETEM" ]; then
    local probe="${NETLAB_PREFIX}-netem"
    NETLAB_NETEM=0
    if ip netns add "$probe" 2>/dev/null; then
      ip netns exec "$probe" tc qdisc add dev lo root netem delay 1ms 2>/dev/null && NETLAB_NETEM=1
      ip netns del "$probe"
    fi
  fi
  [ "$NETLAB_NETEM" = 1 ]
}

# netlab_impairment: which mechanism netlab_shape uses for delay, jitter and loss:
# "netem" or "delayline" (NETLAB_IMPAIR forces one).
netlab_impairment() {
  case $NETLAB_IMPAIR in
    netem | delayline) echo "$NETLAB_IMPAIR" ;;
    *) if netlab_have_netem; then echo netem; else echo delayline; fi ;;
  esac
}

# netlab_delayline_build: builds tools/netlab/nfq-delay.c into $NETLAB_DELAYLINE unless
# it is there and newer than its source. One line and status 1 if it cannot.
netlab_delayline_build() {
  local src="$NETLAB_REPO/tools/netlab/nfq-delay.c" bin=$NETLAB_DELAYLINE
  [ -x "$bin" ] && [ ! "$src" -nt "$bin" ] && return 0
  local cc=${CC:-cc}
  if ! command -v "$cc" >/dev/null || ! pkg-config --exists libnetfilter_queue 2>/dev/null; then
    netlab_log "the delay line (tools/netlab/nfq-delay.c) needs a C compiler, pkg-config and" \
      "libnetfilter-queue-dev: sudo scripts/install-deps.sh --netlab"
    return 1
  fi
  mkdir -p "$(dirname "$bin")" || return 1
  # Built beside its destination and renamed: a concurrent lab never runs half a binary.
  local tmp="$bin.tmp.$$" err
  # shellcheck disable=SC2046  # pkg-config's flags are meant to split
  if ! err=$("$cc" -O2 -Wall -std=gnu11 -o "$tmp" "$src" \
    $(pkg-config --cflags --libs libnetfilter_queue) -lm 2>&1); then
    rm -f "$tmp"
    netlab_log "could not build the delay line: $(echo "$err" | grep -m1 -i error)"
    return 1
  fi
  mv -f "$tmp" "$bin"
}

# netlab_delayline_start DELAY JITTER LOSS: in every rank's namespace, iptables sends what
# lab0 receives to NFQUEUE 0 at PREROUTING and again at INPUT, and nfq-delay serves that
# queue. Waits until each has bound its queue.
netlab_delayline_start() {
  local delay=${1:-0} jitter=${2:-0} loss=${3:-0%}
  netlab_delayline_build || return 1
  if ! command -v iptables >/dev/null; then
    netlab_log "the delay line needs iptables (NFQUEUE target): sudo scripts/install-deps.sh --netlab"
    return 1
  fi
  [ -n "$NETLAB_DL_LOGDIR" ] || NETLAB_DL_LOGDIR=$(mktemp -d "${TMPDIR:-/tmp}/netlab-dl.XXXXXX")
  local r ns pid i log
  for ((r = 0; r < NETLAB_RANKS; r++)); do
    ns=$(netlab_ns "$r")
    log="$NETLAB_DL_LOGDIR/rank-$r.log"
    # --seed: reproducible draws, different per rank.
    ip netns exec "$ns" "$NETLAB_DELAYLINE" --queue 0 --delay "$delay" --jitter "$jitter" \
      --loss "$loss" --seed "$((1000 + r))" >"$log" 2>&1 &
    pid=$!  # ip netns exec execs the program: this is nfq-delay's own PID
    NETLAB_DL_PIDS+=("$pid")
    NETLAB_DL_NS+=("$ns")
    for ((i = 0; i < 100; i++)); do
      grep -q ", ready$" "$log" 2>/dev/null && break
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.05
    done
    if ! grep -q ", ready$" "$log" 2>/dev/null; then
      netlab_log "delay line in $ns did not start: $(head -n 1 "$log")"
      return 1
    fi
    { ip netns exec "$ns" iptables -w -t mangle -A PREROUTING -i "$NETLAB_IF" -j NFQUEUE \
        --queue-num 0 --queue-bypass &&
      ip netns exec "$ns" iptables -w -A INPUT -i "$NETLAB_IF" -j NFQUEUE --queue-num 0 \
        --queue-bypass; } || { netlab_log "iptables could not add the NFQUEUE rules in $ns"; return 1; }
  done
}

# netlab_delayline_probe: can the delay line run here? Builds it, then in a throwaway
# namespace adds an NFQUEUE rule and binds the queue. One line saying what is missing and
# status 1 if not.
netlab_delayline_probe() {
  netlab_delayline_build || return 1
  if ! command -v iptables >/dev/null; then
    netlab_log "the delay line needs iptables (NFQUEUE target): sudo scripts/install-deps.sh --netlab"
    return 1
  fi
  local probe="${NETLAB_PREFIX}-nfq" out st=0
  ip netns add "$probe" 2>/dev/null || { netlab_log "cannot create a namespace to probe NFQUEUE"; return 1; }
  if ! out=$(ip netns exec "$probe" iptables -w -A INPUT -i lo -j NFQUEUE --queue-num 0 \
    --queue-bypass 2>&1); then
    netlab_log "iptables cannot add an NFQUEUE rule (kernel without CONFIG_NETFILTER_XT_TARGET_NFQUEUE?): $(echo "$out" | head -n 1)"
    st=1
  elif out=$(ip netns exec "$probe" timeout -s INT 0.5 "$NETLAB_DELAYLINE" 2>&1) ||
    ! echo "$out" | grep -q ", ready$"; then  # timeout's 124 is the expected end
    netlab_log "the delay line cannot bind an NFQUEUE: $(echo "$out" | head -n 1)"
    st=1
  fi
  ip netns del "$probe"
  return $st
}

# netlab_delayline_stop: removes the NFQUEUE rules, then stops the delay lines (SIGTERM:
# each accepts what it holds and prints its statistics line to its log).
netlab_delayline_stop() {
  local ns pid i
  for ns in "${NETLAB_DL_NS[@]}"; do
    ip netns exec "$ns" iptables -w -t mangle -D PREROUTING -i "$NETLAB_IF" -j NFQUEUE \
      --queue-num 0 --queue-bypass 2>/dev/null
    ip netns exec "$ns" iptables -w -D INPUT -i "$NETLAB_IF" -j NFQUEUE --queue-num 0 \
      --queue-bypass 2>/dev/null
  done
  for pid in "${NETLAB_DL_PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  for pid in "${NETLAB_DL_PIDS[@]}"; do
    for ((i = 0; i < 50; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  done
  NETLAB_DL_PIDS=()
  NETLAB_DL_NS=()
}

# netlab_delayline_stats: the latest statistics line of each rank's delay line (asks the
# running ones for a fresh one with SIGUSR1), and how many packets its iptables rules sent
# to the queue: more than the delay line saw means some passed undelayed, because the
# kernel's queue was full (fail-open) or no delay line was listening (--queue-bypass);
# the kernel counts neither anywhere else. The rules' counters are read first, so a packet
# in flight meanwhile is not taken for an undelayed one.
netlab_delayline_stats() {
  local pid r ns line seen
  local -a matched=()
  [ -n "$NETLAB_DL_LOGDIR" ] || return 0
  for ((r = 0; r < NETLAB_RANKS; r++)); do
    ns=$(netlab_ns "$r")
    matched[r]=$({ ip netns exec "$ns" iptables -w -t mangle -L PREROUTING -v -x -n
      ip netns exec "$ns" iptables -w -L INPUT -v -x -n; } 2>/dev/null |
      awk '/NFQUEUE/ { n += $1 } END { print n + 0 }')
  done
  for pid in "${NETLAB_DL_PIDS[@]}"; do kill -USR1 "$pid" 2>/dev/null; done
  [ ${#NETLAB_DL_PIDS[@]} -gt 0 ] && sleep 0.3
  for ((r = 0; r < NETLAB_RANKS; r++)); do
    line=$(grep "packets," "$NETLAB_DL_LOGDIR/rank-$r.log" 2>/dev/null | tail -n 1 | sed "s/^nfq-delay: /rank $r: /")
    [ -n "$line" ] || continue
    seen=$(echo "$line" | sed -E 's/.* ([0-9]+) packets, .*/\1/')
    echo "$line; the rules queued ${matched[r]}," \
      "$((matched[r] > seen ? matched[r] - seen : 0)) of them passed undelayed"
  done
}

# Bits per second of a tc rate ("1gbit", "100mbit", "500kbit", "2000000bit").
netlab_rate_bps() {
  local v=${1,,} n unit
  if [[ $v =~ ^([0-9]+(\.[0-9]+)?)(bit|kbit|mbit|gbit)$ ]]; then
    n=${BASH_REMATCH[1]}
    unit=${BASH_REMATCH[3]}
  else
    netlab_log "bandwidth '$1': expected e.g. 1gbit, 100mbit, 500kbit (or none)"
    return 1
  fi
  local mult=1
  case $unit in kbit) mult=1000 ;; mbit) mult=1000000 ;; gbit) mult=1000000000 ;; esac
  awk -v n="$n" -v m="$mult" 'BEGIN { printf "%d\n", n * m }'
}

# netlab_shape RATE [DELAY [JITTER [LOSS]]]: shape every link, both directions: a token
# bucket at RATE, and at each end DELAY +- JITTER and a LOSS ("1%") with netem, or the
# delay line where there is no netem (netlab_impairment). Replaces any earlier shaping.
netlab_shape() {
  local rate=$1 delay=${2:-} jitter=${3:-} loss=${4:-} r
  case $delay in 0 | 0ms | 0us | 0s) delay="" ;; esac
  case $jitter in 0 | 0ms | 0us | 0s) jitter="" ;; esac
  case $loss in 0 | 0%) loss="" ;; esac
  netlab_delayline_stop
  local netem=()
  if [ -n "$delay$jitter$loss" ]; then
    netlab_have_netem  # probed here, in this shell: the $(...) below inherits the answer
    if [ "$(netlab_impairment)" = netem ]; then
      [ -n "$delay$jitter" ] && netem+=(delay "${delay:-0ms}" ${jitter:+"$jitter"})
      [ -n "$loss" ] && netem+=(loss "$loss")
    else
      netlab_delayline_start "${delay:-0}" "${jitter:-0}" "${loss:-0%}" || return 1
    fi
  fi
  for ((r = 0; r < NETLAB_RANKS; r++)); do
    _netlab_qdisc "$(netlab_ns "$r")" "$NETLAB_IF" "$rate" "${netem[@]}" || return 1
    _netlab_qdisc "$(netlab_switch)" "p$r" "$rate" "${netem[@]}" || return 1
  done
}

# netlab_tx_bytes: one line per rank, the bytes its lab interface has transmitted.
netlab_tx_bytes() {
  local r
  for ((r = 0; r < NETLAB_RANKS; r++)); do
    ip netns exec "$(netlab_ns "$r")" cat "/sys/class/net/$NETLAB_IF/statistics/tx_bytes"
  done
}

# netlab_run LOGDIR COMMAND [ARGS...]: COMMAND once per rank in its namespace; rank R's
# output in LOGDIR/rank-R.log (rank 0's also on stdout when NETLAB_ECHO=1). Returns 0
# if every rank exits 0, else the first nonzero status (the others are stopped).
netlab_run() {
  local logdir=$1
  shift
  mkdir -p "$logdir"
  local r ns pid args a
  local -A rank_of=()
  NETLAB_PIDS=()
  for ((r = 0; r < NETLAB_RANKS; r++)); do
    ns=$(netlab_ns "$r")
    args=()
    for a in "$@"; do args+=("${a//\{rank\}/$r}"); done
    local role=worker
    [ "$r" -ge "$NETLAB_WORKERS" ] && role=server
    ip netns exec "$ns" env RANK="$r" WORLD_SIZE="$NETLAB_RANKS" LOCAL_RANK="$r" \
      LOCAL_WORLD_SIZE="$NETLAB_RANKS" MASTER_ADDR="$(netlab_addr 0)" MASTER_PORT="$NETLAB_PORT" \
      GLOO_SOCKET_IFNAME="$NETLAB_IF" GRADCOMP_TIMEOUT_MS="$NETLAB_TIMEOUT_MS" \
      OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}" NETLAB_ROLE="$role" NETLAB_NS="$ns" \
      "${args[@]}" > "$logdir/rank-$r.log" 2>&1 &
    pid=$!
    NETLAB_PIDS+=("$pid")
    rank_of[$pid]=$r
  done
  # Rank 0's log is streamed by a tail that ends by itself once rank 0 has exited and
  # it has copied the last bytes (--pid); killing it on a timer instead lost the end of
  # the output (the report) on a loaded machine.
  local tail_pid=""
  if [ "${NETLAB_ECHO:-0}" = 1 ]; then
    tail -n +1 -s 0.2 -F --pid="${NETLAB_PIDS[0]}" "$logdir/rank-0.log" 2>/dev/null &
    tail_pid=$!
  fi
  # Reap in completion order; the first failure stops the rest (a dead peer would end
  # them with a CommError anyway, after the collective timeout).
  local status=0 st done_pid
  while [ ${#NETLAB_PIDS[@]} -gt 0 ]; do
    done_pid=""
    wait -n -p done_pid "${NETLAB_PIDS[@]}" 2>/dev/null
    st=$?
    # wait -p unsets done_pid when no listed process is left to wait for (bash may have
    # reaped them already): collect whatever is left one by one and stop.
    if [ -z "${done_pid:-}" ]; then
      for pid in "${NETLAB_PIDS[@]}"; do
        wait "$pid" 2>/dev/null
        st=$?
        [ "$st" -ne 0 ] && [ "$st" -ne 127 ] && [ "$status" -eq 0 ] && status=$st
      done
      break
    fi
    local left=()
    for pid in "${NETLAB_PIDS[@]}"; do [ "$pid" != "$done_pid" ] && left+=("$pid"); done
    NETLAB_PIDS=("${left[@]}")
    if [ "$st" -ne 0 ] && [ "$status" -eq 0 ]; then
      status=$st
      netlab_log "rank ${rank_of[$done_pid]} exited with status $st; stopping the others"
      for pid in "${NETLAB_PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null; done
    fi
  done
  [ -n "$tail_pid" ] && wait "$tail_pid" 2>/dev/null
  return "$status"
}

# netlab_verify: TCP throughput rank 0 -> rank 1 and median round trip of a 1-byte
# ping-pong, with Python's standard library (no iperf3 needed).
netlab_verify() {
  local bytes=${1:-25000000}
  local py=/usr/bin/python3
  [ -x "$py" ] || { netlab_log "--verify needs /usr/bin/python3"; return 1; }
  local server="$(netlab_addr 1)"
  ip netns exec "$(netlab_ns 1)" "$py" - "$server" "$bytes" <<'EOF' &
import socket, sys, time
addr, total = sys.argv[1], int(sys.argv[2])
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((addr, 29999)); s.listen(1)
c, _ = s.accept(); c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
for _ in range(50):
    c.recv(1); c.sendall(b"x")
got, t0 = 0, None
while got < total:
    b = c.recv(1 << 20)
    if not b: break
    if t0 is None: t0 = time.perf_counter()
    got += len(b)
t1 = time.perf_counter()
c.sendall(b"%d %.6f" % (got, t1 - t0))
c.close()
EOF
  local spid=$!
  NETLAB_PIDS+=("$spid")
  ip netns exec "$(netlab_ns 0)" "$py" - "$server" "$bytes" <<'EOF'
import socket, statistics, sys, time
addr, total = sys.argv[1], int(sys.argv[2])
for _ in range(100):
    try:
        s = socket.create_connection((addr, 29999), timeout=30); break
    except OSError:
        time.sleep(0.05)
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
rtt = []
for _ in range(50):
    t0 = time.perf_counter(); s.sendall(b"x"); s.recv(1); rtt.append(time.perf_counter() - t0)
chunk = b"\0" * (1 << 20)
sent = 0
while sent < total:
    n = min(len(chunk), total - sent); s.sendall(chunk[:n]); sent += n
reply = s.recv(100).split()
got, secs = int(reply[0]), float(reply[1])
rtt.sort()
print("netlab verify: rank 0 -> rank 1: %.1f MB in %.3f s = %.1f Mbit/s; RTT median %.3f ms"
      " (min %.3f, max %.3f)" % (got / 1e6, secs, got * 8 / secs / 1e6,
                                 statistics.median(rtt) * 1e3, rtt[0] * 1e3, rtt[-1] * 1e3))
EOF
  local st=$?
  wait "$spid"
  NETLAB_PIDS=()
  return $st
}

netlab_usage() { sed -n '2,/^$/p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

netlab_main() {
  set -uo pipefail
  local workers=4 servers=0 rate=1gbit delay="" jitter="" loss="" verify=0 logdir=""
  while [ $# -gt 0 ]; do
    case $1 in
      --workers) workers=$2; shift 2 ;;
      --servers) servers=$2; shift 2 ;;
      --bandwidth) rate=$2; shift 2 ;;
      --delay) delay=$2; shift 2 ;;
      --jitter) jitter=$2; shift 2 ;;
      --loss) loss=$2; shift 2 ;;
      --queue-ms) NETLAB_QUEUE_MS=$2; shift 2 ;;
      --port) NETLAB_PORT=$2; shift 2 ;;
      --timeout-ms) NETLAB_TIMEOUT_MS=$2; shift 2 ;;
      --log-dir) logdir=$2; shift 2 ;;
      --verify) verify=1; shift ;;
      -h | --help) netlab_usage; return 0 ;;
      --) shift; break ;;
      *) netlab_log "unknown option '$1' (see --help)"; return 2 ;;
    esac
  done
  if [ "$verify" = 0 ] && [ $# -eq 0 ]; then
    netlab_log "no command given (scripts/netlab.sh [options] -- COMMAND ...; see --help)"
    return 2
  fi
  if ! [[ $workers =~ ^[0-9]+$ && $servers =~ ^[0-9]+$ ]] || [ $((workers + servers)) -lt 2 ] ||
    [ $((workers + servers)) -gt 200 ]; then
    netlab_log "--workers + --servers must be 2..200"
    return 2
  fi
  if [ "$rate" != none ]; then netlab_rate_bps "$rate" >/dev/null || return 2; fi
  local d
  for d in "$delay" "$jitter"; do
    if [ -n "$d" ] && ! [[ $d =~ ^[0-9]+(\.[0-9]+)?(s|ms|us)$|^0$ ]]; then
      netlab_log "--delay/--jitter '$d': expected a duration such as 5ms, 500us or 0.1s"
      return 2
    fi
  done
  if [ -n "$loss" ] && ! [[ $loss =~ ^[0-9]+(\.[0-9]+)?%$ ]]; then
    netlab_log "--loss '$loss': expected a percentage such as 1% or 0.5%"
    return 2
  fi
  netlab_require_root
  netlab_up $((workers + servers)) "$workers" || { netlab_log "could not build the lab"; return 1; }
  netlab_shape "$rate" "$delay" "$jitter" "$loss" || { netlab_log "could not shape the links"; return 1; }
  local impair=""
  if [ -n "$delay$jitter$loss" ]; then
    impair=", each end:${delay:+ delay $delay}${jitter:+ jitter $jitter}${loss:+ loss $loss}"
    impair+=" ($(netlab_impairment))"
  fi
  netlab_log "$NETLAB_RANKS ranks ($workers workers, $servers servers) in namespaces" \
    "${NETLAB_PREFIX}-r*, links $rate$impair"
  if [ "$verify" = 1 ]; then
    netlab_verify
    local st=$?
    [ ${#NETLAB_DL_PIDS[@]} -gt 0 ] && netlab_delayline_stats | sed 's/^/netlab: delay line /' >&2
    return $st
  fi
  local keep=1
  if [ -z "$logdir" ]; then
    logdir=$(mktemp -d "${TMPDIR:-/tmp}/netlab.XXXXXX")
    keep=0
  fi
  NETLAB_ECHO=1 netlab_run "$logdir" "$@"
  local st=$?
  if [ "$st" -ne 0 ]; then
    netlab_log "a rank failed (status $st); logs in $logdir:"
    local f
    for f in "$logdir"/rank-*.log; do echo "--- $f (last lines)" >&2; tail -n 5 "$f" >&2; done
  elif [ "$keep" = 0 ]; then
    rm -rf "$logdir"
  fi
  return "$st"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  netlab_main "$@"
  exit $?
fi
