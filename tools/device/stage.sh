#!/usr/bin/env bash
# Stages this machine's build for the GPU machine of the `device` tool (tests/README.md, GPU checks): the
# binaries, in a Meson build's layout, and every shared library they need that is neither LibTorch's (the GPU
# machine has the same torch 2.11+cu130 wheel) nor the C runtime's — pyarrow's libarrow/libparquet included, as
# the machine's pyarrow may be another version — with MPICH's launcher and UCX's transports.
# The GPU machine has no MPICH, HDF5 or other -dev packages and cannot fetch any, so building there is not an
# option; building here and carrying the result is.
#
#   bash tools/device/stage.sh [BUILD]   (default: build-dev, else build) → .device/bundle.tar.xz (git-ignored,
#                                        ~37 MiB: MPICH and Arrow are 100 MiB unpacked; what travels is ≤ 64 MiB)
# then here: bash tools/device/rehearse.sh (the bundle alone, without this machine's copies of its libraries)
# then on the device: run(command="bash tools/device/gpu_checks.sh", carry=[".device"], timeout_s=600)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-$( [[ -d build-dev ]] && echo build-dev || echo build )}
[[ -x $build/src/train/ulysses-train ]] || { echo "stage.sh: no ulysses-train in $build (build it first)" >&2; exit 2; }
[[ -x $build/tests/gpu/test_gpu ]] ||
  { echo "stage.sh: $build is not a CUDA build (no tests/gpu/test_gpu)" >&2; exit 2; }
# memory_bench --gpu's side B is ALST's own code: deepspeed (an sdist, built here into a pure-Python wheel) and what
# it needs beyond the GPU machine's image (its Python 3.12; KINDS.md's package list), as wheels for that Python
stage_alst_wheels() {
  local dir=$1 pip="${ULYSSES_DEPS:-/opt/ulysses-deps}/venv/bin/python -m pip" tools
  tools=$(mktemp -d)
  mkdir -p "$dir"
  $pip install -q --target "$tools" wheel &&
    PYTHONPATH=$tools DS_BUILD_OPS=0 DS_ACCELERATOR=cpu $pip wheel -q --no-build-isolation --no-deps -w "$dir" \
      deepspeed==0.19.8 &&
    $pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$dir" \
      hjson==3.1.0 pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 \
      typing-extensions==4.16.0
  local rc=$?
  rm -rf "$tools"
  return $rc
}
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
cd "$stage"
repo=$OLDPWD
mkdir -p .device/build/src/{train,pack,plan,ckpt} .device/build/tests/gpu .device/lib .device/bin
for tool in train/ulysses-train train/ulysses-train-core pack/ulysses-pack plan/ulysses-plan ckpt/ulysses-ckpt; do
  cp "$repo/$build/src/$tool" ".device/build/src/$tool"
done
cp "$repo/$build/tests/gpu/test_gpu" .device/build/tests/gpu/
cp /usr/bin/mpiexec.hydra /usr/bin/hydra_pmi_proxy .device/bin/
ln -s mpiexec.hydra .device/bin/mpiexec
# what the binaries need, less torch's wheel (found there), the C runtime and the CUDA driver (the machine's own)
source "$repo/tools/device/carried_libs.sh"
mapfile -d '' binaries < <(find .device/build .device/bin -type f -executable -print0)
carried_libs "${binaries[@]}" | while read -r _ path; do cp -L "$path" .device/lib/; done
cp -rL /usr/lib/x86_64-linux-gnu/ucx .device/lib/ucx   # UCX loads its transports from here (UCX_MODULE_DIR)
# debug sections out (the tree that travels is limited to 64 MiB)
find .device -type f \( -name "*.so*" -o -perm -u+x \) -exec strip --strip-debug {} + 2>/dev/null || true
# each executable and library finds the bundle's libraries through its own RUNPATH, so that the GPU machine's
# LD_LIBRARY_PATH names torch's wheel alone and its Python (the benchmarks, the CLI tests) keeps its own libssl,
# libz, libffi and pyarrow; torch's wheel and NCCL come from that LD_LIBRARY_PATH, as the build's RUNPATH is replaced
command -v patchelf > /dev/null || apt-get install -y -q patchelf > /dev/null ||
  { echo "stage.sh: needs patchelf (apt-get install patchelf)" >&2; exit 2; }
runpath() { local path=$1; shift; for f; do patchelf --set-rpath "$path" "$f"; done; }
# shellcheck disable=SC2016 # ld.so's $ORIGIN (the object's own folder), not the shell's
origin='$ORIGIN'
runpath "$origin" .device/lib/*.so*
runpath "$origin/.." .device/lib/ucx/*.so*
runpath "$origin/../lib" .device/bin/mpiexec.hydra .device/bin/hydra_pmi_proxy
runpath "$origin/../../../lib" .device/build/src/*/ulysses-* .device/build/tests/gpu/test_gpu
stage_alst_wheels .device/wheels ||
  { echo "stage.sh: no wheels for memory_bench --gpu's side B (PyPI unreachable?): it will say so" >&2
    rm -rf .device/wheels; }
git -C "$repo" rev-parse HEAD > .device/commit
rm -rf "$repo/.device"
mkdir -p "$repo/.device"
tar -C .device -cJf "$repo/.device/bundle.tar.xz" .
du -h "$repo/.device/bundle.tar.xz" | awk '{print "stage.sh: " $2 " holds " $1 "; carry .device"}'
