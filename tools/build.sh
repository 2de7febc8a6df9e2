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
if [[ -f $BUILD/build.ninja ]]; then meson setup --reconfigure "$BUILD" -Dcuda=$cuda >/dev/null
else meson setup "$BUILD" -Dcuda=$cuda; fi
ninja -C "$BUILD"
