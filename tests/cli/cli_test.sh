#!/usr/bin/env bash
# End-to-end tests of the gradcomp CLI binary (registered with ctest as cli.*).
#   usage: cli_test.sh /path/to/gradcomp
# Round trips of small float32 files, and every kind of bad input: each must exit 1
# with exactly one line on stderr and leave existing output files untouched.
set -uo pipefail

GRADCOMP=${1:?usage: cli_test.sh /path/to/gradcomp}
REPO=$(cd "$(dirname "$0")/../.." && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/gradcomp-cli.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"

failures=0
pass() { echo "ok   $1"; }
fail() { echo "FAIL $1"; failures=$((failures + 1)); }

# Writes little-endian float32 values (perl is part of every Debian install).
floats() { local out=$1; shift; perl -e 'print pack("f<*", @ARGV)' -- "$@" > "$out"; }

# run NAME CMD...: expects exit 0 and an empty stderr.
run_ok() {
  local name=$1; shift
  if "$@" > out.txt 2> err.txt && [ ! -s err.txt ]; then pass "$name"; else
    fail "$name (exit $?)"; cat err.txt; fi
}

# run_err NAME PATTERN CMD...: expects exit 1, exactly one stderr line starting with
# "gradcomp: " and matching PATTERN (extended regex, case-insensitive).
run_err() {
  local name=$1 pattern=$2; shift 2
  "$@" > out.txt 2> err.txt
  local rc=$? lines
  lines=$(wc -l < err.txt)
  if [ "$rc" -ne 1 ]; then fail "$name: exit $rc, expected 1"; cat err.txt; return; fi
  if [ "$lines" -ne 1 ]; then fail "$name: $lines stderr lines, expected 1"; cat err.txt; return; fi
  if ! grep -q '^gradcomp: ' err.txt; then fail "$name: no 'gradcomp: ' prefix"; cat err.txt; return; fi
  if ! grep -qiE "$pattern" err.txt; then fail "$name: stderr does not match /$pattern/"; cat err.txt; return; fi
  pass "$name: $(cat err.txt)"
}

# ---- list, help, version ----------------------------------------------------------
run_ok "list" "$GRADCOMP" list
grep -q '^none ' out.txt && grep -q 'noef(' out.txt && grep -qi 'error feedback' out.txt \
  && pass "list names none and the wrappers" || { fail "list output"; cat out.txt; }
run_ok "list --json" "$GRADCOMP" list --json
if grep -q '"kind":"codec","name":"none"' out.txt && ! grep -qv '^{.*}$' out.txt; then
  pass "list --json: one object per line, names none"
else fail "list --json output"; cat out.txt; fi
codecs=$(grep -o '"kind":"codec","name":"[^"]*"' out.txt | sed 's/.*"name":"\([^"]*\)"/\1/')
run_ok "--version" "$GRADCOMP" --version
grep -q '^gradcomp [0-9]' out.txt && pass "version printed" || fail "version output"
run_ok "--help" "$GRADCOMP" --help
grep -q 'train' out.txt && grep -q 'eval' out.txt && grep -q 'list' out.txt \
  && pass "--help lists the LibTorch commands too" || { fail "--help output"; cat out.txt; }

# ---- the two binaries: gradcomp (torch-free) hands train/eval to gradcomp-torch -------
if readelf -d "$GRADCOMP" | grep -q 'NEEDED.*lib\(torch\|c10\)'; then
  fail "gradcomp links LibTorch"; readelf -d "$GRADCOMP" | grep NEEDED
else pass "gradcomp links no LibTorch"; fi
run_ok "train --help (gradcomp-torch)" "$GRADCOMP" train --help
grep -q -- '--compressor' out.txt && pass "train --help lists --compressor" \
  || { fail "train --help output"; cat out.txt; }
run_err "train with an unknown flag (gradcomp-torch's error)" "no-such-flag" \
  "$GRADCOMP" train --no-such-flag
mkdir alone && cp "$GRADCOMP" alone/gradcomp
run_err "train without gradcomp-torch beside it" "gradcomp-torch" alone/gradcomp train
run_ok "list without gradcomp-torch beside it" alone/gradcomp list

# ---- round trips ------------------------------------------------------------------
floats g.f32 1 -2.5 3.25 0 1e-30 -1e30 7 0.125 -0.5 42
run_ok "encode none" "$GRADCOMP" codec encode --spec none --in g.f32 --out m.bin
run_ok "decode none" "$GRADCOMP" codec decode --spec none --in m.bin --out d.f32
cmp -s g.f32 d.f32 && pass "none round trip reproduces the input" || fail "none round trip"

run_ok "encode ef(none) --residual (new file)" "$GRADCOMP" codec encode --spec 'ef(none)' \
  --in g.f32 --out m2.bin --residual r.f32 --seed 3 --step 4 --rank 1 --bucket 2
run_ok "decode ef(none)" "$GRADCOMP" codec decode --spec 'ef(none)' --in m2.bin --out d2.f32
cmp -s g.f32 d2.f32 && pass "ef(none) round trip reproduces the input" || fail "ef(none) round trip"
floats zeros.f32 0 0 0 0 0 0 0 0 0 0
cmp -s r.f32 zeros.f32 && pass "ef(none) residual written (zeros)" || fail "ef(none) residual"
run_ok "encode ef(none) --residual (existing file)" "$GRADCOMP" codec encode --spec 'ef(none)' \
  --in g.f32 --out m3.bin --residual r.f32
grep -q 'residual loaded' out.txt && pass "residual loaded" || fail "residual not loaded"
cmp -s m2.bin m3.bin && pass "same message from a zero residual" || fail "messages differ"
# A nonzero residual is added to the gradient: none is exact, so decode gives g + r.
floats g1.f32 1 2 3 4
floats r1.f32 0.5 0.25 -1 8
floats expect1.f32 1.5 2.25 2 12
run_ok "encode with a nonzero residual" "$GRADCOMP" codec encode --spec 'ef(none)' \
  --in g1.f32 --out m4.bin --residual r1.f32
run_ok "decode it" "$GRADCOMP" codec decode --spec none --in m4.bin --out d4.f32
cmp -s d4.f32 expect1.f32 && pass "residual added before encoding" || fail "residual not applied"
: > empty.f32
run_ok "encode an empty gradient" "$GRADCOMP" codec encode --spec none --in empty.f32 --out m0.bin
run_ok "decode an empty gradient" "$GRADCOMP" codec decode --spec none --in m0.bin --out d0.f32
[ -f d0.f32 ] && [ ! -s d0.f32 ] && pass "empty round trip" || fail "empty round trip"

# ---- bad inputs: exit 1, one line, nothing overwritten -------------------------------
floats keep.f32 9 9 9
cp keep.f32 out.f32
run_err "missing input file" "no-such\.f32.*(no such file|cannot open)" \
  "$GRADCOMP" codec encode --spec none --in no-such.f32 --out out.f32
printf '0123456789' > ten.bin
run_err "10-byte float file" "multiple of 4" "$GRADCOMP" codec encode --spec none --in ten.bin --out out.f32
run_err "unknown codec" "unknown codec 'nosuchcodec'" \
  "$GRADCOMP" codec encode --spec nosuchcodec --in g.f32 --out out.f32
# A bad parameter value for the first codec that has a parameter (a bad key where
# no codec has parameters yet).
bad_spec="none:nosuchkey=1"
for c in $codecs; do
  key=$(grep -o "\"kind\":\"codec\",\"name\":\"$c\".*" <("$GRADCOMP" list --json) \
    | grep -o '"params":\[{"key":"[^"]*"' | sed 's/.*"key":"\([^"]*\)"/\1/')
  if [ -n "$key" ]; then bad_spec="$c:$key=not-a-value"; break; fi
done
run_err "bad parameter ($bad_spec)" "nosuchkey|not-a-value" \
  "$GRADCOMP" codec encode --spec "$bad_spec" --in g.f32 --out out.f32
run_err "malformed spec" "spec|expected" "$GRADCOMP" codec encode --spec 'ef(none' --in g.f32 --out out.f32
head -c 30 m.bin > trunc.bin
run_err "truncated message" "trunc\.bin" "$GRADCOMP" codec decode --spec none --in trunc.bin --out out.f32
head -c 10 m.bin > tiny.bin
run_err "message shorter than a header" "header" "$GRADCOMP" codec decode --spec none --in tiny.bin --out out.f32
run_err "not a message" "magic" "$GRADCOMP" codec decode --spec none --in g.f32 --out out.f32
# A message of another spec: decode with a different codec when there is one; else
# the message's codec id is patched to look like another codec's.
other=""
for c in $codecs; do [ "$c" != none ] && { other=$c; break; }; done
if [ -n "$other" ]; then
  run_err "message of another codec ($other)" "codec id|other parameters" \
    "$GRADCOMP" codec decode --spec "$other" --in m.bin --out out.f32
else
  perl -e 'local $/; my $m = <STDIN>; substr($m, 6, 2) = pack("v", 999); print $m' < m.bin > other.bin
  run_err "message of another codec (patched id)" "codec id" \
    "$GRADCOMP" codec decode --spec none --in other.bin --out out.f32
fi
run_err "missing message file" "cannot open" "$GRADCOMP" codec decode --spec none --in nope.bin --out out.f32
# Corruption anywhere is caught by the header's CRC32C (issue #15: a top-k message with
# its element count's top byte, byte 15, changed used to write a 4 GB file and exit 0;
# flipped index or value bits decoded into another gradient).
run_ok "encode topk" "$GRADCOMP" codec encode --spec topk:ratio=0.3 --in g.f32 --out tk.bin
perl -e 'local $/; my $m = <STDIN>; substr($m, 15, 1) = chr(0x41); print $m' < tk.bin > tk15.bin
run_err "element count changed (byte 15)" "tk15\.bin.*checksum mismatch" \
  "$GRADCOMP" codec decode --spec topk:ratio=0.3 --in tk15.bin --out out.f32
size=$(wc -c < tk.bin)
# Bits of the codec id, the element count, the payload's count, an index, the last value
# (the magic, version and length are framing, rejected before the checksum is read).
for bit in $((8 * 6)) $((8 * 12 + 5)) $((8 * 24)) $((8 * 28 + 3)) $((8 * size - 1)); do
  perl -e 'local $/; my $m = <STDIN>; vec($m, $ARGV[0], 1) ^= 1; print $m' "$bit" < tk.bin > tkbit.bin
  run_err "bit $bit of the message flipped" "checksum mismatch" \
    "$GRADCOMP" codec decode --spec topk:ratio=0.3 --in tkbit.bin --out out.f32
done
# reseal: recomputes a message's CRC32C (wire.h: over bytes 0-19 and the payload from 24),
# to build messages whose header lies with a valid checksum.
reseal() {
  perl -e 'local $/; my $m = <STDIN>; my @t;
    for my $i (0 .. 255) { my $c = $i; $c = $c & 1 ? ($c >> 1) ^ 0x82F63B78 : $c >> 1 for 1 .. 8; $t[$i] = $c; }
    my $c = 0xFFFFFFFF;
    $c = $t[($c ^ $_) & 0xFF] ^ ($c >> 8) for unpack("C*", substr($m, 0, 20) . substr($m, 24));
    substr($m, 20, 4) = pack("V", $c ^ 0xFFFFFFFF); print $m'
}
reseal < tk.bin | cmp -s - tk.bin && pass "reseal reproduces the encoder's checksum" \
  || fail "reseal differs from the encoder's checksum"
# Element counts above 2^28 (1 GiB of floats) are refused unless --n says to expect them;
# with --n, a header with another count is refused.
perl -e 'local $/; my $m = <STDIN>; substr($m, 12, 4) = pack("V", 2**28 + 1); print $m' < m.bin | reseal > big.bin
run_err "2^28+1 elements without --n" "big\.bin.*268435457 elements.*--n" \
  "$GRADCOMP" codec decode --spec none --in big.bin --out out.f32
run_err "--n differs from the header" "header says 10 elements, --n expects 11" \
  "$GRADCOMP" codec decode --spec none --in m.bin --out out.f32 --n 11
run_err "--n of a lying header" "header says 268435457 elements, --n expects 10" \
  "$GRADCOMP" codec decode --spec none --in big.bin --out out.f32 --n 10
run_ok "--n matching the header" "$GRADCOMP" codec decode --spec none --in m.bin --out n10.f32 --n 10
cmp -s n10.f32 d.f32 && pass "--n 10 decodes the same floats" || fail "--n 10 decoded other floats"
cmp -s keep.f32 out.f32 && pass "out file untouched after failed commands" || fail "out file was modified"
[ ! -e out.f32.tmp ] && pass "no temporary left behind" || fail "out.f32.tmp left behind"

floats r_wrong.f32 1 2 3
cp r_wrong.f32 r_wrong.keep
run_err "residual of the wrong size" "r_wrong\.f32.*3.*10" \
  "$GRADCOMP" codec encode --spec 'ef(none)' --in g.f32 --out out.f32 --residual r_wrong.f32
cmp -s r_wrong.f32 r_wrong.keep && cmp -s keep.f32 out.f32 \
  && pass "nothing written after a bad residual" || fail "files changed after a bad residual"
run_err "residual with a stateless spec" "keeps no memory" \
  "$GRADCOMP" codec encode --spec none --in g.f32 --out out.f32 --residual r.f32
run_err "residual that is a directory" "directory" \
  "$GRADCOMP" codec encode --spec 'ef(none)' --in g.f32 --out out.f32 --residual "$WORK"
# The message and the residual change together: a residual that cannot be written left
# --out already replaced by the new message.
cp keep.f32 old.msg
run_err "residual in a missing directory" "/nonexistent/r\.f32.*cannot create" \
  "$GRADCOMP" codec encode --in g.f32 --out old.msg --spec 'efm(topk:ratio=0.01)' \
  --residual /nonexistent/r.f32
cmp -s keep.f32 old.msg && [ ! -e old.msg.tmp ] \
  && pass "--out untouched when the residual cannot be written" \
  || fail "--out replaced although the residual could not be written"
run_err "output in a missing directory" "cannot create" \
  "$GRADCOMP" codec encode --spec none --in g.f32 --out no/such/dir/m.bin

run_err "unknown flag" "bogus" "$GRADCOMP" codec encode --bogus
run_err "missing required flag" "required" "$GRADCOMP" codec encode --spec none --in g.f32
run_err "no command" "subcommand" "$GRADCOMP"
run_err "unknown command" "nosuchcommand" "$GRADCOMP" nosuchcommand
run_err "bad number" "size" "$GRADCOMP" bench codec --size abc
# Unsigned flags: CLI11 would read -1 as 2^64 - 1.
run_err "negative unsigned (codec encode --seed)" "^gradcomp: --seed: -1 is not an integer >= 0" \
  "$GRADCOMP" codec encode --spec none --in g.f32 --out out.f32 --seed -1
run_err "negative unsigned (codec encode --step)" "^gradcomp: --step: -3 is not an integer >= 0" \
  "$GRADCOMP" codec encode --spec none --in g.f32 --out out.f32 --step -3
run_err "negative unsigned (bench codec --seed)" "^gradcomp: --seed: -1 is not an integer >= 0" \
  "$GRADCOMP" bench codec --size 1000 --spec none --seed -1
run_err "eval --poll-ms 0" "^gradcomp: --poll-ms: 0 is not an integer >= 1" \
  "$GRADCOMP" eval --checkpoint-dir "$WORK" --poll-ms 0
run_err "eval --idle-seconds -1" "^gradcomp: --idle-seconds: -1 is not a number >= 0" \
  "$GRADCOMP" eval --checkpoint-dir "$WORK" --idle-seconds -1
run_err "eval --seed -1" "^gradcomp: --seed: -1 is not an integer >= 0" \
  "$GRADCOMP" eval --checkpoint-dir "$WORK" --seed -1
# Past 2^64 - 1: CLI11 read it as 2^64 - 1, silently.
run_err "eval --seed 2^64" "^gradcomp: --seed: 18446744073709551616 is larger than 18446744073709551615" \
  "$GRADCOMP" eval --checkpoint-dir "$WORK" --seed 18446744073709551616
# An empty path switched the feature off as if the flag were absent.
for flag in --metrics --checkpoint-dir --data-dir; do
  run_err "train $flag ''" "^gradcomp: $flag: the path is empty" \
    "$GRADCOMP" train --dataset synthetic --steps 1 "$flag" ""
done
run_err "eval --output ''" "^gradcomp: --output: the path is empty" \
  "$GRADCOMP" eval --checkpoint-dir "$WORK" --output ""
# eval without a readable worker checkpoint: it exited 0 and printed nothing.
mkdir -p ev_empty ev_bad && printf 'not a checkpoint at all, not even close' > ev_bad/rank-0.ckpt
eval_job=(--dataset synthetic --synthetic-train 64 --mlp-hidden 16)
run_err "eval of an empty directory" "^gradcomp: eval: no checkpoint to evaluate in .*ev_empty" \
  "$GRADCOMP" eval --checkpoint-dir ev_empty "${eval_job[@]}"
run_err "eval of an unreadable rank-0.ckpt" "^gradcomp: checkpoint .*rank-0\.ckpt: bad magic" \
  "$GRADCOMP" eval --checkpoint-dir ev_bad "${eval_job[@]}"
# --threads is bounded: libgomp crashed (SIGSEGV in GOMP_parallel) at 100000 threads.
run_err "bench codec --threads 100000" "^gradcomp: --threads: 100000 is not an integer in \\[1, 1024\\]" \
  "$GRADCOMP" bench codec --size 1048576 --repeats 1 --threads 100000
run_err "bench codec --threads 0" "^gradcomp: --threads: 0 is not an integer in \\[1, 1024\\]" \
  "$GRADCOMP" bench codec --size 1000 --repeats 1 --threads 0
run_err "eval --threads 100000" "^gradcomp: --threads: 100000 is not an integer in \\[1, 1024\\]" \
  "$GRADCOMP" eval --checkpoint-dir "$WORK" --threads 100000

# ---- train: every bad flag value refused once, before any worker starts (issue 32) --
# The launcher checks the whole options value first; it used to start the workers, each
# of which printed the same error (4 lines), and --workers 0 ran 4 workers.
# The job leaves --workers (4 by default) and --batch-size (64) at their defaults, so that
# a case's flag is given once (CLI11 reports both values of a repeated flag it cannot read).
train_job=(--dataset synthetic --synthetic-train 512 --mlp-hidden 16 --steps 2 --seed 7
           --timeout-ms 8000)
if "$GRADCOMP" train --workers 2 "${train_job[@]}" > out.txt 2> err.txt &&
   grep -q "== gradcomp train report ==" out.txt; then
  pass "train: the job the bad values are added to runs"
else fail "train: the base job of the bad-value tests"; cat err.txt; fi
# train_err EXPECTED FLAG...: `train <job> FLAG...` exits 1 within 5 s (a launch alone
# takes longer), prints nothing on stdout (rank 0's lines), and exactly one stderr line,
# which contains EXPECTED (fixed text naming the flag and the value). A worker that
# started would print a line of its own, and the launcher "training failed: rank ...".
train_err() {
  local want=$1 name="train ${*:2}" started rc lines took
  shift
  started=$(date +%s%N)
  "$GRADCOMP" train "${train_job[@]}" "$@" > out.txt 2> err.txt
  rc=$?
  took=$(( ($(date +%s%N) - started) / 1000000 ))
  lines=$(wc -l < err.txt)
  if [ "$rc" -ne 1 ]; then fail "$name: exit $rc, expected 1"; cat err.txt; return; fi
  if [ "$lines" -ne 1 ]; then fail "$name: $lines stderr lines, expected 1"; cat err.txt; return; fi
  if ! grep -q '^gradcomp: ' err.txt; then fail "$name: no 'gradcomp: ' prefix"; cat err.txt; return; fi
  if ! grep -qF -- "$want" err.txt; then fail "$name: stderr lacks '$want'"; cat err.txt; return; fi
  if [ -s out.txt ]; then fail "$name: a worker ran (stdout not empty)"; cat out.txt; return; fi
  if grep -qE 'training failed|rank [0-9]' err.txt; then fail "$name: a worker's error"; cat err.txt; return; fi
  if [ "$took" -ge 5000 ]; then fail "$name: took ${took} ms"; return; fi
  pass "$name (${took} ms): $(cat err.txt)"
}
train_err "--workers: 0 is not an integer in [1, 65536]" --workers 0
train_err "--workers: -2 is not an integer in [1, 65536]" --workers -2
train_err "--workers: 70000 is not an integer in [1, 65536]" --workers 70000
train_err "--workers = 3x" --workers 3x
train_err "--epochs: -1 is not an integer >= 1" --epochs -1
train_err "--epochs: 0 is not an integer >= 1" --epochs 0
train_err "--epochs = 3x" --epochs 3x
train_err "--steps: -1 is not an integer >= 0" --steps -1
train_err "--batch-size: 0 is not an integer >= 1" --batch-size 0
train_err "--batch-size = 3.5" --batch-size 3.5
train_err "--batch-size: 129 is not in [1, 128] (the smallest worker's shard: --synthetic-train 512 over 4 workers)" \
  --batch-size 129
train_err "--batch-size: 200 is not in [1, 170] (the smallest worker's shard: --synthetic-train 512 over 3 workers)" \
  --workers 3 --batch-size 200
train_err "--lr: -1 is not a number > 0" --lr -1
train_err "--lr: 0 is not a number > 0" --lr 0
train_err "--lr: nan is not a number > 0" --lr nan
train_err "--lr = 0.1x" --lr 0.1x
train_err "--momentum: 1 is not a number in [0, 1)" --momentum 1
train_err "--momentum: -0.5 is not a number in [0, 1)" --momentum -0.5
train_err "--nesterov needs --momentum > 0" --momentum 0 --nesterov
train_err "--weight-decay: -0.001 is not a number >= 0" --weight-decay -0.001
train_err "--optimizer: adam is not one of sgd, adamw" --optimizer adam
train_err "--momentum applies to --optimizer sgd only" --optimizer adamw --momentum 0.5
train_err "--nesterov applies to --optimizer sgd only" --optimizer adamw --nesterov
train_err "--adam-beta1, --adam-beta2 and --adam-eps apply to --optimizer adamw only" --adam-beta2 0.99
train_err "--adam-beta1: 1 is not a number in [0, 1)" --optimizer adamw --adam-beta1 1
train_err "--adam-beta2: -0.1 is not a number in [0, 1)" --optimizer adamw --adam-beta2 -0.1
train_err "--adam-eps: 0 is not a number > 0" --optimizer adamw --adam-eps 0
train_err "--weight-decay: -1 is not a number >= 0" --optimizer adamw --weight-decay -1
train_err "--optimizer adamw cannot run on --topology ps-async" --optimizer adamw --topology ps-async
# Momentum kept in a compressor's memory has no meaning under AdamW.
train_err "--compressor dgc keeps SGD's momentum in its memory and cannot run under --optimizer adamw" \
  --optimizer adamw --compressor dgc
train_err "--compressor efm(topk:ratio=0.01) keeps SGD's momentum in its memory" \
  --optimizer adamw --compressor "efm(topk:ratio=0.01)"
train_err "--compressor sketched-sgd keeps SGD's momentum in its memory" \
  --optimizer adamw --compressor sketched-sgd
train_err "--compressor fetchsgd keeps SGD's momentum in its memory" \
  --optimizer adamw --compressor fetchsgd
train_err "--warmup-steps: -1 is not an integer >= 0" --warmup-steps -1
train_err "--lr-decay linear: unknown (known: constant, step, cosine)" --lr-decay linear
train_err "--milestones: 3,2 is not in increasing order" --lr-decay step --milestones 3,2
train_err "--milestones: 'x' in '3,x' is not a positive integer" --milestones 3,x
train_err "--gamma: 0 is not a number > 0" --gamma 0
train_err "--dense-steps: -1 is not an integer >= 0" --dense-steps -1
train_err "--bucket-mb: -1 is not a number >= 0" --bucket-mb -1
train_err "--min-group-mb: -1 is not a number >= 0" --min-group-mb -1
train_err "--min-elements: -5 is not an integer >= 0" --min-elements -5
train_err "--dense-share: Value 1.5 not in range" --dense-share 1.5
train_err "--dense-share: nan is not a number in [0, 1]" --dense-share nan
train_err "--threads: 0 is not an integer in [1, 1024]" --threads 0
train_err "--threads: 100000 is not an integer in [1, 1024]" --workers 1 --threads 100000
train_err "--blas-threads: -1 is not an integer in [0, 1024]" --blas-threads -1
train_err "--blas-threads: 100000 is not an integer in [0, 1024]" --blas-threads 100000
# The outer loop (issue 31): its flags, and what cannot go with it.
train_err "--sync-every: -1 is not 0 or more" --sync-every -1
train_err "--fragments: 3 is not at least 1 and a divisor of --sync-every (4)" --sync-every 4 --fragments 3
train_err "--delay: 2 is not in [0, --sync-every / --fragments = 2)" --sync-every 4 --fragments 2 --delay 2
train_err "outer optimizer 'adam' is unknown; known: average, sgd, nesterov, sparseloco" --sync-every 4 --outer adam
train_err "outer optimizer nesterov: lr=0: out of range" --sync-every 4 --outer nesterov:lr=0
train_err "--outer, --fragments, --delay and --mix need --sync-every H > 0" --outer average
train_err "--mix: 1 is not a number in [0, 1)" --sync-every 4 --mix 1
train_err "--sync-every runs on --topology allreduce only" --sync-every 4 --topology ps-sync
train_err "--dense-steps does not apply with --sync-every" --sync-every 4 --dense-steps 3
train_err "decays error feedback, but fp16 keeps none" --sync-every 4 --outer sparseloco --compressor fp16
train_err "--seed: -1 is not an integer >= 0" --seed -1
train_err "--synthetic-train: 0 is not an integer >= 1" --synthetic-train 0
train_err "--mlp-hidden: '0' in '16,0' is not a positive integer" --mlp-hidden 16,0
train_err "--model: vgg is not one of lenet5, mlp, resnet20, transformer" --model vgg
train_err "--dataset: imagenet is not one of fashion-mnist, mnist, cifar10, synthetic, fortunes" --dataset imagenet
train_err "--dataset mnist needs --data-dir" --dataset mnist
train_err "--model transformer needs a text --dataset (fortunes), not synthetic" --model transformer
train_err "--dataset fortunes is text: it needs --model transformer" --dataset fortunes
train_err "--context: 0 is not an integer in [1, 4096]" --model transformer --dataset fortunes --context 0
train_err "--data-dir: $WORK/none is not a directory" --model transformer --dataset fortunes --data-dir "$WORK/none"
train_err "--dataset fortunes: $WORK/art:" --model transformer --dataset fortunes --data-dir "$WORK"
train_err "--data-dir: $WORK/none is not a directory" --dataset fashion-mnist --data-dir "$WORK/none"
train_err "--servers: 0 is not an integer in [1, 64]" --topology ps-sync --servers 0
# --servers 1000 started a thousand local processes and timed out.
train_err "--servers: 1000 is not an integer in [1, 64]" --workers 2 --topology ps-sync --servers 1000
train_err "--servers: 65 is not an integer in [1, 64]" --topology ps-async --servers 65
train_err "--max-staleness: -5 is not -1 (never) or an integer >= 0" --topology ps-async --max-staleness -5
train_err "--max-staleness applies to --topology ps-async only" --max-staleness 2
train_err "--async-momentum applies to --topology ps-async only" --topology ps-sync --async-momentum as-given
train_err "--async-momentum half: unknown (known: compensate, as-given)" --topology ps-async --async-momentum half
train_err "--ps-split-elements: -1 is not an integer >= 0" --topology ps-sync --ps-split-elements -1
train_err "--topology ring: unknown" --topology ring
train_err "reducer: unknown kind 'ring'" --reducer ring
train_err "reducer: scatter runs a codec under ef, efm, noef or bare; dgc is a memory of its own" --reducer scatter --compressor dgc
train_err "reducer: scatter runs a codec under ef, efm, noef or bare; dgc is a memory of its own" --reducer scatter --compressor dgc --sync-every 4
train_err "--reducer applies to --topology allreduce only" --topology ps-sync --reducer dense
train_err "unknown codec 'nosuch'" --compressor nosuch
train_err "--resume needs --checkpoint-dir" --resume
# Refused before any worker starts (each worker failed on it, in the library's words).
: > not_a_dir
train_err "--checkpoint-dir: cannot make not_a_dir/sub a directory (Not a directory)" --checkpoint-dir not_a_dir/sub
train_err "--timeout-ms=0 outside [1, 86400000]" --timeout-ms 0
train_err "--timeout-ms='soon' is not an integer" --timeout-ms soon
# With a rendezvous flag this process is one rank of a larger run: one process, one line.
train_err "--master-port=70000 outside [1, 65535]" --master-port 70000

# ---- bench ------------------------------------------------------------------------
run_ok "bench codec --json --torch" "$GRADCOMP" bench codec --size 100000 --repeats 1 --json --torch
rows=$(wc -l < out.txt)
if [ "$rows" -ge 3 ] && ! grep -qv '^{.*}$' out.txt \
  && grep -q '"kind":"reference","spec":"memcpy"' out.txt \
  && grep -q '"kind":"codec","spec":"none"' out.txt \
  && grep -q '"kind":"baseline","spec":"torch::topk' out.txt; then
  pass "bench --json: $rows lines, one JSON object each (memcpy, none, torch::topk)"
else fail "bench --json output"; cat out.txt; fi
if command -v jq > /dev/null; then
  jq -e . out.txt > /dev/null && pass "bench --json parses (jq)" || fail "bench --json is not valid JSON"
fi
run_ok "bench codec table" "$GRADCOMP" bench codec --size 5000 --repeats 1 --spec none --spec 'ef(none)'
grep -q '^memcpy' out.txt && grep -q '^ef(none)' out.txt && ! grep -qi 'torch' out.txt \
  && pass "bench table rows, no LibTorch row without --torch" || { fail "bench table"; cat out.txt; }
run_err "bench with an unknown spec" "unknown codec" "$GRADCOMP" bench codec --size 1000 --spec nosuch --no-torch

# advise: the cost model's table, JSON, SVG and sweep; every bad flag one line, exit 1.
run_ok "advise table" "$GRADCOMP" advise --workers 4 --bandwidth 1gbit --bench-size 20000 \
  --methods "none powersgd:rank=2 topk:ratio=0.01"
grep -q 'powersgd:rank=2' out.txt && grep -qE '^ +[0-9]+ +none ' out.txt \
  && pass "advise table rows" || { fail "advise table"; cat out.txt; }
run_ok "advise --json --svg" "$GRADCOMP" advise --json --svg plot.svg --bench-size 20000 \
  --sizes 1000,784x1536 --compute-ms 10 --methods "none qsgd"
[ "$(grep -c '"spec":' out.txt)" -eq 2 ] && grep -q '<polyline' plot.svg \
  && pass "advise JSON lines and SVG" || { fail "advise --json/--svg"; cat out.txt; }
bench_json() { "$GRADCOMP" bench codec --json --size 20000 --repeats 1 --spec qsgd > speeds.jsonl; }
bench_json && run_ok "advise --codec-speeds" "$GRADCOMP" advise --codec-speeds speeds.jsonl \
  --methods "none qsgd" --sweep
grep -q 'fastest method' out.txt && pass "advise --sweep tables" || { fail "advise --sweep"; cat out.txt; }
run_err "advise bad bandwidth" "not a rate" "$GRADCOMP" advise --bandwidth fast
run_err "advise bad latency" "not a time" "$GRADCOMP" advise --latency 5parsecs
run_err "advise bad topology" "allreduce or ps-sync" "$GRADCOMP" advise --topology ring
run_err "advise bad algorithm" "ring or halving-doubling" "$GRADCOMP" advise --algorithm tree
run_err "advise unknown model" "unknown model" "$GRADCOMP" advise --model vgg
run_err "advise bad sizes" "not a shape" "$GRADCOMP" advise --sizes 12x0 --compute-ms 1
run_err "advise bad method" "out of range" "$GRADCOMP" advise --methods "topk:ratio=3"
run_err "advise zero workers" "workers" "$GRADCOMP" advise --workers 0
# NaN passed CLI11's ranges (rc 0, nan in the table), and negative timings in a speeds file.
run_err "advise --overlap nan" "^gradcomp: --overlap: nan is not a number in \\[0, 1\\]" \
  "$GRADCOMP" advise --overlap nan
run_err "advise --backward-share nan" "^gradcomp: --backward-share: nan is not a number in \\[0, 1\\]" \
  "$GRADCOMP" advise --backward-share nan
run_err "advise --link-efficiency nan" "^gradcomp: --link-efficiency: nan is not a number in \\[0\\.01, 1\\]" \
  "$GRADCOMP" advise --link-efficiency nan
printf '%s\n' '{"kind":"codec","spec":"topk:ratio=0.01","n":1000,"encode_ms":-5,"decode_ms":1}' > neg.jsonl
run_err "advise --codec-speeds with a negative time" \
  "^gradcomp: codec speeds: line 1 \\(topk:ratio=0\\.01\\) has a negative encode_ms or decode_ms" \
  "$GRADCOMP" advise --methods "topk:ratio=0.01" --codec-speeds neg.jsonl --compute-ms 5 --bench-size 20000
run_err "advise speeds without codec rows" "no codec or scheme rows" "$GRADCOMP" advise --codec-speeds /dev/null
run_err "advise device speeds without codec rows" "no codec or scheme rows" "$GRADCOMP" advise --device-speeds /dev/null
run_err "advise bad PCIe rate" "pcie-gbs: must be > 0" "$GRADCOMP" advise --device-speeds \
  "$REPO/docs/measurements/gpu/2026-11-27-h100-run2/device-codecs.jsonl" --pcie-gbs 0
run_err "advise device NaN bucket cost" "device-bucket-ms: must be >= 0" "$GRADCOMP" advise \
  --device-speeds "$REPO/docs/measurements/gpu/2026-11-27-h100-run2/device-codecs.jsonl" \
  --device-bucket-ms nan
# Without --device-speeds they would change nothing (accepted and ignored before).
run_err "advise PCIe rate alone" "pcie-gbs applies with --device-speeds only" "$GRADCOMP" advise --pcie-gbs 50
# The gradients on GPUs: the H100's measured device codecs; top-k runs there, PowerSGD is staged.
run_ok "advise --device-speeds" "$GRADCOMP" advise --model resnet50 --compute-ms 42 --bench-size 20000 \
  --device-speeds "$REPO/docs/measurements/gpu/2026-11-27-h100-run2/device-codecs.jsonl" \
  --methods "topk:ratio=0.01 fp16"
grep -q 'codec on' out.txt && grep -E -q 'topk:ratio=0.01 .* device ' out.txt \
  && grep -E -q 'fp16 .* host ' out.txt \
  && pass "advise: the device path and the staged one" || { fail "advise --device-speeds"; cat out.txt; }
# bench scheme (in gradcomp-torch): a scheme's own CPU time on a model's buckets; advise uses it.
run_ok "bench scheme --json" "$GRADCOMP" bench scheme --model lenet5 --steps 1 --warmup 0 --json \
  --spec sketched-sgd --spec powersgd:rank=2
[ "$(grep -c '"kind":"scheme"' out.txt)" = 2 ] && grep -q '"canonical":"powersgd:rank=2,' out.txt \
  && pass "bench scheme: one row per spec" || { fail "bench scheme rows"; cat out.txt; }
run_err "bench scheme unknown spec" "nosuch" "$GRADCOMP" bench scheme --spec nosuch
run_err "bench scheme no spec" "spec.*required" "$GRADCOMP" bench scheme --model mlp
run_ok "advise times the schemes" "$GRADCOMP" advise --model lenet5 --compute-ms 5 --json --bench-size 20000 \
  --methods "none sketched-sgd powersgd"
[ "$(grep -c '"speed_source":"bench scheme"' out.txt)" = 2 ] \
  && pass "advise: schemes costed by their own timing" || { fail "advise scheme timing"; cat out.txt; }
# The cost model against the committed out-of-sample lab sitting (W = 2, 4, 8; 1 Gbit/s,
# 100 Mbit/s, and 1 Gbit/s + 5 ms): every gradcomp row predicted, within 15% (issue 13's
# bar). The sitting's codec and scheme speeds, so that a busy machine's bench does not move
# the figures (and nothing is measured on the spot).
LAB="$REPO/docs/measurements/netlab-validation"
GRADCOMP="$GRADCOMP" GRADCOMP_CODEC_SPEEDS="$LAB/codec-speeds.jsonl" python3 "$REPO/scripts/netlab_report.py" \
  --validate --exclude dgc:density=0.001 "$LAB"/w2 "$LAB"/w2-dgc "$LAB"/w4-1gbit "$LAB"/w4-100mbit \
  "$LAB"/w4-100mbit-dgc "$LAB"/w8 "$LAB"/w8-dgc "$LAB"/w4-delay5ms "$LAB"/w4-delay5ms-dgc > out.txt 2> err.txt
if [ -s out.txt ] && ! [ -s err.txt ] && python3 - out.txt <<'PY'
import sys
rows = [l.split("|")[1:-1] for l in open(sys.argv[1]) if l.startswith("| ") and "%" in l]
assert len(rows) >= 45, len(rows)
for w, link, delay, method, _, predicted, err, *_ in rows:
    assert abs(float(err.strip().rstrip("%"))) <= 15, (w, link, delay, method, err)
PY
then pass "netlab_report --validate: every row of the lab sitting within 15%"
else fail "netlab_report --validate"; cat out.txt err.txt; fi

if [ "$failures" -ne 0 ]; then echo "$failures failure(s)"; exit 1; fi
echo "all CLI tests passed"
