#!/usr/bin/env python3
"""Benchmark of `ulysses-ckpt export-hf` (fp32 -> bf16) on a synthetic ~1B-parameter Llama-shaped checkpoint.

Measured in the same run, on the same files, each route --repeat times (medians):
  floor   the I/O an fp32 -> bf16 export cannot avoid: read model.safetensors, write half its bytes (the
          bf16 size), fsync — in large chunks, no conversion: the anchor
  export  ulysses-ckpt export-hf --dtype bf16 (checks the manifest checksum, converts, fsyncs, re-reads
          and verifies what it wrote); its peak RSS
  python  the route a user has today: safetensors.torch.load_file, .to(torch.bfloat16), save_file, fsync;
          timed inside its process after `import torch` (interpreter start and imports excluded)
Throughput is fp32 input bytes per second; RATIO export/floor (target >= 0.5) and export/python.

The checkpoint is written here with numpy (random fp32 weights; the optimizer file is sparse zeros of the
right size, since export-hf checks its header and size but does not read it).

usage: tools/bench/export_bench.py ULYSSES_CKPT [--dir /tmp/export-bench] [--layers 18] [--repeat 3] [--keep]
Needs numpy, safetensors, torch (the python route) and ~15 GB of free disk; prints what it runs.
"""
import argparse
import ctypes
import ctypes.util
import json
import os
import pathlib
import shutil
import statistics
import struct
import subprocess
import sys
import time

import numpy as np

p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
p.add_argument("ckpt", help="path to the ulysses-ckpt binary")
p.add_argument("--dir", default="/tmp/export-bench")
p.add_argument("--layers", type=int, default=18, help="18 layers of hidden 2048 ~ 1.07B parameters")
p.add_argument("--keep", action="store_true", help="keep the synthetic checkpoint and outputs")
p.add_argument("--repeat", type=int, default=3, help="runs of each route (medians)")
p.add_argument("--skip-python", action="store_true")
args = p.parse_args()

HIDDEN, INTER, HEADS, KV, VOCAB = 2048, 5632, 32, 8, 32000
D = HIDDEN // HEADS
config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": VOCAB, "hidden_size": HIDDEN,
          "intermediate_size": INTER, "num_hidden_layers": args.layers, "num_attention_heads": HEADS,
          "num_key_value_heads": KV, "head_dim": D, "hidden_act": "silu", "max_position_embeddings": 4096,
          "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "tie_word_embeddings": False,
          "bos_token_id": 1, "eos_token_id": 2}


def params():
    yield "model.embed_tokens.weight", (VOCAB, HIDDEN)
    for i in range(args.layers):
        p = f"model.layers.{i}."
        yield p + "self_attn.q_proj.weight", (HEADS * D, HIDDEN)
        yield p + "self_attn.k_proj.weight", (KV * D, HIDDEN)
        yield p + "self_attn.v_proj.weight", (KV * D, HIDDEN)
        yield p + "self_attn.o_proj.weight", (HIDDEN, HEADS * D)
        yield p + "mlp.gate_proj.weight", (INTER, HIDDEN)
        yield p + "mlp.up_proj.weight", (INTER, HIDDEN)
        yield p + "mlp.down_proj.weight", (HIDDEN, INTER)
        yield p + "input_layernorm.weight", (HIDDEN,)
        yield p + "post_attention_layernorm.weight", (HIDDEN,)
    yield "model.norm.weight", (HIDDEN,)
    yield "lm_head.weight", (VOCAB, HIDDEN)


def header(tensors, metadata):
    h, off = {"__metadata__": metadata}, 0
    for name, shape in tensors:
        n = 4 * int(np.prod(shape))
        h[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [off, off + n]}
        off += n
    text = json.dumps(h).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text, off


def xxh3(path):
    """XXH3-64 of a file as the manifest spells it, through the system libxxhash (no Python package needed)."""
    lib = ctypes.CDLL(ctypes.util.find_library("xxhash") or "libxxhash.so.0")
    lib.XXH3_createState.restype = ctypes.c_void_p
    lib.XXH3_64bits_reset.argtypes = [ctypes.c_void_p]
    lib.XXH3_64bits_update.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.XXH3_64bits_digest.argtypes = [ctypes.c_void_p]
    lib.XXH3_64bits_digest.restype = ctypes.c_uint64
    state = lib.XXH3_createState()
    lib.XXH3_64bits_reset(state)
    with open(path, "rb") as f:
        while chunk := f.read(64 << 20):
            lib.XXH3_64bits_update(state, chunk, len(chunk))
    return f"{lib.XXH3_64bits_digest(state):016x}"


