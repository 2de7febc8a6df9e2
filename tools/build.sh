#!/usr/bin/env bash
# Bootstrap (idempotent), configure and build into $BUILD (default build/). Used by demo.sh and test.sh.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash tools/bootstrap.sh
BUILD=${BUILD:-build}
if [[ -f $BUILD/build.ninja ]]; then meson setup --reconfigure "$BUILD" >/dev/null; else meson setup "$BUILD"; fi
ninja -C "$BUILD"
