#!/usr/bin/env bash
# The GPU checks of issues 13, 14 and 19 in one prepared command for the `device` tool's GPU machine, inside its
# 10-minute limit: the staged build (tools/device/stage.sh) against that machine's torch wheel, then
#   1. tests/gpu/test_gpu: GPU step = CPU step, packed attention, NCCL = MPI, prefetch on side streams = off (the
#      head groups issued ahead too)
#   2. tests/gpu/test_gpu_cli.py: SP=4 sharing the GPU = SP=1, NCCL = MPI through the CLI, bf16 ring and head
#      groups against fp32, bf16 logs
#   3. tools/bench/plan_bench.py --gpu: a profile calibrated on this GPU (kept as $OUT/profile.json), predicted /
#      measured peak GPU memory at three lengths, the longest length against the plan's, prefetch off/on step time
#   5. tools/bench/memory_bench.py --gpu: the longest sequence and bytes per token of transformers, ALST's stack
#      (the bundle's wheels) and ours, doubling S until each no longer fits; ours with step 3's calibrated profile
#      (MEMORY_PROFILE, else $OUT or .device/profile.json), in --precision bf16 (the model in bf16) and, all layer
#      inputs offloaded, against amp-bf16 (autocast): "RATIO longest sequence C+/C+amp", and with attention in 4 head
#      groups: "RATIO longest sequence C+G4/C+", "RATIO step time C+G4/C+"; with --attention-head-groups auto and
#      --offload-params (our longest): "RATIO longest sequence C+auto/C+", "C+auto/B"
#   4. tools/bench/gpu_bench.py: ours against transformers, one length, no search
# in that order (GPU_CHECKS: the steps to run, default "1 2 3 5 4"). GPU_CHECKS_SECONDS (default 570) is the time
# for all of them: each step gets at most its own limit (90, 180, 260, 300, 100 s) and at most what is left; one
# with under 40 s left (step 5: 100 s) is skipped, saying so. The benchmarks get their --time-limit from the same
# budget, so they report before they are stopped. Each step's log lands in $OUT; the checks' temporary files stay in the
# bundle's folder, removed at the end. Exit 0 when the GPU tests (1, 2) and the memory harness (5) ran and passed,
# and with GPU_CHECKS_SMOKE 3 and 4 too; a skipped step is no failure. Read each step's "== NAME: exit N" line.
#
#   run(command="bash tools/device/gpu_checks.sh", carry=[".device"], timeout_s=600)
#   GPU_CHECKS="4" GPU_CHECKS_SECONDS=200 bash tools/device/gpu_checks.sh   (what is left, in a second call)
#   GPU_CHECKS_SMOKE=1 bash tools/device/gpu_checks.sh    (no GPU: the benchmarks' --smoke runs on the CPU, and the
#                                                          GPU tests may skip; tools/device/rehearse.sh runs this)
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
OUT=${OUT:-out/gpu-checks}
mkdir -p "$OUT"
[[ -f .device/bundle.tar.xz ]] || { echo "gpu_checks.sh: stage first: bash tools/device/stage.sh" >&2; exit 2; }
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
tar -C "$root" -xJf .device/bundle.tar.xz || exit 2
B=$root/build
# the machine's Python with torch: python3 on PATH, else the image's venv (KINDS.md: /opt/torch/.venv)
for python in python3 /opt/torch/.venv/bin/python3; do "$python" -c 'import torch' 2>/dev/null && break; done
source tools/device/carried_libs.sh
wheel=$(wheel_libs "$python") || exit 2
PATH=$(dirname "$(command -v "$python")"):$PATH   # the steps' python3 is that one
# torch's wheel and NCCL alone: the bundle's binaries find its libraries through their RUNPATH (stage.sh), and
# nothing of the bundle reaches this machine's Python and what it loads
export LD_LIBRARY_PATH=$wheel${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export UCX_MODULE_DIR=$root/lib/ucx PATH=$root/bin:$PATH PYTHONUNBUFFERED=1
echo "staged from commit $(cat "$root/commit"), checked out at $(git rev-parse HEAD 2>/dev/null || echo '?')"
smoke=${GPU_CHECKS_SMOKE:-}
[[ -n $smoke ]] || nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
missing=$(ldd "$B"/src/*/ulysses-* "$B"/tests/gpu/test_gpu "$root"/bin/*.hydra "$root"/bin/hydra_pmi_proxy |
  grep "not found" | sort -u)
[[ -z $missing ]] || { echo "gpu_checks.sh: libraries not found:"; echo "$missing"; exit 2; }
steps=${GPU_CHECKS:-1 2 3 5 4}
deadline=${GPU_CHECKS_SECONDS:-570}   # in seconds since this script began (bash's SECONDS), unpacking included
export TMPDIR=$root/tmp   # the calibration's and the benchmarks' files: removed with the bundle's folder
mkdir -p "$TMPDIR"
status=0
limit=0
budget() {   # CAP: sets $limit to the seconds a step may take (its cap, or what is left), 0 when too few are left
  limit=$(( deadline - SECONDS - 5 ))
  (( limit > $1 )) && limit=$1
  (( limit >= 40 )) || limit=0
}
step() {   # NAME COMMAND...: runs it within $limit seconds, its output in $OUT/NAME.log
  local name=$1; shift
  if (( limit == 0 )); then
    echo "== $name: skipped, $(( deadline - SECONDS )) s left of GPU_CHECKS_SECONDS"
    return 0
  fi
  echo "== $name (at most ${limit} s): $*"
  local t0=$SECONDS
  timeout --kill-after=5 "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  tail -n 25 "$OUT/$name.log"
  echo "== $name: exit $rc after $((SECONDS - t0)) s"
  [[ $rc == 77 && -n $smoke ]] && return 0   # a GPU test skipping where there is no GPU
  return $rc
}
bench_args=(--gpu-lengths "16384,32768,65536") gpu_bench_args=(--lengths 8192)
[[ -z $smoke ]] || bench_args=(--smoke) gpu_bench_args=(--smoke)
memory_bench_gpu() {   # step 5: ALST's wheels installed for side B, the profile of step 3 for ours
  local profile=${MEMORY_PROFILE:-} args=(--smoke)
  [[ -n $profile ]] || for f in "$OUT/profile.json" .device/profile.json; do [[ -f $f ]] && profile=$f && break; done
  if [[ -z $smoke ]]; then
    (( limit >= 100 )) || limit=0   # less is not a search of four sides
    (( limit == 0 )) || [[ ! -d $root/wheels ]] ||
      { python3 -m pip install -q --no-index --no-deps --no-compile --target "$root/site" "$root"/wheels/*.whl &&
        export PYTHONPATH=$root/site${PYTHONPATH:+:$PYTHONPATH} DS_ACCELERATOR=cuda; budget 300; }
    [[ -n $profile ]] || echo "== memory_bench_gpu: no calibrated profile (step 3's, copied to .device/profile.json):" \
      "ours plans with the built-in one, whose refusals may stop it short of what fits"
    args=(--time-limit $(( limit - 40 )) ${profile:+--memory-profile "$profile"})
  fi
  step memory_bench_gpu python3 tools/bench/memory_bench.py --gpu --build "$B" "${args[@]}"
}
for s in $steps; do
  case $s in
    1) budget 90; step gpu_unit "$B"/tests/gpu/test_gpu || status=1 ;;
    2) budget 180; step gpu_cli python3 tests/gpu/test_gpu_cli.py "$B"/src/train/ulysses-train \
         "$B"/src/pack/ulysses-pack "$root/bin/mpiexec" || status=1 ;;
    3) budget 260; step plan_bench_gpu python3 tools/bench/plan_bench.py --gpu --build "$B" "${bench_args[@]}" \
         --time-limit $(( limit - 20 )) --threads 8 --save-profile "$OUT/profile.json" || [[ -z $smoke ]] || status=1 ;;
    5) budget 300; memory_bench_gpu || status=1 ;;   # it exits 0 when sides run out of memory: else a failure
    4) budget 100; step gpu_bench python3 tools/bench/gpu_bench.py --train "$B"/src/train/ulysses-train \
         --pack "$B"/src/pack/ulysses-pack "${gpu_bench_args[@]}" --no-search --time-limit $(( limit - 15 )) ||
         [[ -z $smoke ]] || status=1 ;;
  esac
done
exit $status
