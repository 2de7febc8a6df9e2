#!/usr/bin/env bash
# The whole test suite from a fresh machine: bootstrap (idempotent), configure, build, test. Then, for the whole
# suite only, the sanitizer build: the torch-free suites again under ASan + UBSan (clang, $ASAN_BUILD, default
# build-asan/), and every fuzz target of tests/fuzz/ for 20 s (tests/README.md: fuzzing longer, reproducing).
# Every run ends with its ten slowest tests (tools/test_times.py, from meson's test log) and its wall time.
#   bash tools/test.sh                 # everything (what CI runs; ~19 min on 2 cores, 25 the budget)
#   bash tools/test.sh --quick         # while working: the quick suite of the main build (< 3 min once built)
#   bash tools/test.sh --suite pack    # extra arguments go to `meson test` (the main build only)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export BUILD=${BUILD:-build}
start=$SECONDS
# Meson's own summary (Ok/Fail/Skipped) ends each run; the slowest tests and the time follow it, failed or not.
run_tests() {
  local dir=$1 rc=0
  shift
  meson test -C "$dir" --print-errorlogs "$@" || rc=$?
  python3 tools/test_times.py "$dir" || true
  return $rc
}
finish() { echo "tools/test.sh: $(( SECONDS - start )) s"; }
trap finish EXIT
bash tools/build.sh
if [[ ${1:-} == --quick ]]; then
  shift
  run_tests "$BUILD" --suite quick "$@"
  exit 0
fi
run_tests "$BUILD" "$@"
(($# == 0)) || exit 0
ASAN_BUILD=${ASAN_BUILD:-build-asan}
opts=(-Dtorch=disabled -Dcuda=disabled -Dtests=enabled -Dparquet=enabled -Db_sanitize=address,undefined -Db_lundef=false
      -Dfuzz_seconds=20)
if [[ -f $ASAN_BUILD/build.ninja ]]; then meson setup --reconfigure "$ASAN_BUILD" "${opts[@]}" >/dev/null
else CC="ccache clang" CXX="ccache clang++" meson setup "$ASAN_BUILD" "${opts[@]}" >/dev/null; fi
ninja -C "$ASAN_BUILD"
# A build dir first made with gcc has no fuzz targets (libFuzzer is clang's): say so rather than fuzz nothing.
targets=$(meson test -C "$ASAN_BUILD" --list --suite fuzz 2>/dev/null | grep -c fuzz_ || true)
((targets > 0)) || { echo "$ASAN_BUILD has no fuzz targets: remove it (made with another compiler?)" >&2; exit 1; }
run_tests "$ASAN_BUILD" --suite unit --suite io --suite pack --suite ckpt --suite mpi --suite fuzz
