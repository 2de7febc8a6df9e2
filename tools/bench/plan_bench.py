#!/usr/bin/env python3
"""The planner's prediction error: predicted / measured peak memory per rank, over a grid of real runs.

On this machine (CPU, fp32): a profile is calibrated first (ulysses-train --calibrate-memory at --calibrate
lengths), then memory_bench's model (Llama-3.1-8B's ratios scaled down) trains 2 steps at every S of --lengths ×
{plain, all features: checkpointing + TiledMLP + tiled logits (both replicated), sharded with the optimizer and
parameters offloaded, attention in 2 head groups, TiledMLP and tiled logits, all prefetched as on a GPU, LoRA
(rank 16, all-linear) with checkpointing, TiledMLP and tiled logits (SP 1 only, its worst point), a ring of 2 with
checkpointing, TiledMLP and tiled logits (SP 2 only)} × {SP 1, SP 2}, and the plain set also at every S of
--plain-lengths (where whole activations bind: the test plan_prediction runs every set at 2K and the plain one at
8K too, as at 8K the other sets' peaks are within 6% of their 2K ones); each run's peak RSS
per rank (the largest rank's, from its metrics) is compared with ulysses-plan --json's prediction for the same flags. Runs use
memory_bench's glibc settings (docs/planning.md: CPU peaks and glibc). Prints every point and

  RATIO predicted/measured peak, median over the grid = 0.99  (target 0.9-1.1)
  RATIO predicted/measured peak, worst point = 0.92  (target 0.85-1.15)

--gpu, the GPU half (one GPU): a Llama-3.2-1B-shaped model (gpu_bench's, random init) in bf16. A profile is
calibrated on the GPU first (--calibrate lengths; written to --save-profile when given, for src/plan/profile.cpp's
h100/h200 entries). Then, with the memory features of slurm/train_1m.sbatch (optimizer and every layer input
offloaded, TiledMLP, tiled logits; --prefetch as given, default auto = on), each of --gpu-lengths trains 2 steps
and its peak GPU memory (the caching allocator's high-water mark, from metrics.jsonl) is compared with the plan's
device bytes. Then the plan's longest length is compared with the longest that really runs, on the plain path
(whose limit, ~21K tokens on 80 GB, is found in a minute; the sbatch's features reach ~676K, where one step takes
minutes): from the plan's length, runs 15% longer (or shorter) until one runs and one does not, then bisection to
2%. Last, the middle length again with the other --prefetch (the side streams' overlap). Every run passes
--ignore-memory-plan (what fits is measured, not planned) and --save-every -1; --time-limit bounds all of it, and
what it leaves out is said. Prints

  RATIO predicted/measured peak GPU memory, median over the lengths = ...  (target 0.9-1.1)
  RATIO predicted longest / longest that runs = ...  (target 0.85-1.15)
  RATIO step time prefetch off/on = ...  (target >= 1.0)

--gpu --smoke runs the same code on the CPU (tiny Llama, fp32, short lengths, the built-in cpu profile, prefetch on,
the search capped at 2048 tokens) so CI keeps it working; it exits 1 when the losses with prefetch on and off differ
(they must agree on the CPU; on a GPU the difference is printed).

The calibrated profile is kept in --build (plan_bench-profile-KEY.json, KEY the XXH3 of the trainer's binary, the
model, the lengths and the threads), so a second run on the same build skips the calibration; --recalibrate forces it.

usage: tools/bench/plan_bench.py [--build build] [--lengths 2048,8192,32768] [--plain-lengths S,...]
                                 [--calibrate 1024,4096] [--recalibrate]
                                 [--check TOL]   (exit 1 when a point is off by more than TOL: tests use 0.15)
       tools/bench/plan_bench.py --gpu [--build build] [--gpu-lengths 16384,32768,65536] [--save-profile F]
                                 [--time-limit S]
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

import xxhash

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from memory_bench import CONFIG, MALLOC, pack  # noqa: E402   # the same model, malloc settings and data
from gpu_bench import failure_status_of, llama_1b_config, smoke_config  # noqa: E402   # the GPU benchmark's model

ALL_FEATURES = ["--sharding", "no_shard", "--activation-checkpointing", "--tiled-mlp", "--logits-chunk-tokens",
                "256"]
# sharded (full_shard over the SP ranks) with the optimizer and parameters offloaded and attention in 2 head groups,
# issued ahead as on a GPU (--prefetch on: the next unit's gathers, the next head group's projections and all-to-all)
GROUPED_OFFLOAD = ["--offload-params", "--attention-head-groups", "2", "--tiled-mlp", "--logits-chunk-tokens", "256",
                   "--prefetch", "on"]
# LoRA on every projection over the frozen base (replicated), checkpointed, TiledMLP and tiled logits
LORA = ["--lora-rank", "16", "--lora-targets", "all-linear", "--activation-checkpointing", "--tiled-mlp",
        "--logits-chunk-tokens", "256"]
# SP 2 as a ring of 2 (--sp-ring: Ulysses 1 × ring 2), checkpointed, TiledMLP and tiled logits
RING = ["--sp-ring", "2", "--sharding", "no_shard", "--activation-checkpointing", "--tiled-mlp",
        "--logits-chunk-tokens", "256"]
FEATURE_SETS = (("plain", ["--sharding", "no_shard"], (1, 2)), ("all", ALL_FEATURES, (1, 2)),
                ("G2+offload", GROUPED_OFFLOAD, (1, 2)), ("LoRA", LORA, (1,)),   # LoRA's worst point is SP 1
                ("ring", RING, (2,)))


def run(cmd):
    p = subprocess.run(list(map(str, cmd)), capture_output=True, text=True, env=dict(os.environ, **MALLOC))
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(map(str, cmd))}\n{p.stderr[-2000:]}")
    return p


def measured(a, work, data, sp, name, features):
    out = work / f"run-{sp}-{name}-{data.name}"
    run(["mpiexec", "-n", sp, f"{a.build}/src/train/ulysses-train", "--data", data, "--model-config",
         work / "config.json", "--output", out, "--sp", sp, "--steps", 2, "--threads", max(1, a.threads // sp),
         *features])
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return max(m["peak_rss_mib"] for m in metrics) * 2**20


def cpu_profile(a, work):
    """The profile of --calibrate-memory on this build: from the build's cache when its key matches (the trainer's
    binary, the model, the lengths, the threads), else calibrated now and cached."""
    core = pathlib.Path(a.build) / "src/train/ulysses-train-core"
    key = xxhash.xxh3_64_hexdigest(core.read_bytes() + json.dumps([CONFIG, a.calibrate, a.threads]).encode())
    cache = pathlib.Path(a.build) / f"plan_bench-profile-{key}.json"
    if cache.exists() and not a.recalibrate:
        print(f"profile: {cache} (calibrated before by this build; --recalibrate to measure again)")
        return cache
    profile = work / "profile.json"
    t0 = time.monotonic()
    run([f"{a.build}/src/train/ulysses-train", "--calibrate-memory", profile, "--model-config",
         work / "config.json", "--calibrate-lengths", a.calibrate, "--threads", a.threads])
    print(f"profile: calibrated in {time.monotonic() - t0:.0f} s, kept as {cache}")
    shutil.copy(profile, cache)
    return profile


def predicted(a, work, profile, S, sp, features):
    p = run([f"{a.build}/src/plan/ulysses-plan", "--model", work / "config.json", "--device", "cpu",
             "--gpus-per-node", sp, "--sp", sp, "--seq-len", S, "--profile", profile, *features, "--json"])
    return json.loads(p.stdout)["memory_per_rank"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--lengths", default="2048,8192,32768")
    ap.add_argument("--plain-lengths", default="", help="more lengths for the plain set alone")
    ap.add_argument("--recalibrate", action="store_true", help="calibrate even when the build holds this profile")
    ap.add_argument("--calibrate", help="calibration lengths (default 1024,4096; --gpu: 2048,8192)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--check", type=float, default=0, help="exit 1 when |ratio - 1| > this at any point")
    ap.add_argument("--gpu", action="store_true", help="the GPU half (see above)")
    ap.add_argument("--gpu-lengths", default="16384,32768,65536")
    ap.add_argument("--prefetch", default="auto", choices=["auto", "on", "off"])
    ap.add_argument("--save-profile", help="--gpu: keep the calibrated profile here")
    ap.add_argument("--profile", help="--gpu: use this profile (a file or a built-in name) instead of calibrating "
                    "(--smoke: cpu, as the tiny model's peaks are all fixed cost)")
    ap.add_argument("--time-limit", type=float, default=480,
                    help="--gpu: seconds for all of it (what is left when it ends is reported as not reached)")
    ap.add_argument("--smoke", action="store_true", help="--gpu's code on the CPU, tiny and short")
    a = ap.parse_args()
    if a.gpu:
        return gpu_main(a)
    a.calibrate = a.calibrate or "1024,4096"
    lengths = [int(x) for x in a.lengths.split(",")]
    print(f"model: memory_bench's ({CONFIG['hidden_size']} hidden, {CONFIG['num_hidden_layers']} layers, vocab "
          f"{CONFIG['vocab_size']}); CPU fp32, {a.threads} threads; malloc {MALLOC}")
    plain_only = [int(x) for x in a.plain_lengths.split(",") if x]
    with tempfile.TemporaryDirectory() as tmp:
        work = pathlib.Path(tmp)
        (work / "config.json").write_text(json.dumps(CONFIG))
        profile = cpu_profile(a, work)
        p = json.loads(profile.read_text())
        print(f"calibrated at {a.calibrate}: saved {p['saved_factor']:.3f}, work {p['work_factor']:.3f}, mlp {p['mlp_factor']:.3f}, "
              f"loss {p['loss_factor']:.3f}, fixed {p['host_fixed'] / 2**20:.0f} MiB")
        ratios = []
        points = [(S, fs) for S in lengths for fs in FEATURE_SETS] + [(S, FEATURE_SETS[0]) for S in plain_only]
        data = {}
        for S, (name, features, degrees) in points:
            data[S] = data.get(S) or pack(a, work, S)
            for sp in degrees:
                t0 = time.monotonic()
                m = measured(a, work, data[S], sp, name, features)
                r = predicted(a, work, profile, S, sp, features) / m
                ratios.append(r)
                print(f"  S={S:6d} {name:>10} SP {sp}: measured {m / 2**20:8.1f} MiB, predicted/measured {r:.3f}  "
                      f"({time.monotonic() - t0:.0f} s)", flush=True)
    print(f"RATIO predicted/measured peak, median over the grid = {statistics.median(ratios):.3f}  (target 0.9-1.1)")
    worst = max(ratios, key=lambda r: abs(r - 1))
    print(f"RATIO predicted/measured peak, worst point = {worst:.3f}  (target 0.85-1.15)")
    print("GPU part: run with --gpu on a machine with a GPU (tools/bench/plan_bench.py --gpu)")
    if a.check and abs(worst - 1) > a.check:
        sys.exit(f"check: the worst point is off by {abs(worst - 1):.1%} (> {a.check:.0%})")


# --- the GPU half ---

GPU_FEATURES = ["--offload-optimizer", "--offload-checkpoints", "-1", "--tiled-mlp", "--tiled-logits"]
# The longest-length search runs the plain path: its limit (~21K tokens for the 1B shape on 80 GB) is found in a
# minute, where the sbatch's features reach ~676K tokens and a single step there takes minutes.
SEARCH_FEATURES = []
TIMEOUT = "timeout"   # train_once: the deadline came first (not a measurement)
FAILED = "failed"     # train_once: the run failed otherwise than out of memory (not a measurement either)


def gpu_setup(a):
    """(device, precision, config, peak key) of --gpu, or of its CPU smoke run."""
    if a.smoke:
        return "cpu", "fp32", smoke_config(8192), "peak_rss_mib"
    return "cuda", "bf16", llama_1b_config(1 << 22), "peak_gpu_mib"


def packed(a, work, cfg, S):
    """memory_bench's documents of S tokens for this model's vocabulary, packed once per length."""
    out = work / f"data-{S}"
    return out if out.exists() else pack(a, work, S, vocab=cfg["vocab_size"])


def train_once(a, work, setup, S, prefetch, features):
    """2 steps at S, with no checkpoint and no refusal by the plan (--ignore-memory-plan: what fits is measured, not
    planned): (peak MiB, the second step's seconds, losses); None when it runs out of memory; FAILED when it fails
    otherwise; TIMEOUT when the deadline (--time-limit) came first."""
    device, precision, cfg, key = setup
    left = a.deadline - time.monotonic()
    if left < 5:
        return TIMEOUT
    out = work / f"run-{S}-{prefetch}"
    cmd = [f"{a.build}/src/train/ulysses-train", "--data", packed(a, work, cfg, S), "--model-config",
           work / "config.json", "--output", out, "--overwrite", "--steps", 2, "--save-every", -1,
           "--ignore-memory-plan", "--device", device, "--precision", precision, "--prefetch", prefetch, "--threads",
           a.threads, *features]
    try:
        p = subprocess.run(list(map(str, cmd)), capture_output=True, text=True, env=dict(os.environ, **MALLOC),
                           timeout=left)
        if p.returncode != 0:
            status, why = failure_status_of(p.returncode, p.stderr)
            print(f"    S={S}: {'out of memory' if status == 'OOM' else 'FAILED'}: {why[:200]}", flush=True)
            return None if status == "OOM" else FAILED
        steps = [m for m in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if "loss" in m]
        return max(m[key] for m in steps), steps[-1]["seconds"], [m["loss"] for m in steps]
    except subprocess.TimeoutExpired:
        print(f"    S={S}: stopped at the deadline (--time-limit)", flush=True)
        return TIMEOUT
    finally:
        shutil.rmtree(out, ignore_errors=True)


def plan_device_bytes(a, work, setup, profile, features, S=None):
    """The plan's bytes per rank at S (device, or on the CPU the rank's), or its longest length when S is None."""
    device, precision, _, _ = setup
    cmd = [f"{a.build}/src/plan/ulysses-plan", "--model", work / "config.json", "--device", device, "--nodes", 1,
           "--gpus-per-node", 1, "--sp", 1, "--precision", precision, "--profile", profile, "--prefetch", a.prefetch,
           *features, "--json"]
    if device == "cuda":
        cmd += ["--gpu-memory", gpu_memory()]
    if S is not None:
        cmd += ["--seq-len", S]
    p = subprocess.run(list(map(str, cmd)), capture_output=True, text=True)
    plan = json.loads(p.stdout)
    return plan["longest"] if S is None else plan["memory_per_rank"]


def gpu_memory():
    p = subprocess.run(["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits", "-i", "0"],
                       capture_output=True, text=True, check=True)
    return f"{int(p.stdout.split()[0])}MiB"


def longest_that_runs(a, work, setup, planned, cap):
    """From the plan's longest length (at most `cap`): up by 15% while runs succeed, down by 15% while they fail,
    then bisection to 2%: (longest that ran, shortest that did not), either None where the deadline or the cap left
    that side open."""
    def aligned(S):
        return max(64, int(S) // 64 * 64)

    ok, bad, S = None, None, aligned(min(planned, cap))
    while ok is None or bad is None:
        got = train_once(a, work, setup, S, a.prefetch, SEARCH_FEATURES)
        if got in (TIMEOUT, FAILED):
            return ok, bad
        print(f"  search S={S:8d}: {'did not run' if got is None else f'ran, peak {got[0]:.0f} MiB'}", flush=True)
        if got is None:
            bad, S = S, aligned(S / 1.15)
        else:
            ok, S = S, max(S + 64, aligned(S * 1.15))
        if ok is None and S >= bad or bad is None and S > cap:
            return ok, bad
    while bad - ok > max(64, ok // 50):
        mid = aligned((ok + bad) // 2)
        if mid <= ok:
            break
        got = train_once(a, work, setup, mid, a.prefetch, SEARCH_FEATURES)
        if got in (TIMEOUT, FAILED):
            break
        print(f"  search S={mid:8d}: {'did not run' if got is None else f'ran, peak {got[0]:.0f} MiB'}", flush=True)
        ok, bad = (ok, mid) if got is None else (mid, bad)
    return ok, bad


def calibrated_profile(a, work, setup):
    """The profile the plan uses: calibrated on this device (the default), or the one named."""
    device, precision, _, _ = setup
    named = a.profile or ("cpu" if a.smoke else None)
    if named:
        print(f"profile: {named} (not calibrated here)")
        return named
    profile = pathlib.Path(a.save_profile) if a.save_profile else work / "profile.json"
    calibrate = a.calibrate or "2048,8192"
    cmd = [f"{a.build}/src/train/ulysses-train", "--calibrate-memory", profile, "--model-config", work / "config.json",
           "--calibrate-lengths", calibrate, "--device", device, "--precision", precision, "--threads", a.threads]
    try:   # killed at the deadline, its training run ends with it (the trainer's child asks for SIGKILL then)
        p = subprocess.run(list(map(str, cmd)), capture_output=True, text=True,
                           timeout=max(1.0, a.deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        sys.exit(f"the calibration did not finish within --time-limit {a.time_limit:g} s")
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(map(str, cmd))}\n{p.stderr[-2000:]}")
    p = json.loads(profile.read_text())
    print(f"calibrated at {calibrate}: saved {p['saved_factor']:.3f}, work {p['work_factor']:.3f}, "
          f"mlp {p['mlp_factor']:.3f}, loss {p['loss_factor']:.3f}, fixed {p['device_fixed'] / 2**20:.0f} "
          f"MiB device, {p['host_fixed'] / 2**20:.0f} MiB host", flush=True)
    return profile


def gpu_main(a):
    a.deadline = time.monotonic() + a.time_limit
    setup = gpu_setup(a)
    device, precision, cfg, key = setup
    if a.prefetch == "auto":   # as the trainer resolves it; the smoke run prefetches, to keep that path working
        a.prefetch = "on" if device == "cuda" or a.smoke else "off"
    if a.smoke:
        print("smoke run on the CPU: the code path only; its numbers measure nothing")
    lengths = [256, 512, 1024] if a.smoke else [int(x) for x in a.gpu_lengths.split(",")]
    print(f"model: {cfg['hidden_size']} hidden, {cfg['num_hidden_layers']} layers, vocab {cfg['vocab_size']}; "
          f"{device} {precision}; features {' '.join(GPU_FEATURES)} --prefetch {a.prefetch}; --time-limit "
          f"{a.time_limit:g} s for all of it", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        work = pathlib.Path(tmp)
        (work / "config.json").write_text(json.dumps(cfg))
        profile = calibrated_profile(a, work, setup)
        ratios, timed = [], {}
        for S in lengths:
            got = train_once(a, work, setup, S, a.prefetch, GPU_FEATURES)
            if got is None or got in (TIMEOUT, FAILED):
                print(f"  S={S}: {'not reached' if got == TIMEOUT else 'did not run (see above)'}; left out")
                continue
            peak, seconds, losses = got
            timed[S] = (seconds, losses)
            r = plan_device_bytes(a, work, setup, profile, GPU_FEATURES, S) / (peak * 2**20)
            ratios.append(r)
            print(f"  S={S:8d}: peak {peak:9.0f} MiB, {seconds:7.2f} s a step, predicted/measured {r:.3f}", flush=True)
        if ratios:
            print(f"RATIO predicted/measured peak GPU memory, median over the lengths = {statistics.median(ratios):.3f}"
                  f"  (target 0.9-1.1; {len(ratios)} lengths)", flush=True)
        planned = plan_device_bytes(a, work, setup, profile, SEARCH_FEATURES)
        cap = 2048 if a.smoke else 1 << 23
        print(f"longest length, plain path ({' '.join(SEARCH_FEATURES) or 'no memory features'}): the plan says "
              f"{planned}", flush=True)
        ran, failed = longest_that_runs(a, work, setup, planned, cap)
        if ran and failed:
            print(f"RATIO predicted longest / longest that runs = {planned / ran:.3f}  (target 0.85-1.15; {ran} ran, "
                  f"{failed} did not; the plan says {planned})", flush=True)
        else:
            print(f"longest that runs: {f'>= {ran}' if ran else '?'}{f', < {failed}' if failed else ''} (the deadline, "
                  f"a failure or the cap of {cap} tokens ended the search); the plan says {planned}", flush=True)
        prefetch_timing(a, work, setup, lengths, timed)


def prefetch_timing(a, work, setup, lengths, timed):
    """The middle length again with the other --prefetch: step time off/on; the losses should agree (on the CPU
    they must: the smoke run exits 1 when they do not)."""
    mid = lengths[len(lengths) // 2]
    other = "off" if a.prefetch == "on" else "on"
    got = train_once(a, work, setup, mid, other, GPU_FEATURES) if mid in timed else None
    if got is None or got in (TIMEOUT, FAILED):
        print(f"step time prefetch off/on: not measured (S={mid} with --prefetch "
              f"{a.prefetch if mid not in timed else other} {'was not reached' if got == TIMEOUT else 'did not run'})")
        return
    worst = max(abs(x - y) / abs(y) for x, y in zip(got[2], timed[mid][1]))
    on, off = (timed[mid][0], got[1]) if other == "off" else (got[1], timed[mid][0])
    print(f"RATIO step time prefetch off/on = {off / on:.3f}  (target >= 1.0; S={mid}; losses "
          f"{'agree' if worst <= 1e-6 else f'differ by {worst:.1e} relative'})")
    if a.smoke and worst > 1e-6:
        sys.exit(f"prefetch on and off gave different losses at S={mid}: {got[2]} vs {timed[mid][1]}")


if __name__ == "__main__":
    main()
