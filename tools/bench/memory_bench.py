#!/usr/bin/env python3
"""Bytes per token of one training rank, ours against transformers and against ALST's own memory stack.

Model: Llama-3.1-8B's ratios scaled down (hidden 256, intermediate 896, 4 layers, 4 heads, 1 KV head, head_dim 64,
vocab 32000), one document of S tokens per sequence, 2 optimizer steps, fp32 on CPU, the same glibc malloc
settings (MALLOC_MMAP_THRESHOLD_/MALLOC_TRIM_THRESHOLD_) for every side. Each side's peak RSS (VmHWM of the
process; ours: the largest rank's) is measured at every --lengths S and fitted as peak = a + b·S: b is what each
extra token costs a rank (the primary figure), a the fixed cost (reported apart, not folded into the ratios).
The fit must be linear (its worst residual is printed): nothing may grow as S². Each b is printed with its
standard error.

Sides (each in its own process):
  A      transformers + gradient_checkpointing_enable() — what HF users run
  B      A + ALST's TiledMLP and TiledFusedLogitsLoss from the deepspeed package (its memory stack)
  off    ours, SP=1, no memory feature (today's default path)
  C      ours, SP=1, --activation-checkpointing --tiled-mlp --logits-chunk-tokens N
  D      ours, SP=4 (4 ranks), the same features, per rank, at --d-scale (4) times each length: each rank then
         holds as many tokens as C's one, so D's slope (a quarter of C's per token of S) stands above allocator
         noise, as it did not at C's lengths
  G4     C with --attention-head-groups 4: each layer's attention in 4 groups of one query head (sharing the one
         KV head), recomputed group by group
  amp    ours, SP=1, every feature of C and every layer input offloaded (--offload-checkpoints -1), --precision
         amp-bf16 (autocast over fp32: the residual stream and the kept inputs fp32)
  bf16   the same, --precision bf16 (the model in bf16)
B and C use the same loss chunk (--loss-chunk tokens). RATIO lines: b_A/b_C (target >= 5), b_B/b_C (target >= 1.2),
b_C/b_D (target >= 3.5), b_C/b_G4 (target >= 0.95, derived from this run's tensor counts: at these lengths a step's
peak is the loss chunk's backward — 512 rows of 32000 logits, ~170 MB by the cpu profile, beside the tensors that
grow with S — and what it holds per token does not depend on G: the counts give 1.00. Past the lengths where a
layer's backward peaks instead, the CPU's attention still holds about as much at G = 1 as a group's whole tensors at
G = 4: tests/model/test_working_set.cpp counts 9.4 and 9.3 whole [T, hidden] per token. The attention part's fall
with G is a GPU's, whose attention backward holds more — FlashAttention-2's fp32 dq, K/V gradients expanded to the
query heads: --gpu's RATIO longest sequence C+G4/C+ measures it. ulysses-plan --profile cpu's slopes give 2.00, the
phases summed as a bound and G = 1's heads counted for a GPU's kernels), b_amp/b_bf16 (target >= 1.8), the step time
of C over off at the longest S (target <= 1.4), and of G4 over C at the longest S both ran (target <= 1.1:
attention's forward runs once per pass in groups too). For amp and bf16 the host bytes offloaded per token per layer
(the trainer's checkpoint offload line) are checked against 4·hidden and 2·hidden.
Then S* = (cap - a)/b per side for a --cap-gib cap; with --confirm-cap, each single-process side whose
S* <= 32K runs at 0.9·S* and 1.15·S* under a real cgroup-v1 memory cap (root; said so when unavailable).

usage: tools/bench/memory_bench.py [--build build] [--lengths 2048,4096,8192] [--threads 2] [--loss-chunk 512]
                                   [--cap-gib 4] [--confirm-cap] [--python PY]
B needs `pip install --no-build-isolation deepspeed` (DS_BUILD_OPS=0 DS_ACCELERATOR=cpu) in the Python used;
without it B is reported as not run, with the reason. --smoke (CI) runs S = 512, 1024 with 128-token loss
chunks and exits 1 when a side that can run here did not.

--gpu: the same sides on one GPU (gpu_bench.py's runner: each run in its own process, an OOM a result), a
Llama-3.2-1B shape (random init), the model in bf16 over fp32 masters and AdamW (C+amp: autocast), peak = the
caching allocator's high-water mark (max_memory_allocated; the trainer's peak_gpu_mib is the same counter). From
--gpu-start, S doubles for every side until it runs out of memory (ours: or its memory plan refuses it:
--memory-profile picks the constants), reaches --max-length or would not finish within --time-limit. Sides A, B, C
as above (ours in --precision bf16: the model in bf16), C+ = C with every layer input offloaded to host memory
(--offload-checkpoints -1), and C+amp = C+ in --precision amp-bf16 (autocast over fp32: the path before the bf16
model), C+G4 = C+ with --attention-head-groups 4, and C+auto = C+ with --attention-head-groups auto and
--offload-params (our longest on one GPU). Prints per side the longest S that ran, its tokens/s and peak,
the fit peak = a + b·S over the lengths that ran, and RATIO lines for b_A/b_C, b_B/b_C, the longest lengths
(C+/C+amp: the bf16 model against autocast; C+G4/C+: head groups against all heads at once; C+auto against C+ and
against ALST's B) and the step time of
C+G4 against C+ at the longest length both ran (target <= 1.1). --gpu --smoke runs it on the CPU (tiny Llama, fp32, 256 to 1024 tokens) so CI keeps it working.
"""
import argparse
import json
import os
import pathlib
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 32000, "hidden_size": 256,
          "intermediate_size": 896, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 1,
          "head_dim": 64, "hidden_act": "silu", "max_position_embeddings": 65536, "rms_norm_eps": 1e-5,
          "rope_theta": 500000.0, "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False}
