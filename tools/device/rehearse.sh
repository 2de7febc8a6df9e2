#!/usr/bin/env bash
# Rehearses the GPU machine's side of tools/device/stage.sh here, before any device time is spent: the bundle must
# run with none of this machine's copies of the libraries it carries, and with an LD_LIBRARY_PATH that names torch's
# wheel alone (as gpu_checks.sh gives it: the bundle's binaries find its libraries through their RUNPATH, so nothing
# of it reaches the GPU machine's Python). In a private mount namespace (root, `unshare`) the system copies that
# ld.so's cache names, UCX's modules folder and MPICH's launcher are hidden (bind-mounted over by /dev/null or an
# empty folder, with mount(2) alone: mount(8) itself loads some of them); this script's own tools take copies from
# a folder the binaries never see. Every library the binaries need must then resolve into the bundle, and they pack
# the sample, train SP=2 on 2 CPU ranks through the bundle's mpiexec (plain, then every memory feature), plan,
# export, and run the GPU unit test (exit 77 here: no GPU). Then, with this machine's copies back in place and no
# LD_LIBRARY_PATH, as on the GPU machine, tools/device/gpu_checks.sh with its benchmarks' CPU smoke runs. What it
# cannot rehearse: CUDA itself, and the machine's torch and system libraries (taken here from the venv and
# Debian 12: the same 2.11+cu130 wheel, perhaps not the same libssl).
#
#   bash tools/device/stage.sh && bash tools/device/rehearse.sh      → "rehearse.sh: the bundle runs alone", exit 0
set -euo pipefail
self=$(realpath "$0")
cd "$(dirname "$self")/../.."
[[ -f .device/bundle.tar.xz ]] || { echo "rehearse.sh: stage first: bash tools/device/stage.sh" >&2; exit 2; }
if [[ ${1:-} != --inside ]]; then
  [[ $(id -u) == 0 ]] || { echo "rehearse.sh: needs root (a private mount namespace)" >&2; exit 2; }
  exec unshare --mount --propagation private bash "$self" --inside
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tar -C "$work" -xJf .device/bundle.tar.xz
python=${ULYSSES_DEPS:-/opt/ulysses-deps}/venv/bin/python3
cat > "$work/bind.c" <<'C'
#include <stdio.h>
#include <sys/mount.h>
#include <string.h>
int main(int argc, char** argv) {   /* bind argv[1] over argv[2..]; with -u first: unmount argv[2..] */
  int bad = 0;
  for (int i = 2; i < argc; ++i)
    if ((strcmp(argv[1], "-u") == 0 ? umount(argv[i]) : mount(argv[1], argv[i], NULL, MS_BIND, NULL)) != 0) {
      perror(argv[i]);
      bad = 1;
    }
  return bad;
}
C
cc -static -O1 -o "$work/bind" "$work/bind.c"

