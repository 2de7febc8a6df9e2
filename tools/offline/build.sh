#!/usr/bin/env bash
# Builds the toolkit on an air-gapped node from a folder made by tools/offline/stage.sh (on a machine with
# internet and the node's distribution release), with no network access.
#
#   tools/offline/build.sh DIR [meson options...] [-- ninja targets...]
#
# The node needs: a C/C++ compiler (build-essential), meson >= 1.0.1, ninja, and for ulysses-train a
# Python whose torch package (the CUDA PyTorch) is the LibTorch to link. Environment:
#   BUILD=dir          build directory (default build-offline, relative to the repository root)
#   TORCH_PYTHON=py    that Python (default: python3 on PATH); -Dtorch_python=/-Dlibtorch_dir= override it
#   ULYSSES_STAGE_ONLY=1       pkg-config sees only the stage's .pc files
#   ULYSSES_OFFLINE_ANY_RELEASE=1  build even though the node's release differs from the stage's
# The built programs load the staged libraries: `source DIR/env.sh` before running them (or sbatch).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
MESON_MIN=1.0.1

log() { echo "[offline] $*"; }
die() { echo "build.sh: error: $*" >&2; exit 2; }

check_stage() {
  [[ -f $STAGE/stage.info && -f $STAGE/env.sh && -d $STAGE/prefix ]] ||
    die "$STAGE is not a stage: make one with tools/offline/stage.sh DIR on a machine with internet"
  local STAGE_RELEASE='' here
  # shellcheck disable=SC1091
  STAGE_RELEASE=$(. "$STAGE/stage.info" && echo "$STAGE_RELEASE")
  # shellcheck disable=SC1091
  here=$(. /etc/os-release 2>/dev/null && echo "${ID:-unknown} ${VERSION_ID:-} ${VERSION_CODENAME:-}")
  if [[ $here != "$STAGE_RELEASE" && ${ULYSSES_OFFLINE_ANY_RELEASE:-0} != 1 ]]; then
    die "the stage is for '$STAGE_RELEASE' but this node runs '$here': stage on a machine of the node's release" \
        "(or set ULYSSES_OFFLINE_ANY_RELEASE=1)"
  fi
}

check_tools() {
  command -v meson >/dev/null || die "meson not found on PATH: the node needs meson >= $MESON_MIN and ninja"
  NINJA=$(command -v ninja || command -v ninja-build || command -v samu) ||
    die "ninja not found on PATH: the node needs ninja and meson >= $MESON_MIN"
  local v; v=$(meson --version)
  [[ $(printf '%s\n' "$MESON_MIN" "$v" | sort -V | head -1) == "$MESON_MIN" ]] ||
    die "meson $v is older than $MESON_MIN"
  command -v "${CXX:-c++}" >/dev/null || die "no C++ compiler (${CXX:-c++}) on PATH: the node needs build-essential"
}

# -Dtorch_python=<the node's python3> unless the caller chose a LibTorch; says whether there is one.
torch_args() {
  TORCH=()
  local a
  for a in "${MESON_ARGS[@]}"; do
    [[ $a == -Dtorch_python=* || $a == -Dlibtorch_dir=* || $a == -Dtorch=disabled ]] && return 0
  done
  local py=${TORCH_PYTHON:-$(command -v python3 || true)}
  if [[ -n $py ]] && "$py" -c 'import torch' 2>/dev/null; then
    log "LibTorch: the torch package of $py"
  else
    log "no torch in ${py:-python3}: ulysses-train will not be built (set TORCH_PYTHON or -Dlibtorch_dir=)"
  fi
  TORCH=("-Dtorch_python=${py:-python3}")
}

main() {
  (($# >= 1)) || die "usage: tools/offline/build.sh DIR [meson options...] [-- ninja targets...]"
  [[ -d $1 ]] || die "$1 is not a folder: give the stage folder made by tools/offline/stage.sh"
  STAGE=$(cd -P "$1" && pwd); shift
  MESON_ARGS=(); TARGETS=()
  while (($#)); do [[ $1 == -- ]] && { shift; TARGETS=("$@"); break; }; MESON_ARGS+=("$1"); shift; done
  check_stage
  check_tools
  # shellcheck disable=SC1091
  . "$STAGE/env.sh" || exit 2     # it said why, in one line
  torch_args
  cd "$ROOT"
  local build=${BUILD:-build-offline}
  # nodownload: never fetch a Meson wrap; everything comes from the stage and the node.
  local setup=(meson setup --wrap-mode=nodownload "${TORCH[@]}" "${MESON_ARGS[@]}")
  if [[ -f $build/build.ninja ]]; then "${setup[@]}" --reconfigure "$build"; else "${setup[@]}" "$build"; fi
  "$NINJA" -C "$build" "${TARGETS[@]}"
  log "built in $build; to run what it built: source $STAGE/env.sh"
}

main "$@"
