#!/usr/bin/env python3
"""Sharded model states (ZeRO-3 / FSDP) on CPU, each figure against an anchor measured in the same run.

  memory  model-state bytes per rank of a Llama of ~125M parameters (hidden 768, 12 layers, 12 heads, 4 KV
          heads, intermediate 2048, vocabulary 32000; fp32) at W = 1, 2, 4 ranks with --sharding full_shard:
          peak RSS per rank minus the peak RSS of the same command with a ~0.1M-parameter model (the
          process, LibTorch, MPI: the anchor), at a sequence so short that activations are negligible.
          RATIO against 16·N/W + 2·U (U: the largest unit, the fp32 embedding table, gathered whole with its
          gradient while it runs) — target <= 1.10. The replicated run (no_shard) is printed beside it.
  init    --init-from a Hugging Face directory of that model (fp32, exported here) at W = 4: the same
          model-state bytes RATIO, which must hold while every rank streams each tensor and keeps its slice
          (peak ≈ its shards + one tensor) — target <= 1.10
  lora    model-state bytes of that model at W = 1 with LoRA (--lora-rank 16, all-linear: A adapter parameters)
          against the full fine-tune in the same run: fp32 LoRA against 4·N + 16·A (the frozen base's fp32 weights,
          the adapters' weights, gradients and AdamW moments) — target <= 1.10 — and the full fine-tune against
          16·N (reference). bf16 LoRA holds 2·N + 20·A once running (the base in bf16; the adapters' fp32 masters,
          moments and gradients, their bf16 copies and gradients), but the modules are built in fp32 and the base
          becomes bf16 before it moves to the device: a CPU's peak is that host-side 4·N + 16·A (the RATIO, target
          <= 1.10), while a GPU receives the base in bf16.
  step    step time at W = 4 (SP=4, S=1024), sharded over the 4 ranks against replicated with activation
          checkpointing (sharded units are always recomputed: the like-for-like anchor) — target <= 1.3;
          against replicated without checkpointing, printed for information.

usage: tools/bench/sharding_bench.py [memory|init|lora|step|all] [--build build] [--repeat 3] [--check R]
CI runs `init --repeat 1 --check 1.2` as the test train_init_from_memory (a memory bound, not a timing).
Every rank is a process on this machine (mpiexec, oversubscribed on small machines): medians and ratios only.
"""
import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from train_bench import llama_config, pack  # noqa: E402

VOCAB = 32000
BIG = {**llama_config(768, 12, 12, 4, 2048), "vocab_size": VOCAB}
ANCHOR = {**llama_config(64, 1, 4, 2, 128), "vocab_size": VOCAB // 100}
ENV = {"MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": "0"}   # freed tensors go back to the OS


def parameters(c):
    h, i, v = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    d = h // c["num_attention_heads"]
    layer = 2 * h * h + 2 * h * c["num_key_value_heads"] * d + 3 * h * i + 2 * h
    return 2 * v * h + c["num_hidden_layers"] * layer + h


def run(a, work, cfg, data, ranks, tag, *extra, steps=2, init_from=None):
    path = work / f"{tag}.json"
    path.write_text(json.dumps(cfg))
    out = work / f"run-{tag}"
    model = ["--init-from", str(init_from)] if init_from else ["--model-config", str(path)]
    cmd = ["mpiexec", "-n", str(ranks), f"{a.build}/src/train/ulysses-train", "--data", str(data), *model,
           "--output", str(out), "--sp", str(ranks), "--steps", str(steps), "--threads", "1", "--overwrite",
           *map(str, extra)]
    p = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **ENV})
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{p.stderr[-2000:]}")
    return [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines()]


def peak(a, work, cfg, data, w, tag, *extra, init_from=None):
    return statistics.median(run(a, work, cfg, data, w, f"{tag}-{r}", *extra, init_from=init_from)[-1]["peak_rss_mib"]
                             for r in range(a.repeat))


def bench_memory(a, work, init=False):
    n = parameters(BIG)
    unit = 4 * VOCAB * BIG["hidden_size"]
    print(f"model: {n / 1e6:.1f}M parameters; 16N = {16 * n / 2**30:.2f} GiB; largest unit {unit / 2**20:.0f} MiB fp32")
    if init:
        w = 4
        data = pack(a.build, work, "init", 32 * w, 4, w, VOCAB)
        anchor_data = pack(a.build, work, "init-anchor", 32 * w, 4, w, ANCHOR["vocab_size"])
        run(a, work, BIG, data, 1, "export-src", "--sharding", "no_shard", steps=1)
        hf = work / "hf"
        subprocess.run([f"{a.build}/src/ckpt/ulysses-ckpt", "export-hf", str(work / "run-export-src"), "-o", str(hf),
                        "--dtype", "fp32", "--overwrite"], check=True, capture_output=True)
        base = peak(a, work, ANCHOR, anchor_data, w, "init-anchor", "--sharding", "full_shard")
        got = (peak(a, work, BIG, data, w, "init", "--sharding", "full_shard", init_from=hf) - base) * 2**20
        ideal = 16 * n / w + 2 * unit
        print(f"W={w} --init-from: model states {got / 2**20:.0f} MiB; 16N/W + 2U = {ideal / 2**20:.0f} MiB")
        print(f"RATIO model-state bytes with --init-from W={w} / (16N/W + 2U) = {got / ideal:.2f}  (target <= 1.10)")
        if a.check is not None and got > a.check * ideal:
            sys.exit(f"--init-from held {got / ideal:.2f} x (16N/W + 2U) per rank, more than --check {a.check}")
        return
    for w in (1, 2, 4):
        data = pack(a.build, work, f"mem-{w}", 32 * w, 4, w, VOCAB)
        anchor_data = pack(a.build, work, f"mem-anchor-{w}", 32 * w, 4, w, ANCHOR["vocab_size"])
        base = peak(a, work, ANCHOR, anchor_data, w, f"anchor-{w}", "--sharding", "full_shard")
        sizes = {mode: (peak(a, work, BIG, data, w, f"big-{mode}-{w}", "--sharding", mode) - base) * 2**20
                 for mode in ("full_shard", "no_shard")}
        ideal = 16 * n / w + 2 * unit
        print(f"W={w}: anchor {base:.0f} MiB; model states full_shard {sizes['full_shard'] / 2**20:.0f} MiB, "
              f"no_shard {sizes['no_shard'] / 2**20:.0f} MiB; 16N/W + 2U = {ideal / 2**20:.0f} MiB")
        print(f"RATIO model-state bytes full_shard W={w} / (16N/W + 2U) = {sizes['full_shard'] / ideal:.2f}  "
              f"(target <= 1.10)")
        print(f"RATIO model-state bytes no_shard W={w} / 16N = {sizes['no_shard'] / (16 * n):.2f}  (reference)")


