#!/usr/bin/env bash
# launch/local.sh — train on one workstation: N ranks with mpiexec (one per GPU, or CPU ranks), each
# through launch/bind.sh. Everything after the rank count goes to ulysses-train; the command is echoed.
#
#   launch/local.sh 4 --data out/packed --model-config datasets/sample/tiny-llama/config.json \
#       --sp 4 --steps 40 --lr 3e-3 --output out/run
#
# Environment: ULYSSES_BIN (build directory or install bin/, default: build next to this file),
# MPIEXEC (default mpiexec), NCCL_DEBUG (default WARN).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if (($# < 1)) || ! [[ $1 =~ ^[0-9]+$ ]]; then
  echo "usage: $0 NUM_RANKS [ulysses-train flags…]" >&2
  exit 2
fi
ranks=$1; shift
: "${ULYSSES_BIN:=$here/../build}"
train=$ULYSSES_BIN/src/train/ulysses-train
[[ -x $train ]] || train=$ULYSSES_BIN/ulysses-train
[[ -x $train ]] || { echo "error: no ulysses-train under ULYSSES_BIN=$ULYSSES_BIN — HINT: meson setup build && ninja -C build" >&2; exit 2; }
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
cmd=("${MPIEXEC:-mpiexec}" -n "$ranks" "$here/bind.sh" "$train" "$@")
echo "+ ${cmd[*]}"
exec "${cmd[@]}"
