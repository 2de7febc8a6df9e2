#!/usr/bin/env bash
# Builds tests/fuzz/fuzz_readers.cpp with clang + libFuzzer + ASan + UBSan and runs it.
# Not part of CI (it takes minutes). Needs: clang, libclang-rt-14-dev (Debian 12), and the Debian
# -dev packages the project already builds with (fmt, nlohmann-json, xxhash).
#
# usage: tests/fuzz/run_fuzz.sh [SECONDS=180] [WORK_DIR=/tmp/ulysses-fuzz]
# Crashing inputs are left in WORK_DIR/crash-*; reproduce one with WORK_DIR/fuzz_readers WORK_DIR/crash-...
set -euo pipefail
: "${CXX:=clang++}"
seconds=${1:-180}
work=${2:-/tmp/ulysses-fuzz}
root=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$work/corpus"
if ! command -v "$CXX" >/dev/null; then
  echo "no $CXX: apt-get install -y clang libclang-rt-14-dev" >&2; exit 1
fi
srcs=("$root/tests/fuzz/fuzz_readers.cpp" "$root/src/io/safetensors.cpp" "$root/src/io/checkpoint_format.cpp"
      "$root/src/core/error.cpp" "$root/src/ckpt/dtype.cpp")
cmd=("$CXX" -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
     -I"$root/src" "${srcs[@]}" -o "$work/fuzz_readers" -lfmt)
echo "+ ${cmd[*]}"
"${cmd[@]}"

# seeds: a valid safetensors file (selector byte 0) and a valid manifest (selector byte 1)
python3 - "$work/corpus" <<'PY'
import json, struct, sys, pathlib
d = pathlib.Path(sys.argv[1])
h = json.dumps({"__metadata__": {"format": "pt"},
                "a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
                "b": {"dtype": "BF16", "shape": [3], "data_offsets": [16, 22]},
                "c": {"dtype": "F16", "shape": [0], "data_offsets": [22, 22]}}).encode()
h += b" " * (-len(h) % 8)
(d / "seed-safetensors").write_bytes(b"\0" + struct.pack("<Q", len(h)) + h + bytes(range(22)))
m = {"format": "ulysses-checkpoint", "format_version": 1, "step": 20,
     "layout": {"world": 4, "sp": 2, "dp": 2}, "architecture": "LlamaForCausalLM",
     "optimizer_layout": "replicated", "consolidated": False,
     "files": [{"file": "model.safetensors", "bytes": 10, "xxh3": "0123456789abcdef"}]}
(d / "seed-manifest").write_bytes(b"\1" + json.dumps(m).encode())
PY
echo "+ $work/fuzz_readers -max_total_time=$seconds -max_len=4096 $work/corpus"
cd "$work"
FUZZ_TMPDIR="$work" ./fuzz_readers -max_total_time="$seconds" -max_len=4096 -print_final_stats=1 corpus
