#!/usr/bin/env bash
# The Ulysses all-to-alls hand MPI exactly the bytes docs/training.md states, for MHA, GQA and key/value
# heads replicated up to P (Hkv < P), at P = 4: tools/bench/a2a_bytes counts inside MPI_Alltoall itself.
# usage: check_a2a_bytes.sh MPIEXEC A2A_BYTES
set -euo pipefail
mpiexec=$1 a2a=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail=0
for kv in 8 4 2 1; do
  cat >"$dir/c$kv.json" <<JSON
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 64, "hidden_size": 64,
 "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": $kv}
JSON
  out=$("$mpiexec" -n 4 "$a2a" "$dir/c$kv.json" 256)
  echo "$out"
  grep -q "^RATIO measured/theory (H=8 Hkv=$kv P=4) = 1.000 " <<<"$out" || { echo "FAIL: Hkv=$kv"; fail=1; }
done
exit $fail
