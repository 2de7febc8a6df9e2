#!/usr/bin/env python3
"""Cross-checks src/io/safetensors against the official safetensors library and transformers.

Usage: crosscheck.py ST_CROSSCHECK        (the helper built from crosscheck.cpp)

(a) C++ writes, Python reads: st_crosscheck writes PLAN (every dtype, a scalar, an empty tensor, unicode
    metadata) with test_values.hpp's values; safetensors.safe_open(framework="pt") must see the same
    names, dtypes, shapes, metadata and values.
(b) Python writes, C++ reads: safetensors.torch.save_file, and transformers' save_pretrained of a tiny
    random LlamaForCausalLM (tied bf16 sharded, untied f32 sharded, tied f32 single file); st_crosscheck
    opens each with HfWeights and compares names, dtypes, shapes and the CRC32 of every tensor's bytes
    with what the official library reads. A corrupted expectation must then fail (the check is not vacuous).
Fails when torch, safetensors or transformers cannot be imported (tools/bootstrap.sh installs them).
"""
import json
import math
import os
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
try:
    import torch
    from safetensors import safe_open
    from safetensors.torch import save_file
    from transformers import LlamaConfig, LlamaForCausalLM
except ImportError as e:
    sys.exit(f"cannot import the outside references ({e}): run tools/bootstrap.sh, or pass -Dtorch_python=PY")

TORCH_DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
                "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
                "U8": torch.uint8, "BOOL": torch.bool}
PLAN = {
    "metadata": {"format": "pt", "note": "ünïcödé ✓"},
    "tensors": [  # tensor i has salt i
        {"name": "model.embed_tokens.weight", "dtype": "BF16", "shape": [16, 8]},
        {"name": "model.norm.weight", "dtype": "F16", "shape": [8]},
        {"name": "proj.weight", "dtype": "F32", "shape": [3, 5]},
        {"name": "proj.bias", "dtype": "F64", "shape": [5]},
        {"name": "ids", "dtype": "I64", "shape": [2, 3]},
        {"name": "i32", "dtype": "I32", "shape": [7]},
        {"name": "i16", "dtype": "I16", "shape": [2, 2, 2]},
        {"name": "i8", "dtype": "I8", "shape": [9]},
        {"name": "bytes", "dtype": "U8", "shape": [300]},
        {"name": "mask", "dtype": "BOOL", "shape": [4, 4]},
        {"name": "scalar", "dtype": "F32", "shape": []},
        {"name": "empty", "dtype": "BF16", "shape": [0, 4]},
    ],
}
INDEX = "model.safetensors.index.json"


def run(cmd):
    print("+", " ".join(map(str, cmd)), flush=True)
    return subprocess.run([str(c) for c in cmd]).returncode


def test_values(dtype, shape, salt):
    """test_values.hpp's st_test::test_bytes as a tensor."""
    m = torch.arange(math.prod(shape), dtype=torch.int64) + salt
    if dtype == "BOOL":
        v = m % 3 == 0
    elif dtype == "U8":
        v = m % 251
    elif dtype in ("F64", "F32", "F16", "BF16"):
        v = (m % 101 - 50).to(torch.float64) / 2
    else:
        v = m % 101 - 50
    return v.to(TORCH_DTYPES[dtype]).reshape(shape)


def check_cpp_written(tmp, exe):
    plan, out = tmp / "plan.json", tmp / "cpp_written.safetensors"
    plan.write_text(json.dumps(PLAN))
    assert run([exe, "write", plan, out]) == 0
    header_len = int.from_bytes(out.read_bytes()[:8], "little")
    assert header_len % 8 == 0, header_len
    with safe_open(str(out), framework="pt") as f:
        assert f.metadata() == PLAN["metadata"], f.metadata()
        assert sorted(f.keys()) == sorted(t["name"] for t in PLAN["tensors"]), f.keys()
        for salt, t in enumerate(PLAN["tensors"]):
            s = f.get_slice(t["name"])
            assert (s.get_dtype(), s.get_shape()) == (t["dtype"], t["shape"]), (t, s.get_dtype(), s.get_shape())
            got, want = f.get_tensor(t["name"]), test_values(t["dtype"], t["shape"], salt)
            assert got.dtype == want.dtype and torch.equal(got, want), (t["name"], got, want)
    print(f"ok: safe_open reads the {len(PLAN['tensors'])} tensors C++ wrote, values and metadata included")


