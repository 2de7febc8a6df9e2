#!/usr/bin/env bash
# Runs one fuzz target for SECONDS from seeds made from the test fixtures (make_seeds.py), in its own work folder.
# Fails (exit 1) on a crash, a leak, a timeout of one input (-timeout) or an out-of-memory; the input that did
# it is left as WORK/crash-*, leak-*, timeout-* or oom-*: reproduce with `TARGET_BINARY WORK/crash-…`.
# usage: run_target.sh TARGET_BINARY TARGET_NAME SECONDS WORK_ROOT PYTHON ULYSSES_PACK
set -euo pipefail
binary=$1 name=$2 seconds=$3 root=$4 python=$5 pack=$6
here=$(cd "$(dirname "$0")" && pwd)
work=$root/$name
rm -rf "$work/corpus" "$work/seeds" "$work/tmp" && mkdir -p "$work/corpus" "$work/seeds" "$work/tmp"   # crash-* stay
"$python" "$here/make_seeds.py" "$name" "$work/seeds" "$pack"
cd "$work"
# libFuzzer's own exit code for a crash is 77, which meson reads as "skipped": 1 instead.
FUZZ_TMPDIR=$work/tmp LSAN_OPTIONS=suppressions=$here/lsan.supp:print_suppressions=0 \
  exec "$binary" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 -error_exitcode=1 \
  -timeout_exitcode=1 -artifact_prefix="$work/" -print_final_stats=1 corpus seeds
