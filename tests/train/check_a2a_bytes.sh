#!/usr/bin/env bash
# The Ulysses all-to-alls hand MPI exactly the bytes docs/training.md states, for MHA, GQA and key/value
# heads replicated up to P (Hkv < P), at P = 4: tools/bench/a2a_bytes counts inside MPI_Alltoall itself. With a ring
# (--sp-ring: U 2 × R 2 and U 1 × R 4, MHA and one KV head), the all-to-alls inside the Ulysses groups and the ring's
# K/V blocks (MPI_Sendrecv) each equal their theory.
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
for kv in 8 1; do
  out=$("$mpiexec" -n 4 "$a2a" "$dir/c$kv.json" 256 2)
  echo "$out"
  grep -q "^RATIO measured/theory (H=8 Hkv=$kv U=2) = 1.000 " <<<"$out" || { echo "FAIL: ring Hkv=$kv a2a"; fail=1; }
  grep -q "^RATIO ring measured/theory (H=8 Hkv=$kv U=2 R=2) = 1.000 " <<<"$out" || { echo "FAIL: ring Hkv=$kv"; fail=1; }
  out=$("$mpiexec" -n 4 "$a2a" "$dir/c$kv.json" 256 4)
  echo "$out"
  grep -q "^RATIO ring measured/theory (H=8 Hkv=$kv U=1 R=4) = 1.000 " <<<"$out" || { echo "FAIL: ring 4 Hkv=$kv"; fail=1; }
done
exit $fail
