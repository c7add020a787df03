#!/usr/bin/env bash
# Runs every libFuzzer target for a while each, with a kept corpus.
#
#   usage: scripts/fuzz.sh [--seconds N] [--targets "decode spec checkpoint"] [--merge]
#
# Builds the clang ASan+UBSan+libFuzzer build in build-sanitize/ (configured exactly as
# scripts/test.sh configures it, so the two share it) and runs each target N seconds
# (default 20; GRADCOMP_JOBS targets side by side, default 2) on its working corpus
# build-sanitize/corpus/<target>/, seeded from the
# in-tree corpus tests/fuzz/corpus/<target>/ (read only: libFuzzer adds new inputs to the
# first directory only). --merge minimises the working corpus afterwards (-merge=1).
# Prints one line per target: executions, executions per second, corpus size (inputs and
# bytes) and the result. Exits non-zero on any finding, naming the reproducer
# (build-sanitize/fuzz-artifacts/<target>-crash-...; rerun it with
# build-sanitize/bin/gradcomp_<target>_fuzz FILE).
# The checkpoint target runs with -max_len=4096 (its seeds are < 1 KiB checkpoints with
# every array kind; longer inputs add megabytes of CRC and copying, not structure); the
# others with libFuzzer's default (4096 or the longest input in their corpus).
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=20
targets="decode spec checkpoint"
merge=0
while [ $# -gt 0 ]; do
  case $1 in
    --seconds) seconds=${2:?--seconds needs a value}; shift 2 ;;
    --targets) targets=${2:?--targets needs a list}; shift 2 ;;
    --merge) merge=1; shift ;;
    -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "fuzz.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
case $seconds in
  ''|*[!0-9]*) echo "fuzz.sh: --seconds takes a whole number of seconds, not '$seconds'" >&2; exit 2 ;;
esac
jobs=${GRADCOMP_JOBS:-2}
quiet=()
[ -t 1 ] || quiet=(--quiet)

build="build-sanitize"
fuzz_bins=()
for t in $targets; do
  [ -f "tests/fuzz/${t}_fuzz.cc" ] || {
    echo "fuzz.sh: no fuzz target '$t' (tests/fuzz/${t}_fuzz.cc)" >&2; exit 2; }
  fuzz_bins+=("gradcomp_${t}_fuzz")
done

bash scripts/configure-sanitize.sh
cmake --build "$build" -j "$jobs" --target "${fuzz_bins[@]}" -- "${quiet[@]}"

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
mkdir -p "$build/fuzz-artifacts"
findings=0
# corpus_dirs TARGET: the working corpus (created) and the in-tree seeds, if any.
corpus_dirs() {
  mkdir -p "$build/corpus/$1"
  dirs=("$build/corpus/$1")
  [ -d "tests/fuzz/corpus/$1" ] && dirs+=("tests/fuzz/corpus/$1")
}
# The targets run side by side, $jobs at a time (each is one process on one core): on a
# 2-core machine the three take the time of two, not three.
run_target() {
  local t=$1 extra=() status=0
  corpus_dirs "$t"
  [ "$t" = checkpoint ] && extra+=(-max_len=4096)
  "$build/bin/gradcomp_${t}_fuzz" "${dirs[@]}" -max_total_time="$seconds" -timeout=10 \
    -print_final_stats=1 "${extra[@]}" -artifact_prefix="$build/fuzz-artifacts/$t-" \
    >"$build/fuzz-$t.log" 2>&1 || status=$?
  echo $status >"$build/fuzz-$t.status"
}
running=0
for t in $targets; do
  if [ $running -ge "$jobs" ]; then wait -n || true; running=$((running - 1)); fi
  run_target "$t" &
  running=$((running + 1))
done
wait

printf '%-11s %12s %10s %16s  %s\n' target executions "exec/s" "corpus" result
for t in $targets; do
  bin="$build/bin/gradcomp_${t}_fuzz"
  work="$build/corpus/$t"
  log="$build/fuzz-$t.log"
  corpus_dirs "$t"
  status=$(cat "$build/fuzz-$t.status")
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  # The last status line: "#N  <event> cov: C ft: F corp: K/SIZE ..."
  corp=$(grep -oE 'corp: [0-9]+/[0-9]+[a-zA-Z]*' "$log" | tail -n 1 | cut -d' ' -f2)
  rate=$(awk -v r="${runs:-0}" -v s="$seconds" 'BEGIN { printf "%d", (s > 0 ? r / s : 0) }')
  if [ $status -eq 0 ]; then
    result=ok
  else
    findings=$((findings + 1))
    repro=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -n 1)
    result="FINDING (exit $status): reproducer ${repro:-none written}, log $log"
  fi
  printf '%-11s %12s %10s %16s  %s\n' "$t" "${runs:-?}" "$rate" "${corp:-?}" "$result"
  if [ $status -ne 0 ]; then
    grep -E "ERROR|SUMMARY|runtime error|deadly signal" "$log" | head -n 5 | sed 's/^/    /'
  elif [ $merge -eq 1 ]; then
    rm -rf "$work.merged" && mkdir -p "$work.merged"
    "$bin" -merge=1 "$work.merged" "${dirs[@]}" >"$build/fuzz-$t.merge.log" 2>&1
    rm -rf "$work" && mv "$work.merged" "$work"
    echo "            merged: $(find "$work" -type f | wc -l) inputs kept in $work"
  fi
done
if [ $findings -ne 0 ]; then
  echo "fuzz.sh: $findings target(s) found a failure (reproducers above)" >&2
  exit 1
fi
