#!/bin/bash
# expect_exit.sh EXIT MAX_SECONDS TEXT -- COMMAND...
# Runs COMMAND under `timeout 60` and passes when it exits with EXIT ("nonzero" = any code but 0 and
# timeout's 124), within MAX_SECONDS, with TEXT somewhere in its stderr, and, when EXPECT_STDERR_LINES is set, with
# exactly that many lines on stderr (one error line per job: no line per rank, no MPI_Abort text). Prints what it
# runs and sees.
set -u
expected=$1 max_seconds=$2 text=$3
shift 4
echo "running: timeout 60 $*"
start=$(date +%s)
stderr=$(timeout 60 "$@" 2>&1 >/dev/null)
code=$?
elapsed=$(( $(date +%s) - start ))
echo "exit $code after ${elapsed}s; stderr:"
echo "$stderr"
fail() { echo "FAIL: $*"; exit 1; }
if [ "$expected" = nonzero ]; then
  [ "$code" -ne 0 ] && [ "$code" -ne 124 ] || fail "expected a non-zero exit (not a timeout), got $code"
else
  [ "$code" -eq "$expected" ] || fail "expected exit $expected, got $code"
fi
[ "$elapsed" -le "$max_seconds" ] || fail "took ${elapsed}s, more than ${max_seconds}s"
grep -qF -- "$text" <<<"$stderr" || fail "stderr lacks: $text"
if [ -n "${EXPECT_STDERR_LINES:-}" ]; then
  lines=$(grep -c . <<<"$stderr")
  [ "$lines" -eq "$EXPECT_STDERR_LINES" ] || fail "stderr has $lines lines, not $EXPECT_STDERR_LINES"
fi
echo "PASS"
