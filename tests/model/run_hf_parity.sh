#!/bin/sh
# Usage: run_hf_parity.sh PYTHON MAKE_HF_REFERENCE_PY TEST_MODEL_HF_PARITY
# Writes the transformers models and reference outputs into a temporary folder, then runs the C++
# comparison on them. Fails when PYTHON lacks torch, transformers or safetensors (bootstrap installs them).
set -eu
python=$1 script=$2 compare=$3
if ! "$python" -c 'import torch, transformers, safetensors' 2>/dev/null; then
  echo "$python cannot import torch, transformers and safetensors: run tools/bootstrap.sh" >&2
  exit 1
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
echo "+ $python $script $dir"
"$python" "$script" "$dir"
echo "+ $compare $dir"
"$compare" "$dir"
