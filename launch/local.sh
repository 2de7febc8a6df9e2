#!/usr/bin/env bash
# launch/local.sh — train on one workstation: N ranks with mpiexec (one per GPU, or CPU ranks), each
# through launch/bind.sh. Everything after the rank count goes to ulysses-train; the command is echoed.
#
#   launch/local.sh 4 --data out/packed --model-config datasets/sample/tiny-llama/config.json \
#       --sp 4 --steps 40 --lr 3e-3 --output out/run
#
# Environment: ULYSSES_BIN (build directory or install bin/, default: build next to this file),
# MPIEXEC (default mpiexec), NCCL_DEBUG (default WARN). Exit status: the trainer's (0 done, 2 bad input, 3 stopped
# by SIGTERM, SIGUSR1 or SIGINT — a Ctrl-C — to this script or to the ranks, after saving: resume it; a second Ctrl-C
# ends the ranks unsaved: 130).
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
# In a session of its own: a terminal's Ctrl-C reaches this script alone, which sends it on to the ranks as it does
# SIGTERM (MPICH's mpiexec, given a Ctrl-C itself, forwards it too, but its exit status may then read 0).
setsid "${cmd[@]}" &
launcher=$!

# SIGTERM or SIGUSR1 to this script goes to the ranks themselves, which save and exit 3 together; this script then
# exits with mpiexec's status, 3. (Sent to mpiexec, MPICH's launcher forwards it, but whether its own exit status
# then reads the ranks' 3 or 0 depends on timing: a wrapper could not tell "stopped, resume me" from "finished".)
# shellcheck disable=SC2317   # called from the traps below
to_ranks() {
  local proxy sent=0
  for proxy in $(pgrep -P "$launcher" || true); do pkill "-$1" -P "$proxy" && sent=1; done
  ((sent)) || kill "-$1" "$launcher" 2>/dev/null || true   # no rank started yet: mpiexec ends what it starts
}
trap 'to_ranks TERM' TERM
trap 'to_ranks USR1' USR1
# A Ctrl-C (the terminal's, or SIGINT to this script) goes to the ranks: they save and stop together, exit 3. Twice,
# a second or more apart: the ranks end at once, unsaved, and this script exits 130.
interrupts=0
# shellcheck disable=SC2317   # called from the trap below
on_int() {
  interrupts=$((interrupts + 1))
  to_ranks INT
}
trap on_int INT
while kill -0 "$launcher" 2>/dev/null; do wait "$launcher" || true; done   # a trapped signal interrupts wait
rc=0
wait "$launcher" || rc=$?
((interrupts > 1 && rc != 3)) && rc=130   # ended unsaved, whatever mpiexec's own status then reads: not finished
exit "$rc"
