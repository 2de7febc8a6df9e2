#!/usr/bin/env bash
# The whole test suite from a fresh machine: bootstrap (idempotent), configure, build, test.
#   bash tools/test.sh                 # everything
#   bash tools/test.sh --suite pack    # extra arguments go to `meson test`
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export BUILD=${BUILD:-build}
bash tools/build.sh
meson test -C "$BUILD" --print-errorlogs "$@"
