#!/usr/bin/env python3
"""Ulysses × ring attention (--sp-ring) on CPU, each figure against an anchor measured in the same run.

  step   step time of SP = 4 as Ulysses 2 × ring 2 (and as a ring of 4) against pure Ulysses 4, the same model,
         length and data (a Llama of hidden 256, 4 layers, 8 heads, 2 KV heads; S = 4096, fp32): median over the
         steps after the first. RATIO ring / Ulysses — informative on a 2-core machine, where four ranks share two
         cores and the ring's blocking exchanges wait on each other (target: none yet; a GPU run decides).
  bytes  what each link carries per layer and rank, counted inside MPI (tools/bench/a2a_bytes): the all-to-alls inside
         the Ulysses groups and the ring's K/V blocks, each against its theory (docs/training.md) — RATIO target 1.000;
         and, for SP = 32 as pure Ulysses against Ulysses 8 × ring 4 at Llama-3.1-8B's shape (32 heads, 8 KV heads,
         head_dim 128) at 1M tokens in bf16, the bytes per layer and rank each link carries by that theory.

usage: tools/bench/ring_bench.py [step|bytes|all] [--build build] [--repeat 3]
Every rank is a process on this machine (mpiexec, oversubscribed on small machines): medians and ratios only.
"""
import argparse
import json
import pathlib
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from train_bench import llama_config, pack  # noqa: E402

VOCAB = 4096
MODEL = {**llama_config(256, 4, 8, 2, 688), "vocab_size": VOCAB}


def step_seconds(a, work, data, config, ring, tag):
    out = work / f"run-{tag}"
    subprocess.run(["mpiexec", "-n", "4", f"{a.build}/src/train/ulysses-train", "--data", str(data), "--model-config",
                    str(config), "--output", str(out), "--sp", "4", "--sp-ring", str(ring), "--steps",
                    str(a.repeat + 1), "--threads", "1", "--save-every", "0", "--overwrite", "--device", "cpu"],
                   check=True, capture_output=True)
    metrics = [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines()]
    return statistics.median([m["seconds"] for m in metrics if "seconds" in m][1:])   # the first step warms up


def bench_step(a, work):
    config = work / "model.json"
    config.write_text(json.dumps(MODEL))
    data = pack(a.build, work, "step", 4096, a.repeat + 2, 8, VOCAB)   # --sp 8 alignment: S % (2 × 4) == 0
    times = {}
    for ring, tag in ((1, "Ulysses 4"), (2, "Ulysses 2 × ring 2"), (4, "ring 4")):
        times[tag] = step_seconds(a, work, data, config, ring, f"r{ring}")
        print(f"SP=4 {tag}: median step {times[tag]:.2f} s")
    for tag in ("Ulysses 2 × ring 2", "ring 4"):
        print(f"RATIO step time {tag} / Ulysses 4 (SP=4, S=4096) = {times[tag] / times['Ulysses 4']:.2f}  "
              f"(informative on 2 cores: no target yet)")


def bench_bytes(a, work):
    for name, kv in (("MHA", 8), ("MQA", 1)):
        path = work / f"bytes-{kv}.json"
        path.write_text(json.dumps(llama_config(256, 2, 8, kv, 688)))
        for ring in (2, 4):
            out = subprocess.run(["mpiexec", "-n", "4", f"{a.build}/tools/bench/a2a_bytes", str(path), "4096",
                                  str(ring)], check=True, capture_output=True, text=True).stdout
            print(f"{name}, SP 4 ring {ring}: " + out.strip())
    # Llama-3.1-8B at 1M tokens, SP 32 over 4 nodes of 8, bf16: bytes per layer and rank on each link (forward +
    # backward, no recomputation), by the theory the counts above confirm
    S, H, Hkv, D, P, elem = 1 << 20, 32, 8, 128, 32, 2
    for U, R in ((32, 1), (8, 4)):
        a2a = 2 * S / P * (2 * H + 2 * max(Hkv, U)) * D * (U - 1) / U * elem
        block = 2 * S / R * max(Hkv, U) / U * D
        ring = (2 * (R - 1) * block * elem + R * block * 4) if R > 1 else 0
        inter_node = a2a * (1 - 8 / U) / (1 - 1 / U) if U > 8 else 0   # the all-to-all's share to other nodes
        print(f"Llama-3.1-8B S=1M SP=32 as U {U} × R {R}: all-to-alls {a2a / 2**20:.0f} MiB per layer and rank "
              f"({inter_node / 2**20:.0f} MiB of it across nodes), ring {ring / 2**20:.0f} MiB (all across nodes)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", nargs="?", default="all", choices=["step", "bytes", "all"])
    ap.add_argument("--build", default="build")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = pathlib.Path(tmp)
        if a.what in ("bytes", "all"):
            bench_bytes(a, work)
        if a.what in ("step", "all"):
            bench_step(a, work)


if __name__ == "__main__":
    main()
