#!/usr/bin/env bash
# The main job on the built-in example, from a fresh machine: bootstrap (idempotent), build, pack the
# sample corpus into SP=4-aligned shards checked against the tiny model's config, inspect and verify them,
# then train the tiny Llama with Ulysses SP=4 over 4 CPU ranks and write checkpoints, train it again in bf16 (its
# loss tracks fp32's: the final loss within 2%), export the fp32 run's last checkpoint as a Hugging Face model
# directory and load it with transformers.
# Everything it writes goes under out/demo/ (replaced on each run).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export BUILD=${BUILD:-build}
bash tools/build.sh
OUT=out/demo
CONFIG=datasets/sample/tiny-llama/config.json
rm -rf "$OUT" && mkdir -p "$OUT"
run() { echo "+ $*"; "$@"; }

run "$BUILD/src/pack/ulysses-pack" pack datasets/sample/licenses.jsonl.gz -o "$OUT/packed" \
  --seq-len 1024 --sp 4 --pad-id 258 --valid-fraction 0.05 --model-config "$CONFIG"
run "$BUILD/src/pack/ulysses-pack" inspect "$OUT/packed" --sample 0 --bytes --max-tokens 60
run "$BUILD/src/pack/ulysses-pack" verify "$OUT/packed"

run mpiexec -n 4 "$BUILD/src/train/ulysses-train" --data "$OUT/packed" --model-config "$CONFIG" \
  --output "$OUT/run" --sp 4 --steps 40 --micro-batch 2 --lr 3e-3 --warmup 4 --save-every 20 --threads 1 \
  --eval-every 10
run "${ULYSSES_DEPS:-/opt/ulysses-deps}/venv/bin/python" tools/plot_metrics.py "$OUT/run" -o "$OUT/metrics.png"

python3 - "$OUT/run/metrics.jsonl" <<'PY'
import json, sys
losses = [json.loads(line)["loss"] for line in open(sys.argv[1]) if '"loss"' in line]
first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
print(f"loss: first 5 steps {first:.3f} -> last 5 steps {last:.3f} over {len(losses)} steps")
sys.exit(0 if last < first else "the loss did not go down")
PY
echo "checkpoints: $(ls "$OUT/run/checkpoints" | tr '\n' ' ')(latest: $(cat "$OUT/run/checkpoints/latest"))"

# The same 40 steps with the model in bf16 (fp32 masters and AdamW): its loss curve tracks fp32's. oneDNN's bf16
# matmuls where the kernel leaves AMX off (docs/training.md).
run env ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16 mpiexec -n 4 "$BUILD/src/train/ulysses-train" --data "$OUT/packed" \
  --model-config "$CONFIG" --output "$OUT/run-bf16" --sp 4 --steps 40 --micro-batch 2 --lr 3e-3 --warmup 4 \
  --save-every -1 --threads 1 --precision bf16
python3 - "$OUT/run/metrics.jsonl" "$OUT/run-bf16/metrics.jsonl" <<'PY'
import json, sys
fp32, bf16 = ([json.loads(line)["loss"] for line in open(f) if '"loss"' in line] for f in sys.argv[1:])
worst = max(abs(b - a) / a for a, b in zip(fp32, bf16))
final = abs(bf16[-1] - fp32[-1]) / fp32[-1]
print(f"bf16 against fp32 over {len(bf16)} steps: final loss {bf16[-1]:.4f} vs {fp32[-1]:.4f} ({100 * final:.2f}%), "
      f"largest step difference {100 * worst:.2f}%")
sys.exit(0 if len(bf16) == len(fp32) and final <= 0.02 else "bf16's final loss is not within 2% of fp32's")
PY

run "$BUILD/src/ckpt/ulysses-ckpt" export-hf "$OUT/run/checkpoints" -o "$OUT/hf" --dtype bf16
run "$BUILD/src/ckpt/ulysses-ckpt" inspect "$OUT/hf" --no-tensors
# The exported model, loaded by Hugging Face transformers (the venv bootstrap made): greedy continuation
# of a prompt with the byte-level tokenizer of datasets/sample.
"${ULYSSES_DEPS:-/opt/ulysses-deps}/venv/bin/python" - "$OUT/hf" <<'PY'
import sys, torch
from transformers import AutoModelForCausalLM
model = AutoModelForCausalLM.from_pretrained(sys.argv[1])
prompt = [256] + list(b"This License")
out = model.generate(torch.tensor([prompt]), max_new_tokens=40, do_sample=False, eos_token_id=257, pad_token_id=258)
text = bytes(t for t in out[0, 1:].tolist() if t < 256).decode("utf-8", "replace")
print(f"transformers loaded {type(model).__name__} ({sum(p.numel() for p in model.parameters())} parameters, "
      f"{next(model.parameters()).dtype}); greedy continuation: {text!r}")
PY
