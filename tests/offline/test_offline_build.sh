#!/usr/bin/env bash
# The air-gapped build (tools/offline/) end to end: stage the Debian packages from the mirror (a second
# run must find nothing to do), move the stage elsewhere (relocation), configure and build the torch-free
# ulysses-pack and an MPI program with pkg-config restricted to the stage, then run them and check that
# their headers and libraries came from the stage. An unreachable mirror is a failure, never a skip.
# usage: test_offline_build.sh SOURCE_ROOT WORK_DIR   (WORK_DIR is emptied; kept only when a check fails)
set -euo pipefail
src=$1
work=$2
staged=$work/staged      # where stage.sh writes
stage=$work/moved        # where the stage is used: another path, the original removed
build=$work/build        # fixed paths, so ccache hits from one run to the next

fail() { echo "FAIL: $*" >&2; echo "(left for inspection: $work)" >&2; exit 1; }
step() { echo "== $* ($((SECONDS - t0)) s)"; }
t0=$SECONDS

run_stage() {
  rm -rf "$work" && mkdir -p "$work"
  step "staging into $staged"
  bash "$src/tools/offline/stage.sh" "$staged" ||
    fail "tools/offline/stage.sh failed: the Debian mirror must be reachable from this machine"
  step "staging again (nothing to do)"
  local again; again=$(bash "$src/tools/offline/stage.sh" "$staged") || fail "the second stage.sh run failed"
  echo "$again"
  grep -q 'packages already downloaded' <<< "$again" || fail "the second run downloaded again"
  grep -q 'prefix up to date' <<< "$again" || fail "the second run unpacked again"
}

relocate() {
  step "moving the stage to $stage"
  cp -a "$staged" "$stage" && rm -rf "$staged"
}

# Sourcing env.sh at the new place rewrote every pkg-config file.
check_relocated() {
  if grep -rlF "$staged" "$stage/prefix" --include='*.pc'; then
    fail "the pkg-config files above still name the stage's first location"
  fi
}

# build.sh on a folder that is not a stage: one line on stderr, exit 2.
check_refusal() {
  local err rc=0
  mkdir -p "$work/not-a-stage"
  err=$(bash "$src/tools/offline/build.sh" "$work/not-a-stage" 2>&1 >/dev/null) || rc=$?
  [[ $rc == 2 && $err == *"is not a stage"* && $(wc -l <<< "$err") == 1 ]] ||
    fail "build.sh on a non-stage folder: exit $rc, stderr: $err"
}

# Without a network where this machine lets us make a network namespace (root, or user namespaces).
build() {
  local offline=() note="network not cut: no unshare here"
  if unshare -n true 2>/dev/null; then offline=(unshare -n); note="network cut (unshare -n)"
  elif unshare -rn true 2>/dev/null; then offline=(unshare -rn); note="network cut (unshare -rn)"
  fi
  step "configuring and building with pkg-config restricted to the stage, $note"
  ULYSSES_STAGE_ONLY=1 BUILD=$build "${offline[@]}" bash "$src/tools/offline/build.sh" "$stage" \
    -Dtorch=disabled -- src/pack/ulysses-pack tests/mpi/guard_probe || fail "tools/offline/build.sh failed"
}

# Every pkg-config module the project asks for resolves to a .pc file inside the stage.
check_pkg_config() {
  local m pc
  for m in fmt nlohmann_json CLI11 hdf5-serial mpich zlib libzstd gtest gmock; do
    pc=$(pkg-config --path "$m") || fail "pkg-config does not find $m in the stage"
    [[ $pc == "$stage"/* ]] || fail "pkg-config module $m comes from $pc, not the stage"
  done
  echo "pkg-config: every module from $stage"
}

# The compiler read each dependency's headers from the stage (ninja's record of every included file).
check_headers() {
  local deps h hits
  deps=$(ninja -C "$build" -t deps)
  for h in hdf5/serial/hdf5.h fmt/core.h CLI/CLI.hpp nlohmann/json.hpp xxhash.h mpich/mpi.h; do
    hits=$(grep -F "/$h" <<< "$deps" | sort -u) || fail "no object includes $h"
    if grep -vF "$stage/" <<< "$hits"; then fail "$h included from outside the stage (above)"; fi
  done
  echo "headers: hdf5, fmt, CLI11, nlohmann-json, xxhash, mpi.h from $stage"
}

# The loader resolves HDF5 and MPICH to the stage, and nothing is missing.
check_libraries() {
  local pack=$build/src/pack/ulysses-pack probe=$build/tests/mpi/guard_probe out
  out=$(ldd "$pack" "$probe") || fail "ldd failed"
  grep -E ':$|hdf5|mpich|not found' <<< "$out" || true
  if grep -q 'not found' <<< "$out"; then fail "a library is not found"; fi
  grep -q "libhdf5_serial.so.* => $stage/" <<< "$(ldd "$pack")" || fail "ulysses-pack does not load HDF5 from the stage"
  grep -q "libmpich.so.* => $stage/" <<< "$(ldd "$probe")" || fail "guard_probe does not load MPICH from the stage"
}

run_programs() {
  local pack=$build/src/pack/ulysses-pack sample=$src/datasets/sample
  step "packing the sample corpus with the offline build"
  "$pack" pack "$sample/licenses.jsonl.gz" -o "$work/packed" --seq-len 1024 --sp 4 --pad-id 258 \
    --valid-fraction 0.05 --model-config "$sample/tiny-llama/config.json" || fail "ulysses-pack pack failed"
  "$pack" verify "$work/packed" || fail "ulysses-pack verify failed"
  step "2 MPI ranks through the stage's mpiexec"
  [[ $(command -v mpiexec) == "$stage"/* ]] || fail "mpiexec is $(command -v mpiexec), not the stage's"
  SLURM_NTASKS=2 mpiexec -n 2 "$build/tests/mpi/guard_probe" world || fail "mpiexec -n 2 guard_probe failed"
}

run_stage
relocate
check_refusal
build
# The same environment build.sh used, to look at what it built.
export ULYSSES_STAGE_ONLY=1
# shellcheck disable=SC1091
. "$stage/env.sh"
check_relocated
check_pkg_config
check_headers
check_libraries
run_programs
step "all checks passed"
rm -rf "$work"