def write_checkpoint(d):
    d.mkdir(parents=True, exist_ok=True)
    tensors = list(params())
    rng = np.random.default_rng(0)
    hdr, size = header(tensors, {"format": "pt"})
    done = (d / "model.safetensors").exists() and (d / "model.safetensors").stat().st_size == len(hdr) + size
    if not done:   # a previous run that stopped after the weights keeps them
        with open(d / "model.safetensors", "wb") as f:
            f.write(hdr)
            for name, shape in tensors:
                n = int(np.prod(shape))
                for start in range(0, n, 1 << 24):
                    f.write((rng.standard_normal(min(1 << 24, n - start), dtype=np.float32) * 0.02).tobytes())
            f.flush()
            os.fsync(f.fileno())
    opt = [(f"{k}.{n}", s) for k in ("exp_avg", "exp_avg_sq") for n, s in tensors]
    ohdr, osize = header(opt, {"steps": "1"})
    with open(d / "optimizer.safetensors", "wb") as f:
        f.write(ohdr)
        f.truncate(len(ohdr) + osize)   # sparse zeros
    (d / "config.json").write_text(json.dumps(config, indent=2))
    (d / "trainer_state.json").write_text(json.dumps({"step": 1, "cursor": 8, "tokens_seen": 0, "options": {}}))
    files = []
    for f in ["model.safetensors", "optimizer.safetensors", "trainer_state.json", "config.json"]:
        files.append({"file": f, "bytes": (d / f).stat().st_size, "xxh3": xxh3(d / f)})
    manifest = {"format": "ulysses-checkpoint", "format_version": 1, "step": 1,
                "layout": {"world": 1, "sp": 1, "dp": 1}, "architecture": "LlamaForCausalLM",
                "optimizer_layout": "replicated", "consolidated": False, "files": files}
    (d / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return sum(int(np.prod(s)) for _, s in tensors), size


def timed(label, cmd):
    """Seconds, peak RSS (MiB) and stdout of cmd. The RSS comes from GNU time when installed: wait4's
    ru_maxrss would also count this Python process's pages, inherited by the child between fork and exec."""
    print(f"+ {' '.join(map(str, cmd))}", flush=True)
    rss_file = pathlib.Path(args.dir) / f".rss-{label}"
    gnu_time = shutil.which("time") if pathlib.Path("/usr/bin/time").exists() else None
    full = (["/usr/bin/time", "-f", "%M", "-o", str(rss_file)] if gnu_time else []) + list(map(str, cmd))
    t0 = time.perf_counter()
    proc = subprocess.run(full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    dt = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"{label} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    rss = float(rss_file.read_text().split()[-1]) / 1024 if gnu_time else float("nan")
    return dt, rss, proc.stdout


def drop_outputs(*paths):
    for p in paths:
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()


root = pathlib.Path(args.dir)
ck = root / "step-0000001"
if not (ck / "manifest.json").exists():
    t0 = time.perf_counter()
    n_params, data_bytes = write_checkpoint(ck)
    print(f"wrote synthetic checkpoint {ck}: {n_params / 1e9:.3f}B parameters, "
          f"{data_bytes / 2**30:.2f} GiB fp32 in {time.perf_counter() - t0:.1f} s", flush=True)
model = ck / "model.safetensors"
in_bytes = model.stat().st_size
os.sync()

floor_py = """
import os, sys
buf = bytearray(16 << 20)   # one buffer, reused: no allocation or page faults per chunk
view = memoryview(buf)
with open(sys.argv[1], "rb", buffering=0) as src:
    dst = os.open(sys.argv[2], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    while n := src.readinto(buf):
        os.write(dst, view[: n // 2])
    os.fsync(dst)
"""
python_route = """
import os, sys, time, torch
from safetensors.torch import load_file, save_file
t0 = time.perf_counter()
w = load_file(sys.argv[1])
w = {k: v.to(torch.bfloat16) for k, v in w.items()}
save_file(w, sys.argv[2], metadata={"format": "pt"})
fd = os.open(sys.argv[2], os.O_RDONLY); os.fsync(fd)
print(time.perf_counter() - t0)
"""
floor_out, export_out, py_out = root / "floor.bin", root / "export-bf16", root / "python-bf16.safetensors"
drop_outputs(floor_out, export_out, py_out)
# warm the page cache once so that no route pays for the first read alone
subprocess.run(["cat", str(model)], stdout=subprocess.DEVNULL, check=True)
runs = {"floor": [], "export": [], "python": []}
rss = {"floor": [], "export": [], "python": []}
for r in range(args.repeat):   # interleaved, so a slow spell of the machine hits every route alike
    t, m, _ = timed("floor", [sys.executable, "-c", floor_py, model, floor_out])
    runs["floor"].append(t)
    rss["floor"].append(m)
    drop_outputs(floor_out)
    t, m, _ = timed("export", [args.ckpt, "export-hf", ck, "-o", export_out, "--dtype", "bf16"])
    runs["export"].append(t)
    rss["export"].append(m)
    drop_outputs(export_out)
    if not args.skip_python:
        _, m, out = timed("python", [sys.executable, "-c", python_route, model, py_out])
        runs["python"].append(float(out.split()[-1]))
        rss["python"].append(m)
        drop_outputs(py_out)
med = {k: statistics.median(v) for k, v in runs.items() if v}
labels = {"floor": "floor (read fp32, write bf16 bytes, fsync)", "export": "ulysses-ckpt export-hf bf16",
          "python": "python: safetensors+torch load/cast/save"}
print(f"\ninput: {in_bytes / 2**30:.2f} GiB fp32 (model.safetensors); medians of {args.repeat}")
print(f"{'route':<44} {'seconds':>8} {'GiB/s':>7} {'vs floor':>9} {'peak RSS':>10}")
for k, t in med.items():
    print(f"{labels[k]:<44} {t:8.2f} {in_bytes / 2**30 / t:7.2f} {med['floor'] / t:8.2f}x {max(rss[k]):8.0f} MiB")
print(f"\nRATIO export/floor throughput = {med['floor'] / med['export']:.2f}  (target >= 0.5)")
if not args.skip_python:
    print(f"RATIO export speed-up over the python route = {med['python'] / med['export']:.2f}x")
if not args.keep:
    shutil.rmtree(root)