def save_torch_file(d):
    g = torch.Generator().manual_seed(0)
    tensors = {
        "f64": torch.randn(2, 3, generator=g, dtype=torch.float64),
        "f32": torch.randn(3, 5, generator=g),
        "f16": torch.randn(7, generator=g).half(),
        "bf16": torch.randn(4, 4, generator=g).bfloat16(),
        "i64": torch.randint(-2**40, 2**40, (5,), generator=g),
        "i32": torch.randint(-2**30, 2**30, (2, 2), generator=g, dtype=torch.int32),
        "i16": torch.randint(-2**15, 2**15, (3,), generator=g, dtype=torch.int16),
        "i8": torch.randint(-128, 128, (11,), generator=g, dtype=torch.int8),
        "u8": torch.randint(0, 256, (300,), generator=g, dtype=torch.uint8),
        "bool": torch.rand(3, 3, generator=g) > 0.5,
        "scalar": torch.tensor(3.5),
        "empty": torch.zeros(0, 4, dtype=torch.bfloat16),
    }
    d.mkdir()
    metadata = {"format": "pt", "source": "crosscheck.py"}
    save_file(tensors, d / "model.safetensors", metadata=metadata)
    return metadata


def save_tiny_llama(d, tied, dtype, max_shard_size=None):
    torch.manual_seed(0)
    config = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=128, max_position_embeddings=64,
                         tie_word_embeddings=tied)
    model = LlamaForCausalLM(config).to(dtype)
    kwargs = {"max_shard_size": max_shard_size} if max_shard_size else {}
    model.save_pretrained(d, safe_serialization=True, **kwargs)


def reference(d):
    """{name: {dtype, shape, crc32}} as the official library reads directory d."""
    if (d / "model.safetensors").exists():
        with safe_open(str(d / "model.safetensors"), framework="pt") as f:
            weight_map = {name: "model.safetensors" for name in f.keys()}
    else:
        weight_map = json.loads((d / INDEX).read_text())["weight_map"]
    tensors = {}
    for shard in sorted(set(weight_map.values())):
        with safe_open(str(d / shard), framework="pt") as f:
            for name in (n for n, s in weight_map.items() if s == shard):
                s, t = f.get_slice(name), f.get_tensor(name)
                raw = t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
                tensors[name] = {"dtype": s.get_dtype(), "shape": s.get_shape(), "crc32": zlib.crc32(raw)}
    return tensors


def shards(d):
    return len(set(json.loads((d / INDEX).read_text())["weight_map"].values())) if (d / INDEX).exists() else 1


def check_python_written(tmp, exe):
    cases = [{"dir": str(tmp / "torch_single"), "metadata": save_torch_file(tmp / "torch_single")}]
    for name, tied, dtype, max_shard in [("llama_tied_bf16_sharded", True, torch.bfloat16, "10KB"),
                                         ("llama_untied_f32_sharded", False, torch.float32, "20KB"),
                                         ("llama_tied_f32_single", True, torch.float32, None)]:
        save_tiny_llama(tmp / name, tied, dtype, max_shard)
        cases.append({"dir": str(tmp / name)})
    for c in cases:
        c["tensors"] = reference(Path(c["dir"]))
        print(f"{c['dir']}: {len(c['tensors'])} tensors in {shards(Path(c['dir']))} file(s)")
    by_name = {Path(c["dir"]).name: c for c in cases}
    assert shards(tmp / "llama_tied_bf16_sharded") > 1 and shards(tmp / "llama_untied_f32_sharded") > 1
    assert "lm_head.weight" in by_name["llama_untied_f32_sharded"]["tensors"]
    assert "lm_head.weight" not in by_name["llama_tied_bf16_sharded"]["tensors"]
    assert {t["dtype"] for t in by_name["llama_tied_bf16_sharded"]["tensors"].values()} == {"BF16"}

    expected = tmp / "expected.json"
    expected.write_text(json.dumps({"cases": cases}))
    assert run([exe, "read", expected]) == 0, "C++ HfWeights disagrees with the official library"
    first = next(iter(cases[1]["tensors"].values()))
    first["crc32"] ^= 1
    print("(one CRC is now deliberately wrong: st_crosscheck must report a MISMATCH and exit 1)")
    expected.write_text(json.dumps({"cases": cases}))
    assert run([exe, "read", expected]) == 1, "a corrupted expectation was not caught"
    print("ok: C++ HfWeights reads what save_file and save_pretrained wrote (and catches a wrong CRC)")


def main():
    exe = Path(sys.argv[1]).resolve()
    with tempfile.TemporaryDirectory(prefix="uly-st-crosscheck-") as tmp:
        check_cpp_written(Path(tmp), exe)
        check_python_written(Path(tmp), exe)


if __name__ == "__main__":
    main()
