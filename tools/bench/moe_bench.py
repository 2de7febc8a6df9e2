#!/usr/bin/env python3
"""Mixture-of-experts benchmarks on CPU (issue 60), each against an anchor measured in the same run. The model: a
Qwen3-MoE shaped so that the routed MLP binds — hidden 256, 4 layers, 4 heads of 64 (1 KV head), 16 experts of 512,
top 4 — whose routed intermediate is k·(4·I + 2·hidden) = 10240 elements a token per layer, several times the rest of
a layer's (docs/planning.md, the routed MLP's rows).

  memory  2 steps with --activation-checkpointing and tiled logits at two lengths S1 < S2, with and without
          --tiled-mlp; the marginal bytes per token of the step's peak RSS, (peak(S2) - peak(S1)) / (S2 - S1), so the
          fixed costs (weights, optimizer, runtime) cancel:
            RATIO marginal bytes per token untiled/tiled = ...  (target >= 4)
          and each run's peak against ulysses-plan --json's prediction for the same flags, with the profile that
          plan_bench.py calibrates on its dense Llama (the routed MLP's count is counted, not fitted):
            RATIO predicted/measured peak (MoE), median = ...  (target 0.9-1.1)
  step    our training step against transformers' Qwen3MoeForCausalLM (its Qwen3MoeSparseMoeBlock: a loop over the
          experts hit, as ours) + torch AdamW(foreach) + clipping, on the same model, batch, sequence and threads:
            RATIO step time ours/transformers = ...  (target <= 1.0)

usage: tools/bench/moe_bench.py [memory|step|all] [--build build] [--lengths 16384,32768] [--threads 2] [--repeat 5]
Medians over --repeat; the machine is noisy, so compare ratios, not absolute times.
"""
import argparse
import json
import pathlib
import statistics
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from memory_bench import CONFIG as DENSE, pack  # noqa: E402   # plan_bench's calibration model and its data
from plan_bench import cpu_profile, measured, predicted, run  # noqa: E402
from train_bench import hf_step_seconds  # noqa: E402   # transformers' step as HF Trainer runs it

MOE = dict(DENSE, architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe", num_experts=16,
           num_experts_per_tok=4, moe_intermediate_size=512, norm_topk_prob=True, decoder_sparse_step=1,
           mlp_only_layers=[], use_sliding_window=False, output_router_logits=False)
for key in ("attention_bias", "mlp_bias"):
    MOE.pop(key)
CHECKPOINTED = ["--sharding", "no_shard", "--activation-checkpointing", "--logits-chunk-tokens", "256"]
SIDES = (("untiled", CHECKPOINTED), ("tiled", CHECKPOINTED + ["--tiled-mlp"]))


def bench_memory(a, root):
    dense, moe = root / "dense", root / "moe"
    for folder, config in ((dense, DENSE), (moe, MOE)):
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps(config))
    profile = cpu_profile(a, dense)   # plan_bench's calibration (cached in the build)
    S1, S2 = (int(x) for x in a.lengths.split(","))
    peaks, ratios = {}, []
    for S in (S1, S2):
        data = pack(a, moe, S)
        for side, flags in SIDES:
            t0 = time.monotonic()
            peaks[side, S] = measured(a, moe, data, 1, side, flags)
            ratios.append(predicted(a, moe, profile, S, 1, flags) / peaks[side, S])
            print(f"  S={S:6d} {side:>8}: peak RSS {peaks[side, S] / 2**20:8.1f} MiB, predicted/measured "
                  f"{ratios[-1]:.3f}  ({time.monotonic() - t0:.0f} s)", flush=True)
    per_token = {side: (peaks[side, S2] - peaks[side, S1]) / (S2 - S1) for side, _ in SIDES}
    for side, _ in SIDES:
        print(f"memory: {side}: {per_token[side] / 1024:.1f} KiB a token between S={S1} and S={S2}")
    print(f"RATIO marginal bytes per token untiled/tiled = {per_token['untiled'] / per_token['tiled']:.2f}  "
          "(target >= 4)")
    print(f"RATIO predicted/measured peak (MoE), median = {statistics.median(ratios):.3f}  (target 0.9-1.1; "
          f"worst {max(ratios, key=lambda r: abs(r - 1)):.3f})")


def bench_step(a, root):
    folder = root / "step"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(MOE))
    S, steps = a.step_len, a.repeat + 2
    data = pack(a, folder, S)
    out = folder / "run"
    run(["mpiexec", "-n", 1, f"{a.build}/src/train/ulysses-train", "--data", data, "--model-config",
         folder / "config.json", "--output", out, "--steps", steps, "--threads", a.threads, "--lr", "1e-4",
         "--clip", "1.0", "--save-every", -1])
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    ours = statistics.median(m["seconds"] for m in metrics[2:])

    import torch
    import transformers
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    config = transformers.AutoConfig.for_model(**MOE)
    config._attn_implementation = "sdpa"
    model = transformers.AutoModelForCausalLM.from_config(config)
    theirs = hf_step_seconds(model, torch.randint(0, MOE["vocab_size"], (1, S)), steps)
    params = sum(p.numel() for p in model.parameters())
    print(f"step: Qwen3-MoE {params / 1e6:.1f}M params (16 experts, top 4), S={S}, batch 1, {a.threads} threads: "
          f"ours {ours * 1e3:.0f} ms, transformers {theirs * 1e3:.0f} ms (medians of {a.repeat})")
    print(f"RATIO step time ours/transformers (MoE) = {ours / theirs:.2f}  (target <= 1.0)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", nargs="?", default="all", choices=["memory", "step", "all"])
    ap.add_argument("--build", default="build")
    ap.add_argument("--lengths", default="16384,32768", help="S1,S2 of the memory benchmark")
    ap.add_argument("--step-len", type=int, default=2048)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--calibrate", default="1024,4096", help="plan_bench's calibration lengths")
    ap.add_argument("--recalibrate", action="store_true")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        if a.what in ("memory", "all"):
            bench_memory(a, root)
        if a.what in ("step", "all"):
            bench_step(a, root)


if __name__ == "__main__":
    main()
