#!/usr/bin/env bash
# The whole test suite from a fresh machine: bootstrap (idempotent), configure, build, test.
#   bash tools/test.sh                 # everything
#   bash tools/test.sh --suite pack    # extra arguments go to `meson test`
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash tools/bootstrap.sh
BUILD=${BUILD:-build}
if [[ -f $BUILD/build.ninja ]]; then meson setup --reconfigure "$BUILD" >/dev/null; else meson setup "$BUILD"; fi
ninja -C "$BUILD"
meson test -C "$BUILD" --print-errorlogs "$@"
