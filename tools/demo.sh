#!/usr/bin/env bash
# The main job on the built-in example, from a fresh machine: bootstrap (idempotent), build, pack the
# sample corpus into SP=4-aligned shards checked against the tiny model's config, inspect and verify them,
# then train the tiny Llama with Ulysses SP=4 over 4 CPU ranks and write checkpoints.
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
  --output "$OUT/run" --sp 4 --steps 40 --micro-batch 2 --lr 3e-3 --warmup 4 --save-every 20 --threads 1

python3 - "$OUT/run/metrics.jsonl" <<'PY'
import json, sys
losses = [json.loads(line)["loss"] for line in open(sys.argv[1])]
first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
print(f"loss: first 5 steps {first:.3f} -> last 5 steps {last:.3f} over {len(losses)} steps")
sys.exit(0 if last < first else "the loss did not go down")
PY
echo "checkpoints: $(ls "$OUT/run/checkpoints") (latest: $(cat "$OUT/run/checkpoints/latest"))"
