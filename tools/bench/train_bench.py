#!/usr/bin/env python3
"""Benchmarks of ulysses-train on CPU, each against an anchor measured in the same run:

  step    our training step time vs transformers + PyTorch (Python) on the same Llama, batch, sequence and
          thread count (sdpa attention, torch.optim.AdamW(foreach=True) as HF Trainer runs it, grad clipping)
          — RATIO ours/theirs, target <= 0.8
  memory  peak RSS per rank for one sequence length at SP = 1, 2, 4; the activation part (peak minus the
          peak of the same run at a tiny sequence) relative to SP=1 — ideal 1/P, target SP=4 <= 0.3
  a2a     bytes the all-to-alls hand to MPI per layer per rank (counted in MPI_Alltoall itself) vs
          S/P·(2H + 2·max(Hkv, P))·D·(P−1)/P·4 per direction: MHA, GQA and KV heads replicated (Hkv < P)
  launch  time from `mpiexec -n 4` to the start of the first step, against 4 ranks loading the binary for
          `--help` — target < 3 s

usage: tools/bench/train_bench.py [step|memory|a2a|launch|all] [--build build] [--threads 2] [--repeat 5]
Medians over --repeat; the machine is noisy, so compare ratios, not absolute times.
"""
import argparse
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

VOCAB = 320


def llama_config(hidden, layers, heads, kv, inter):
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": VOCAB, "hidden_size": hidden,
            "intermediate_size": inter, "num_hidden_layers": layers, "num_attention_heads": heads,
            "num_key_value_heads": kv, "hidden_act": "silu", "max_position_embeddings": 65536, "rms_norm_eps": 1e-5,
            "rope_theta": 10000.0, "tie_word_embeddings": False, "initializer_range": 0.02, "attention_bias": False,
            "mlp_bias": False}


def pack(build, work, name, seq_len, sequences, sp, vocab=VOCAB):
    """A dataset of one-document sequences of exactly seq_len tokens (so HF's causal attention is exact)."""
    import random
    rng = random.Random(seq_len)
    src = work / f"{name}.jsonl"
    with open(src, "w") as f:
        for _ in range(sequences):
            f.write(json.dumps({"input_ids": [rng.randrange(vocab) for _ in range(seq_len)]}) + "\n")
    out = work / name
    subprocess.run([f"{build}/src/pack/ulysses-pack", "pack", str(src), "-o", str(out), "--seq-len", str(seq_len),
                    "--sp", str(sp), "--align", "1", "--vocab-size", str(vocab), "--overwrite"], check=True,
                   capture_output=True)
    return out


def train(build, work, data, config, ranks, steps, threads, tag):
    out = work / f"run-{tag}"
    shutil.rmtree(out, ignore_errors=True)
    cmd = ["mpiexec", "-n", str(ranks), f"{build}/src/train/ulysses-train", "--data", str(data), "--model-config",
           str(config), "--output", str(out), "--sp", str(ranks), "--steps", str(steps), "--threads", str(threads),
           "--lr", "1e-4", "--clip", "1.0"]
    subprocess.run(cmd, check=True, capture_output=True)
    return [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines()]


def hf_step_seconds(model, ids, steps):
    """The median time of a transformers training step as HF Trainer runs one — forward and backward on `ids` as
    their own labels, clipping at 1, torch AdamW(foreach) — over `steps`, the first two left out (warm-up)."""
    import torch
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1, foreach=True)
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        model(input_ids=ids, labels=ids).loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times[2:])


def step_ratio(a, work, name, cfg, S):
    tag = name.split()[0]
    path = work / f"step-{tag}.json"
    path.write_text(json.dumps(cfg))
    steps = a.repeat + 2
    data = pack(a.build, work, f"step-{tag}-data", S, steps + 2, 1)
    ours = statistics.median(m["seconds"] for m in train(a.build, work, data, path, 1, steps, a.threads, tag)[2:])

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**cfg, attn_implementation="sdpa"))
    theirs = hf_step_seconds(model, torch.randint(0, VOCAB, (1, S)), steps)
    params = sum(p.numel() for p in model.parameters())
    print(f"step: {name} Llama {params / 1e6:.2f}M params, S={S}, batch 1, {a.threads} threads: ours {ours * 1e3:.1f} ms, "
          f"transformers {theirs * 1e3:.1f} ms (medians of {a.repeat})")
    print(f"RATIO step time ours/transformers ({name}) = {ours / theirs:.2f}  (target <= 0.8)")


