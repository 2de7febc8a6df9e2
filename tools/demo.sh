#!/usr/bin/env bash
# The main job on the built-in example, from a fresh machine: bootstrap (idempotent), build, pack the
# sample corpus into SP=4-aligned shards checked against the tiny model's config, inspect and verify them.
# Everything it writes goes under out/demo/ (replaced on each run).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash tools/bootstrap.sh
BUILD=${BUILD:-build}
if [[ -f $BUILD/build.ninja ]]; then meson setup --reconfigure "$BUILD" >/dev/null; else meson setup "$BUILD"; fi
ninja -C "$BUILD"
OUT=out/demo
mkdir -p "$OUT"
run() { echo "+ $*"; "$@"; }
run "$BUILD/src/pack/ulysses-pack" pack datasets/sample/licenses.jsonl.gz -o "$OUT/packed" --overwrite \
  --seq-len 1024 --sp 4 --pad-id 258 --valid-fraction 0.05 --model-config datasets/sample/tiny-llama/config.json
run "$BUILD/src/pack/ulysses-pack" inspect "$OUT/packed" --sample 0 --bytes --max-tokens 60
run "$BUILD/src/pack/ulysses-pack" verify "$OUT/packed"
