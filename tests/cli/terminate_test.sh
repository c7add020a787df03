#!/usr/bin/env bash
# The CLI's terminate handler (tools/gradcomp/terminate_handler.h): an exception that
# escapes a thread ends the process with exit status 1 and exactly one stderr line,
# "gradcomp: fatal: <first line of what()> (...)", not "terminate called" and SIGABRT.
#   usage: terminate_test.sh /path/to/gradcomp_terminate_probe
set -uo pipefail
PROBE=${1:?usage: terminate_test.sh /path/to/gradcomp_terminate_probe}
err=$(mktemp)
trap 'rm -f "$err"' EXIT
"$PROBE" 2> "$err"
status=$?
want='^gradcomp: fatal: \[enforce fail at pair\.cc:446\] op\.preamble\.length <= op\.nbytes\. 780 vs 524 \(thrown on a background thread'
if [ $status -eq 1 ] && [ "$(wc -l < "$err")" -eq 1 ] && grep -qE "$want" "$err" &&
   ! grep -q "terminate called" "$err"; then
  echo "ok   escaped exception: exit 1, one line: $(cat "$err")"
  exit 0
fi
echo "FAIL escaped exception: exit $status, stderr:"
cat "$err"
exit 1