MALLOC = {"MALLOC_MMAP_THRESHOLD_": "131072", "MALLOC_TRIM_THRESHOLD_": "131072"}
SIDES = ["A", "B", "off", "C", "D", "G4", "amp", "bf16"]
PRECISION = {"amp": "amp-bf16", "bf16": "bf16"}   # the bf16 sides' --precision; the others run fp32
# bf16 matmuls on CPUs whose AMX the kernel leaves off (as the tests' environment; docs/training.md)
BF16_ENV = {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16"}
HERE = pathlib.Path(__file__).resolve().parent


def bad_input(line):
    print(f"error: {line}", file=sys.stderr)
    sys.exit(2)


def alst_unavailable(python):
    """Why side B cannot run in `python` (alst_stack.py imports ALST's code from deepspeed), or ""."""
    ds = subprocess.run([python, "-c", "import deepspeed.runtime.sequence_parallel.ulysses_sp"], capture_output=True,
                        text=True)
    said = (ds.stderr.strip().splitlines() or ["no output"])[-1][:200]
    return "" if ds.returncode == 0 else (f"deepspeed is not importable in {python}: {said} (pip install "
                                          "--no-build-isolation deepspeed with DS_BUILD_OPS=0 DS_ACCELERATOR=cpu)")


def pack(a, work, S, vocab=CONFIG["vocab_size"]):
    """Three documents of S random ids below `vocab`, packed for SP 4 (any SP dividing it runs them)."""
    rng = random.Random(S)
    src = work / f"docs-{S}.jsonl"
    with open(src, "w") as f:
        for _ in range(3):
            f.write(json.dumps({"input_ids": [rng.randrange(vocab) for _ in range(S)]}) + "\n")
    out = work / f"data-{S}"
    subprocess.run([f"{a.build}/src/pack/ulysses-pack", "pack", str(src), "-o", str(out), "--seq-len", str(S),
                    "--sp", "4", "--align", "1", "--vocab-size", str(vocab)], check=True,
                   capture_output=True)
    return out


def run_ours(a, work, data, side, S, cgroup=None):
    ranks = 4 if side == "D" else 1
    features = [] if side == "off" else ["--activation-checkpointing", "--tiled-mlp",
                                         "--logits-chunk-tokens", str(a.loss_chunk)]
    features += ["--precision", PRECISION.get(side, "fp32")]   # named: the default (auto) is bf16 on a GPU
    if side in PRECISION:
        features += ["--offload-checkpoints", "-1"]
    if side == "G4":
        features += ["--attention-head-groups", "4"]
    out = work / f"run-{side}-{S}"
    shutil.rmtree(out, ignore_errors=True)
    cmd = ["mpiexec", "-n", str(ranks), f"{a.build}/src/train/ulysses-train", "--data", str(data), "--model-config",
           str(work / "config.json"), "--output", str(out), "--sp", str(ranks), "--steps", "2", "--lr", "1e-4",
           "--threads", str(max(1, a.threads // ranks))] + features
    p = run(cmd, cgroup, BF16_ENV if side in PRECISION else {})
    if p.returncode != 0:
        return {"error": f"exit {p.returncode}: {p.stderr.strip().splitlines()[-1] if p.stderr.strip() else ''}"}
    m = [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines()]
    offloaded = re.findall(r"checkpoint offload: (\d+) bytes of layer inputs", p.stderr)
    return {"peak_rss_mib": max(x["peak_rss_mib"] for x in m), "step_seconds": [x["seconds"] for x in m],
            "offloaded_bytes": int(offloaded[-1]) if offloaded else 0}


def run_hf(a, work, side, S, cgroup=None):
    p = run([a.python, str(HERE / "memory_bench_worker.py"), str(work / "config.json"), str(S), side,
             str(a.loss_chunk), str(a.threads)], cgroup)
    if p.returncode != 0:
        last = p.stderr.strip().splitlines()[-1] if p.stderr.strip() else ""
        return {"error": f"exit {p.returncode}: {last}"}
    return json.loads(p.stdout.strip().splitlines()[-1])


def run(cmd, cgroup, extra_env=None):
    env = dict(os.environ, **MALLOC, **(extra_env or {}))
    join = (lambda: pathlib.Path(cgroup, "cgroup.procs").write_text(str(os.getpid()))) if cgroup else None
    return subprocess.run(cmd, capture_output=True, text=True, env=env, preexec_fn=join)


def fit(points):
    """Least squares peak = a + b·S over [(S, MiB)]: a in MiB, b in KiB per token, worst relative residual, and b's
    standard error in KiB per token (nan with two points: a line through two says nothing of its uncertainty)."""
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    mx, my = statistics.mean(xs), statistics.mean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    a = my - b * mx
    worst = max(abs(a + b * x - y) / y for x, y in zip(xs, ys))
    residuals = sum((a + b * x - y) ** 2 for x, y in zip(xs, ys))
    se = (residuals / (len(xs) - 2) / sxx) ** 0.5 if len(xs) > 2 else float("nan")
    return a, b * 1024, worst, se * 1024


def cap_group(gib):
    base = pathlib.Path("/sys/fs/cgroup/memory")
    if not (base / "cgroup.procs").exists() or os.geteuid() != 0:
        return None, "no cgroup-v1 memory controller writable here (needs root and /sys/fs/cgroup/memory)"
    g = base / f"ulysses-memory-bench-{os.getpid()}"
    g.mkdir(exist_ok=True)
    (g / "memory.limit_in_bytes").write_text(str(int(gib * 2**30)))
    if (g / "memory.memsw.limit_in_bytes").exists():
        (g / "memory.memsw.limit_in_bytes").write_text(str(int(gib * 2**30)))
    return g, ""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--lengths", default="2048,4096,8192")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--loss-chunk", type=int,   # default 512: every rank holds >= one chunk at S=2K, SP=4
                    help="tokens per loss chunk of B and C (default 512; --smoke 128; --gpu 2048)")
    ap.add_argument("--d-scale", type=int, help="D (SP 4) runs at this many times each length, so that each of its "
                    "ranks holds as many tokens as C's one and its slope stands above allocator noise (default 4; "
                    "--smoke 1)")
    ap.add_argument("--cap-gib", type=float, default=4.0)
    ap.add_argument("--confirm-cap", action="store_true")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--smoke", action="store_true", help="tiny lengths; exit 1 if a side fails (CI)")
    ap.add_argument("--sides", default=",".join(SIDES),
                    help=f"the CPU sides to run, comma-separated (default all: {','.join(SIDES)}); e.g. amp,bf16")
    ap.add_argument("--gpu", action="store_true", help="the sides on one GPU, doubling S until each no longer fits")
    ap.add_argument("--gpu-start", type=int, default=16384, help="--gpu: the first length")
    ap.add_argument("--max-length", type=int, default=1 << 23, help="--gpu: the doubling stops here")
    ap.add_argument("--time-limit", type=float, default=480, help="--gpu: seconds for the whole search")
    ap.add_argument("--memory-profile", help="--gpu: ours' planner constants (a --calibrate-memory file)")
    a = ap.parse_args()
    if a.gpu:
        if a.gpu_start < 64 or a.gpu_start % 64 or a.max_length < a.gpu_start:
            return bad_input(f"--gpu-start {a.gpu_start} / --max-length {a.max_length} — HINT: a multiple of 64, "
                             "at most --max-length")
        return gpu_main(a)
    if a.smoke:
        a.lengths, a.loss_chunk = "512,1024", a.loss_chunk or 128
        a.d_scale = a.d_scale or 1
    a.loss_chunk = a.loss_chunk or 512
    a.d_scale = a.d_scale or 4
    lengths = [int(x) for x in a.lengths.split(",")]
    sides = a.sides.split(",")
    if not set(sides) <= set(SIDES):
        return bad_input(f"--sides {a.sides}: unknown side {sorted(set(sides) - set(SIDES))[0]} — HINT: choose from "
                         f"{','.join(SIDES)}")
    b_reason = alst_unavailable(a.python)
    print(f"model: {json.dumps({k: CONFIG[k] for k in ('hidden_size', 'intermediate_size', 'num_hidden_layers', 'num_attention_heads', 'num_key_value_heads', 'head_dim', 'vocab_size')})}")
    print(f"S = {lengths}; 2 steps, fp32 (amp: amp-bf16, bf16: bf16), CPU, {a.threads} threads; loss chunk "
          f"{a.loss_chunk} tokens (B, C, D, amp, bf16); "
          f"malloc {MALLOC}")
    with tempfile.TemporaryDirectory() as tmp:
        work = pathlib.Path(tmp)
        (work / "config.json").write_text(json.dumps(CONFIG))
        res = {s: {} for s in SIDES}
        d_lengths = [S * a.d_scale for S in lengths]
        for S in sorted(set(lengths + d_lengths)):
            data = pack(a, work, S)
            for side in sides:
                if S not in (d_lengths if side == "D" else lengths):
                    continue   # D at the scaled lengths, the others at --lengths
                if side == "B" and b_reason:
                    res[side][S] = {"error": b_reason}
                elif side in ("A", "B"):
                    res[side][S] = run_hf(a, work, side, S)
                else:
                    res[side][S] = run_ours(a, work, data, side, S)
                r = res[side][S]
                print(f"  S={S:6d} {side:>3}: " + (f"peak {r['peak_rss_mib']:8.1f} MiB, step {r['step_seconds'][-1]:.2f} s"
                                                   if "error" not in r else f"not run: {r['error']}"), flush=True)
        fits = {}
        print(f"\n{'side':>4} {'a (MiB)':>9} {'b (KiB/token)':>14} {'± (std. error)':>15} {'worst fit residual':>19} "
              f"{'S* at cap':>10}")
        for side in sides:
            pts = [(S, r["peak_rss_mib"]) for S, r in res[side].items() if "error" not in r]
            if len(pts) < 2:
                print(f"{side:>4}  not fitted: {len(pts)} length(s) ran")
                continue
            fa, fb, worst, se = fit(pts)
            star = (a.cap_gib * 1024 - fa) * 1024 / fb if fb > 0 else float("inf")
            fits[side] = (fa, fb, star)
            print(f"{side:>4} {fa:9.1f} {fb:14.1f} {se:15.2f} {100 * worst:18.1f}% {star:10.0f}")
        print()
        for num, den, target in (("A", "C", ">= 5"), ("B", "C", ">= 1.2"), ("C", "D", ">= 3.5"),
                                 ("C", "G4", ">= 0.95"), ("amp", "bf16", ">= 1.8")):
            if num in fits and den in fits and min(fits[num][1], fits[den][1]) <= 0:
                flat = num if fits[num][1] <= 0 else den
                print(f"RATIO bytes per token {num}/{den}: not measurable ({flat}'s peak does not grow over these lengths)")
            elif num in fits and den in fits:
                print(f"RATIO bytes per token {num}/{den} = {fits[num][1] / fits[den][1]:.2f}  (target {target})")
            else:
                print(f"RATIO bytes per token {num}/{den}: not measured ({num if num not in fits else den} did not run)")
        offload_mismatch = check_offloaded(res)
        both = [S for S in lengths if "error" not in res["C"].get(S, {"error": "not run"})
                and "error" not in res["off"].get(S, {"error": "not run"})]
        if both:
            S = max(both)
            t = res["C"][S]["step_seconds"][-1] / res["off"][S]["step_seconds"][-1]
            print(f"RATIO step time everything on/off at S={S} = {t:.2f}  (target <= 1.4)")
        grouped = [S for S in lengths if "error" not in res["C"].get(S, {"error": "not run"})
                   and "error" not in res["G4"].get(S, {"error": "not run"})]
        if grouped:   # attention in 4 head groups against all heads at once, at the longest length both ran
            S = max(grouped)
            t = res["G4"][S]["step_seconds"][-1] / res["C"][S]["step_seconds"][-1]
            print(f"RATIO step time G4/C at S={S} = {t:.2f}  (target <= 1.1)")
        if a.confirm_cap:
            confirm(a, work, fits)
        else:
            print(f"S* under a real {a.cap_gib:g} GiB cap: not confirmed in this run (--confirm-cap)")
        failed = [f"{side} at S={S}" for side in sides for S, r in res[side].items()
                  if "error" in r and not (side == "B" and b_reason)]
        if a.smoke and failed:
            sys.exit("smoke: these runs failed: " + ", ".join(failed))
        if offload_mismatch:
            sys.exit("the offloaded layer inputs are not the precision's bytes: " + ", ".join(offload_mismatch))


def check_offloaded(res):
    """Prints the host bytes each bf16 side offloaded per token per layer against 2·hidden (bf16) and 4·hidden
    (amp-bf16: fp32 layer inputs); returns the runs where they differ."""
    h, layers, wrong = CONFIG["hidden_size"], CONFIG["num_hidden_layers"], []
    for side, element in (("amp", 4), ("bf16", 2)):
        for S, r in res[side].items():
            if "error" in r:
                continue
            per = r["offloaded_bytes"] / (S * layers)
            print(f"offloaded per token per layer, {side} at S={S}: {per:g} bytes ({element}·hidden = {element * h})")
            if per != element * h:
                wrong.append(f"{side} at S={S}: {per:g} per token per layer, not {element * h}")
    return wrong


GPU_SIDES = ("A", "B", "C", "C+", "C+amp", "C+G4", "C+auto")


def gpu_main(a):
    """--gpu: doubling S per side on one GPU until it no longer fits (see the module's docstring)."""
    # a SIGTERM (timeout, a job's end) unwinds through Runner.wait, which ends the run in flight (its own session);
    # the search then stops and what ran is reported
    signal.signal(signal.SIGTERM, stop_search)
    sys.path.insert(0, str(HERE))
    from gpu_bench import BenchError, find_python, find_tool

    a.start = time.monotonic()
    a.device, a.precision = ("cpu", "fp32") if a.smoke else ("cuda", "bf16")
    a.warmup, a.steps = 1, 1
    start, top = (256, 1024) if a.smoke else (a.gpu_start, a.max_length)
    chunk = a.loss_chunk if a.loss_chunk else (128 if a.smoke else 2048)
    ours = ["--tiled-mlp", "--logits-chunk-tokens", str(chunk)]
    ours += ["--memory-profile", a.memory_profile] if a.memory_profile else []
    sides = {"A": ("transformers + gradient checkpointing", lambda r, S: r.run_hf(S, True, name="A")),
             "B": ("A + ALST's TiledMLP and tiled loss", lambda r, S: r.run_hf(S, True, chunk, name="B")),
             "C": ("ours: checkpointing, TiledMLP, tiled logits", lambda r, S: r.run_ours(S, None, True, ours, "C")),
             "C+": ("C + every layer input in host memory",
                    lambda r, S: r.run_ours(S, None, True, ours + ["--offload-checkpoints", "-1"], "C+")),
             "C+amp": ("C+ in amp-bf16: autocast over fp32 weights, fp32 layer inputs (the path before the bf16 model)",
                       lambda r, S: r.run_ours(S, None, True, ours + ["--offload-checkpoints", "-1"], "C+amp",
                                               "amp-bf16")),
             "C+G4": ("C+ with each layer's attention in 4 head groups (--attention-head-groups 4)",
                      lambda r, S: r.run_ours(S, None, True,
                                              ours + ["--offload-checkpoints", "-1", "--attention-head-groups", "4"],
                                              "C+G4")),
             "C+auto": ("C+ with --attention-head-groups auto (the least G that fits) and the parameters offloaded",
                        lambda r, S: r.run_ours(S, None, True, ours + ["--offload-checkpoints", "-1",
                                                                      "--attention-head-groups", "auto",
                                                                      "--offload-params"], "C+auto"))}
    try:
        a.train = find_tool(f"{a.build}/src/train/ulysses-train", "ulysses-train", "pass --build BUILD")
        a.pack = find_tool(f"{a.build}/src/pack/ulysses-pack", "ulysses-pack", "pass --build BUILD")
        a.python = find_python(None if a.python == sys.executable else a.python)
        b_reason = alst_unavailable(a.python)
        with tempfile.TemporaryDirectory() as tmp:
            res = gpu_search(a, pathlib.Path(tmp), sides, b_reason, start, top, chunk)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)   # the search is over: a late one must not lose the report
    except BenchError as e:   # no GPU, a missing tool: one line
        return bad_input(str(e))
    except SearchStopped:
        return bad_input("SIGTERM before the search began: nothing to report")
    gpu_report(res, b_reason, a)


class SearchStopped(Exception):
    """A SIGTERM during the --gpu search."""


def stop_search(*_):
    raise SearchStopped()


def gpu_search(a, work, sides, b_reason, start, top, chunk):
    """Doubling S from `start` to `top`, every side still running at each length: {side: {S: result}}."""
    from gpu_bench import Runner, llama_1b_config, smoke_config

    cfg = smoke_config(top) if a.smoke else llama_1b_config(top)
    (work / "config.json").write_text(json.dumps(cfg))
    print(f"device {a.device}, {a.precision}; model {'tiny Llama' if a.smoke else 'Llama-3.2-1B shape'}; "
          f"S from {start}, doubling to {top}; {a.warmup} + {a.steps} steps per run; loss chunk {chunk} (B, C); "
          f"--time-limit {a.time_limit:g} s{'; smoke: the code path only' if a.smoke else ''}")
    for side in GPU_SIDES:
        print(f"  {side:>2}: {sides[side][0]}")
    if b_reason:
        print(f"   B: not run: {b_reason}")
    runner = Runner(a, work, cfg, work / "config.json", dict(os.environ, **BF16_ENV))
    res = {side: {} for side in GPU_SIDES}
    alive = [s for s in GPU_SIDES if not (s == "B" and b_reason)]
    try:
        search(runner, sides, res, alive, start, top)
    except SearchStopped:
        print("  SIGTERM: the search ends here; the report below covers what ran", flush=True)
        for side in alive:   # its next length, as a bound: not reached
            res[side].setdefault(max(res[side]) * 2 if res[side] else start,
                                 {"status": "skipped", "message": "SIGTERM (the time limit of the command)"})
    return res


def search(runner, sides, res, alive, S, top):
    """gpu_search's doubling: fills res, takes out of `alive` each side that stops."""
    from gpu_bench import BenchError, status_cell

    while alive and S <= top:
        for side in list(alive):
            ok, why = runner.fits_in_time(side, S, True)
            try:
                r = sides[side][1](runner, S) if ok else {"status": "skipped", "message": why}
            except BenchError as e:   # this run's tool failed on its own: a result, the other sides go on
                r = {"status": "FAILED", "message": str(e)}
            if r.get("status") == "ok" and r.get("peak_mib") is None:
                r = {"status": "FAILED", "message": "no peak memory in the run's metrics"}
            res[side][S] = r
            if r.get("status") == "ok":
                r["tokens_per_s"] = S / r["step_seconds"][-1]
                print(f"  S={S:8d} {side:>2}: peak {r['peak_mib']:10.1f} MiB, {r['tokens_per_s']:10,.0f} tok/s",
                      flush=True)
            else:
                print(f"  S={S:8d} {side:>2}: {status_cell(r)}: {r.get('message', '')[:160]}", flush=True)
                alive.remove(side)
        S *= 2


def gpu_report(res, b_reason, a):
    fits, longest, where = {}, {}, "CPU smoke" if a.smoke else "GPU"
    print(f"\n{'side':>4} {'longest S':>10} {'tok/s there':>12} {'peak there MiB':>15} {'a (MiB)':>9} "
          f"{'b (KiB/token)':>14}")
    for side in GPU_SIDES:
        ran = {S: r for S, r in res[side].items() if r.get("status") == "ok"}
        if not ran:
            print(f"{side:>4}  nothing ran" + (f" ({b_reason})" if side == "B" and b_reason else ""))
            continue
        top = max(ran)
        longest[side] = top
        fa, fb, _, _ = fit([(S, r["peak_mib"]) for S, r in ran.items()]) if len(ran) >= 2 else (float("nan"),) * 4
        if len(ran) >= 2:
            fits[side] = fb
        print(f"{side:>4} {top:10d} {ran[top]['tokens_per_s']:12,.0f} {ran[top]['peak_mib']:15.1f} {fa:9.1f} "
              f"{fb:14.1f}")
    print()
    for num, den, target in (("A", "C", ">= 5"), ("B", "C", ">= 1.2")):
        if num in fits and den in fits and min(fits[num], fits[den]) > 0:
            print(f"RATIO bytes per token {num}/{den} ({where}) = {fits[num] / fits[den]:.2f}  (target {target})")
        else:
            print(f"RATIO bytes per token {num}/{den} ({where}): not measured (fewer than two lengths ran, or a peak "
                  f"that does not grow)")
    both = [S for S, r in res["C+G4"].items() if r.get("status") == "ok" and res["C+"].get(S, {}).get("status") == "ok"]
    if both:   # the same length: the groups' step time against all heads at once
        S = max(both)
        t = res["C+G4"][S]["step_seconds"][-1] / res["C+"][S]["step_seconds"][-1]
        print(f"RATIO step time C+G4/C+ at S={S} ({where}) = {t:.2f}  (target <= 1.1)")
    else:
        print(f"RATIO step time C+G4/C+ ({where}): not measured (no length ran on both)")
    for num, den in (("C", "A"), ("C", "B"), ("C+", "B"), ("C+", "C+amp"), ("C+G4", "C+"), ("C+auto", "C+"),
                     ("C+auto", "B")):
        if num in longest and den in longest:
            print(f"RATIO longest sequence {num}/{den} ({where}) = {longest[num] / longest[den]:.2f}  (target > 1: more "
                  f"tokens than {den}; {num} {stopped(res[num])}, {den} {stopped(res[den])})")
    if a.smoke:   # nothing runs out of memory at these lengths: every run of a side that can run must finish
        failed = [f"{side} at S={S}" for side in GPU_SIDES for S, r in res[side].items() if r.get("status") != "ok"]
        if failed:
            sys.exit("smoke: these runs did not finish: " + ", ".join(failed))


def stopped(runs):
    """Why a side's doubling ended: a measured limit (out of memory), or only a bound (the plan, time, the cap)."""
    last = runs[max(runs)]
    if last.get("status") == "ok":
        return "reached --max-length: a lower bound"
    if last.get("status") == "OOM" and "memory plan" not in last.get("message", ""):
        return "out of memory at twice its longest"
    return f"stopped by {last.get('status')} ({last.get('message', '')[:60]}): a lower bound"


def confirm(a, work, fits):
    group, why = cap_group(a.cap_gib)
    if group is None:
        print(f"S* under a real cap: not confirmed: {why}")
        return
    try:
        for side, (_, _, star) in fits.items():
            if star < 64:
                print(f"  {side}: S* = {star:.0f}: its fixed cost alone exceeds the cap; nothing to confirm")
                continue
            if side == "D" or star > 32768:
                print(f"  {side}: S* = {star:.0f} not confirmed under the cap "
                      f"({'a cap per rank needs one cgroup per rank' if side == 'D' else 'beyond 32K: O(S^2) attention on 2 cores'})")
                continue
            outcome = []
            for f in (0.9, 1.15):
                S = int(star * f) // 64 * 64
                data = pack(a, work, S)
                r = run_hf(a, work, side, S, group) if side in ("A", "B") else run_ours(a, work, data, side, S, group)
                outcome.append(f"S={S} {'fits' if 'error' not in r else 'fails (' + r['error'][:40] + ')'}")
            print(f"  {side}: S* = {star:.0f}: " + "; ".join(outcome))
    finally:
        group.rmdir()


if __name__ == "__main__":
    main()
