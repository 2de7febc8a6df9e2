#!/usr/bin/env bash
# Installs, idempotently, everything the toolkit needs to build, test and run on one machine:
#   - Debian packages (compilers, clang with libFuzzer for the sanitizer build, Meson, MPICH, HDF5 serial,
#     CLI11, fmt, nlohmann-json, GoogleTest, zstd/zlib, protobuf + ISA-L for the trainer's TensorBoard files,
#     PCRE2 + utf8proc + sentencepiece for the packer's tokenizers,
#     Slurm + munge for the launch tests, ccache),
#   - a Python virtual environment holding the PyPI PyTorch wheel (whose torch/ folder *is* LibTorch,
#     CUDA build; it runs on CPU too) and the test-only references (transformers, safetensors, h5py).
# A second run checks stamps and returns in about a second. It prints nothing but progress lines.
#
# Where things go (override with the environment):
#   ULYSSES_DEPS   default /opt/ulysses-deps   (the venv is $ULYSSES_DEPS/venv)
#   ULYSSES_SKIP_APT=1  skip the apt step (no root; you installed the packages yourself)
set -euo pipefail

ULYSSES_DEPS=${ULYSSES_DEPS:-/opt/ulysses-deps}
VENV=$ULYSSES_DEPS/venv
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REQS=$HERE/requirements.txt

APT_PACKAGES=(
  build-essential pkg-config meson ninja-build ccache python3-venv
  clang libclang-rt-dev
  mpich libmpich-dev
  libhdf5-dev hdf5-tools
  libcli11-dev libfmt-dev nlohmann-json3-dev libgtest-dev libgmock-dev
  libzstd-dev zlib1g-dev libxxhash-dev
  libprotobuf-dev protobuf-compiler libisal-dev
  libpcre2-dev libutf8proc-dev libsentencepiece-dev
  slurm-wlm slurmctld slurmd slurm-client munge
)

log() { echo "[bootstrap] $*"; }

install_apt() {
  [[ ${ULYSSES_SKIP_APT:-0} == 1 ]] && { log "apt step skipped (ULYSSES_SKIP_APT=1)"; return; }
  local missing=()
  for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]} == 0)); then log "Debian packages: all present"; return; fi
  log "installing Debian packages: ${missing[*]}"
  local sudo=""; [[ $(id -u) == 0 ]] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

python_for_venv() {
  # Prefer the interpreter on PATH (CI images ship a pyenv 3.11); fall back to Debian's.
  for py in python3 /usr/bin/python3; do
    if "$py" -c 'import venv, ensurepip' 2>/dev/null; then echo "$py"; return; fi
  done
  echo "/usr/bin/python3"
}

install_venv() {
  local stamp=$VENV/.ulysses-requirements
  if [[ -x $VENV/bin/python ]] && cmp -s "$REQS" "$stamp"; then
    log "Python venv: up to date ($VENV)"; return
  fi
  mkdir -p "$ULYSSES_DEPS"
  [[ -x $VENV/bin/python ]] || "$(python_for_venv)" -m venv "$VENV"
  log "installing Python packages into $VENV (first time: the PyTorch wheel is several GB)"
  "$VENV/bin/python" -m pip install -q --upgrade pip
  "$VENV/bin/python" -m pip install -q -r "$REQS"
  cp "$REQS" "$stamp"
}

install_apt
install_venv
log "LibTorch: $("$VENV/bin/python" -c 'import torch, os; print(torch.__version__, os.path.dirname(torch.__file__))')"