source tools/device/carried_libs.sh
wheel=$(wheel_libs "$python")   # torch's and NCCL's folders, as gpu_checks.sh gives them
binaries=("$work"/build/src/*/ulysses-* "$work"/build/tests/gpu/test_gpu "$work"/bin/*.hydra
          "$work"/bin/hydra_pmi_proxy)
bundled() { LD_LIBRARY_PATH=$wheel "$@"; }   # as on the GPU machine: the bundle's binaries, through their RUNPATH
# every library a binary needs beyond the C runtime and torch's wheel resolves into the bundle, and none is missing;
# after the hiding below too
resolved_alone() {
  local missing outside
  missing=$(bundled ldd "${binaries[@]}" 2>&1 | grep -E "not found|error" | sort -u || true)
  outside=$(bundled ldd "${binaries[@]}" 2>/dev/null | carried_of_ldd | while read -r name path; do
    echo "$name $(readlink -f "$path")"; done | grep -v " $work/lib/" || true)
  [[ -z $missing$outside ]] ||
    { echo "rehearse.sh: libraries not in the bundle ($1):"; echo "$missing$outside"; exit 1; }
}
resolved_alone "this machine's copies present"
# this machine's copies of what the bundle carries (UCX's modules' needs included), "NAME PATH" a line
mapfile -t system < <(bundled ldd "${binaries[@]}" "$work"/lib/ucx/*.so* 2>/dev/null | carried_of_ldd |
  while read -r name _; do ldconfig -p | awk -v n="$name" '$1 == n && /x86-64/ {print $1, $NF}'; done |
  while read -r name path; do echo "$name $(readlink -f "$path")"; done | sort -u |
  grep -v " /usr/lib/x86_64-linux-gnu/ucx/")
# while they are hidden, this script's own tools (grep needs libpcre2…) take copies from a folder of their own,
# which the bundle's binaries never see (`bundled` runs them with the wheel's folders alone)
mkdir "$work/empty" "$work/system-libs"
hidden=(/usr/bin/mpiexec.hydra /usr/bin/hydra_pmi_proxy)
for line in "${system[@]}"; do
  cp "${line#* }" "$work/system-libs/${line%% *}"
  hidden+=("${line#* }")
done
export LD_LIBRARY_PATH=$work/system-libs
"$work/bind" "$work/empty" /usr/lib/x86_64-linux-gnu/ucx
mapfile -t hidden < <(printf '%s\n' "${hidden[@]}" | sort -u)
"$work/bind" /dev/null "${hidden[@]}"
echo "rehearse.sh: hid ${#hidden[@]} files here (the libraries the bundle must carry, MPICH's launcher), UCX's modules"
resolved_alone "this machine's copies hidden"

export UCX_MODULE_DIR=$work/lib/ucx PATH=$work/bin:$PATH
B=$work/build C=datasets/sample/tiny-llama/config.json d=$work/run
mkdir "$d"
trap 'tail -n 20 "$d.log"; echo "rehearse.sh: failed (the log above)"' ERR
bundled "$B/src/pack/ulysses-pack" pack datasets/sample/licenses.jsonl.gz -o "$d/packed" --seq-len 1024 --sp 2 \
  --pad-id 258 --valid-fraction 0.05 --model-config "$C" > "$d.log" 2>&1
train() { bundled timeout 300 mpiexec -n 2 "$B/src/train/ulysses-train" --data "$d/packed" --model-config "$C" --sp 2 \
            --steps 4 --micro-batch 1 --threads 1 --device cpu "$@" >> "$d.log" 2>&1; }
train --output "$d/plain"
train --output "$d/memory" --offload-optimizer --offload-checkpoints -1 --tiled-mlp --tiled-logits --prefetch on
bundled "$B/src/plan/ulysses-plan" --model "$C" --nodes 1 --gpus-per-node 4 --sp 4 --device cuda --precision bf16 \
  >> "$d.log"
bundled "$B/src/ckpt/ulysses-ckpt" export-hf "$d/memory" -o "$d/hf" >> "$d.log" 2>&1
rc=0
bundled "$B/tests/gpu/test_gpu" >> "$d.log" 2>&1 || rc=$?
[[ $rc == 0 || $rc == 77 ]] || false
[[ $(grep -c "done: 4 steps" "$d.log") == 2 ]] || false
echo "rehearse.sh: the bundle runs alone (pack, train ×2 through its mpiexec, plan, export, test_gpu exit $rc)"
# gpu_checks.sh itself, its benchmarks as their CPU smoke runs (its GPU tests skip here), as on the GPU machine:
# this machine's libraries back in place for its tools and Python, none named by LD_LIBRARY_PATH (the binaries'
# RUNPATH names the bundle's, ahead of them)
"$work/bind" -u "${hidden[@]}" /usr/lib/x86_64-linux-gnu/ucx
unset LD_LIBRARY_PATH
PATH=$(dirname "$python"):$PATH OUT=$work/gpu-checks GPU_CHECKS_SMOKE=1 bash tools/device/gpu_checks.sh > "$d.log" 2>&1
grep '^== .*: exit' "$d.log"
echo "rehearse.sh: gpu_checks.sh runs (GPU_CHECKS_SMOKE: $(grep -c '^== .*: exit' "$d.log") steps, logs in \$OUT)"