def lora_parameters(c, rank):
    """r × (in + out) of every projection of every layer (all-linear)."""
    h, i = c["hidden_size"], c["intermediate_size"]
    d = h // c["num_attention_heads"]
    q, kv = c["num_attention_heads"] * d, c["num_key_value_heads"] * d
    per_layer = (h + q) + 2 * (h + kv) + (q + h) + 2 * (h + i) + (i + h)
    return c["num_hidden_layers"] * rank * per_layer


def bench_lora(a, work):
    n, rank = parameters(BIG), 16
    adapters = lora_parameters(BIG, rank)
    print(f"model: {n / 1e6:.1f}M parameters; LoRA rank {rank}, all-linear: {adapters / 1e6:.2f}M adapter parameters")
    data = pack(a.build, work, "lora", 32, 4, 1, VOCAB)
    anchor_data = pack(a.build, work, "lora-anchor", 32, 4, 1, ANCHOR["vocab_size"])
    lora = ["--lora-rank", rank, "--lora-targets", "all-linear"]
    base = peak(a, work, ANCHOR, anchor_data, 1, "lora-anchor", "--precision", "fp32")
    got = {tag: (peak(a, work, BIG, data, 1, f"lora-{tag}", *extra) - base) * 2**20 for tag, extra in
           (("full", ["--precision", "fp32"]), ("lora-fp32", ["--precision", "fp32", *lora]),
            ("lora-bf16", ["--precision", "bf16", *lora]))}
    ideal = {"full": 16 * n, "lora-fp32": 4 * n + 16 * adapters, "lora-bf16": 4 * n + 16 * adapters}   # CPU: built fp32
    for tag, bytes_ in got.items():
        print(f"W=1 {tag}: model states {bytes_ / 2**20:.0f} MiB; expected {ideal[tag] / 2**20:.0f} MiB")
    print(f"RATIO model-state bytes LoRA fp32 / full fine-tune fp32 = {got['lora-fp32'] / got['full']:.2f}  "
          f"(expected {ideal['lora-fp32'] / ideal['full']:.2f})")
    print(f"RATIO model-state bytes LoRA fp32 / (4N + 16A) = {got['lora-fp32'] / ideal['lora-fp32']:.2f}  "
          f"(target <= 1.10)")
    print(f"RATIO model-state bytes LoRA bf16 / (4N + 16A: built in fp32 on the host) = "
          f"{got['lora-bf16'] / ideal['lora-bf16']:.2f}  (target <= 1.10; running: 2N + 20A = "
          f"{(2 * n + 20 * adapters) / 2**20:.0f} MiB)")
    print(f"RATIO model-state bytes full fine-tune fp32 / 16N = {got['full'] / ideal['full']:.2f}  (reference)")


def bench_step(a, work):
    data = pack(a.build, work, "step", 1024, a.repeat + 4, 4, VOCAB)
    times = {}
    for tag, extra in [("sharded", ["--sharding", "full_shard"]),
                       ("replicated+ckpt", ["--sharding", "no_shard", "--activation-checkpointing"]),
                       ("replicated", ["--sharding", "no_shard"])]:
        m = run(a, work, BIG, data, 4, f"step-{tag}", *extra, steps=a.repeat + 1)
        times[tag] = statistics.median(x["seconds"] for x in m[1:])   # the first step warms up
        print(f"W=4 {tag}: median step {times[tag]:.2f} s")
    print(f"RATIO step time sharded / replicated with checkpointing (W=4) = "
          f"{times['sharded'] / times['replicated+ckpt']:.2f}  (target <= 1.3)")
    print(f"RATIO step time sharded / replicated without checkpointing (W=4) = "
          f"{times['sharded'] / times['replicated']:.2f}  (information: sharding implies recomputation)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", nargs="?", default="all", choices=["memory", "init", "lora", "step", "all"])
    ap.add_argument("--build", default="build")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--check", type=float, help="init: exit 1 when the ratio exceeds this (the CI test's bound)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = pathlib.Path(tmp)
        if a.what in ("memory", "all"):
            bench_memory(a, work)
        if a.what in ("init", "all"):
            bench_memory(a, work, init=True)
        if a.what in ("lora", "all"):
            bench_lora(a, work)
        if a.what in ("step", "all"):
            bench_step(a, work)


if __name__ == "__main__":
    main()
