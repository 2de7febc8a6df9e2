#!/usr/bin/env bash
# Bootstrap (idempotent), configure and build into $BUILD (default build/). Used by demo.sh and test.sh.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash tools/bootstrap.sh
BUILD=${BUILD:-build}
# Where the CUDA toolkit is installed the CUDA build is required, not optional: a CUDA path that stops
# compiling then fails the build (and CI) instead of quietly dropping to the CPU-only build.
cuda=auto
if command -v nvcc >/dev/null || [[ -x /usr/local/cuda/bin/nvcc ]]; then cuda=enabled; fi
# LibTorch and the whole test suite are required here (bootstrap installed them): a missing piece fails the
# setup instead of silently dropping the trainer's tests from CI.
opts=(-Dcuda=$cuda -Dtorch=enabled -Dtests=enabled -Dparquet=enabled)
if [[ -f $BUILD/build.ninja ]]; then meson setup --reconfigure "$BUILD" "${opts[@]}" >/dev/null
else meson setup "$BUILD" "${opts[@]}"; fi
ninja -C "$BUILD"