def bench_step(a, work):
    tiny = json.loads((pathlib.Path(__file__).parents[2] / "datasets/sample/tiny-llama/config.json").read_text())
    step_ratio(a, work, "tiny (datasets/sample/tiny-llama)", tiny, 1024)
    step_ratio(a, work, "small", llama_config(256, 4, 8, 4, 688), 1024)


def bench_memory(a, work):
    cfg = llama_config(128, 2, 8, 8, 344)
    path = work / "mem-config.json"
    path.write_text(json.dumps(cfg))
    S, small = 4096, 256
    big_data, small_data = pack(a.build, work, "mem-big", S, 8, 4), pack(a.build, work, "mem-small", small, 8, 4)
    act = {}
    for p in (1, 2, 4):
        peak = max(m["peak_rss_mib"] for m in train(a.build, work, big_data, path, p, 2, 1, f"mem{p}"))
        base = max(m["peak_rss_mib"] for m in train(a.build, work, small_data, path, p, 2, 1, f"mem{p}s"))
        act[p] = peak - base
        print(f"memory: SP={p}: peak RSS per rank {peak:.0f} MiB at S={S} ({base:.0f} MiB at S={small}); "
              f"activations {act[p]:.0f} MiB")
    for p in (2, 4):
        print(f"RATIO activation memory SP={p}/SP=1 = {act[p] / act[1]:.2f}  (ideal {1 / p:.2f}"
              f"{', target <= 0.3' if p == 4 else ''})")


def bench_a2a(a, work):
    for name, kv in (("MHA", 8), ("GQA", 4), ("KV-replicated", 2), ("MQA", 1)):
        path = work / f"a2a-{kv}.json"
        path.write_text(json.dumps(llama_config(256, 2, 8, kv, 688)))
        for p in (2, 4):
            out = subprocess.run(["mpiexec", "-n", str(p), f"{a.build}/tools/bench/a2a_bytes", str(path), "4096"],
                                 check=True, capture_output=True, text=True).stdout
            print(f"a2a ({name}): " + out.strip())


def bench_launch(a, work):
    cfg = json.loads((pathlib.Path(__file__).parents[2] / "datasets/sample/tiny-llama/config.json").read_text())
    path = work / "launch-config.json"
    path.write_text(json.dumps(cfg))
    data = pack(a.build, work, "launch-data", 1024, 8, 4)
    times = []
    for r in range(a.repeat):
        out = work / f"launch-{r}"
        start = time.perf_counter()
        p = subprocess.Popen(["mpiexec", "-n", "4", f"{a.build}/src/train/ulysses-train", "--data", str(data),
                              "--model-config", str(path), "--output", str(out), "--sp", "4", "--steps", "1",
                              "--threads", "1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        metrics = out / "metrics.jsonl"
        while not metrics.exists() or not metrics.read_text().strip():
            time.sleep(0.005)
        first_done = time.perf_counter() - start
        p.wait()
        times.append(first_done - json.loads(metrics.read_text().splitlines()[0])["seconds"])
    bare = []
    for _ in range(a.repeat):   # the anchor: 4 ranks that load the binary (LibTorch, MPI) and print --help
        start = time.perf_counter()
        subprocess.run(["mpiexec", "-n", "4", f"{a.build}/src/train/ulysses-train", "--help"], check=True,
                       stdout=subprocess.DEVNULL)
        bare.append(time.perf_counter() - start)
    launch, floor = statistics.median(times), statistics.median(bare)
    print(f"launch: mpiexec -n 4 → first step starts after {launch:.2f} s; 4 ranks loading the binary for --help "
          f"take {floor:.2f} s (medians of {a.repeat})")
    print(f"RATIO launch to first step / binary load = {launch / floor:.1f}  (target: launch < 3 s)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", nargs="?", default="all", choices=["step", "memory", "a2a", "launch", "all"])
    ap.add_argument("--build", default="build")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = pathlib.Path(tmp)
        for name in (["step", "memory", "a2a", "launch"] if a.what == "all" else [a.what]):
            globals()[f"bench_{name}"](a, work)


if __name__ == "__main__":
    main()
