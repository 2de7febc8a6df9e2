#!/usr/bin/env python3
"""GPU benchmark of ulysses-train against Hugging Face transformers, measured in the same run on the same GPU.

A Llama-3.2-1B-shaped model (random weights, no download), one GPU, SP=1, bf16 compute with fp32 weights
and AdamW state, one sequence per step. Both sides always run with the same recomputation setting:

  fixed lengths      16K, 32K and 64K tokens (--lengths), recomputation OFF on both sides (every layer's
                     activations kept for backward). A side that does not fit is OOM in the table there
                     (and at the longer fixed lengths): it is never switched to recomputation.
  longest that fits  per-layer recomputation ON on both sides: from the longest fixed length, doubling
                     while a side fits (halving for a side that does not fit there), up to --max-length,
                     so each side's longest at power-of-two steps (--no-search: not run).

Each side of each length runs in a process of its own, so an out-of-memory in one cannot touch the other;
it is reported as OOM in the table, not as a crash:

  ours          ulysses-train --device cuda --precision amp-bf16 --sp 1 --sharding no_shard (autocast over fp32
                weights, as transformers' side: like for like; --precision bf16, the model in bf16, is lighter), plus
                --activation-checkpointing in the search, on a dataset packed by ulysses-pack (one document
                of exactly S tokens per sequence, so both sides do the same attention work)
  transformers  LlamaForCausalLM from the same config.json: sdpa attention, an all-ones attention mask (as a
                tokenizer gives; without one transformers 4.57 builds a dense [S, S] mask for SDPA, which rules
                out the flash kernel), torch.autocast(bfloat16) over fp32 weights, fused torch.optim.AdamW,
                grad clipping 1.0; gradient_checkpointing_enable(use_reentrant=False) in the search only

Per length it prints tokens/s of both sides, RATIO ours/transformers (target >= 1.3), TFLOPS of both and
MFU of both against two denominators: the GPU's bf16 matmul ceiling measured at the start of the same run
(8192^3 matmuls, median of timed reps with CUDA events; the MFU target for ours, >= 45%, is judged against
it at the fixed lengths, where no side recomputes) and the datasheet dense bf16 peak of the GPU
(the trainer's table in src/train/device.cpp; n/a for a device not listed there); peak GPU memory; and the attention kernel of
each side: ours from the trainer's "attention:" log line, transformers' SDPA backend as
torch._fused_sdp_choice picks it for the query/key/value, mask and flags that transformers passes to
scaled_dot_product_attention in the run's first step.

Both sides count FLOPs with the trainer's formula (src/plan/memory_model.cpp step_flops):
6*M*T + 6*layers*heads*head_dim*sum(d^2), M the weights of matrix products (every matrix but an untied
embedding table), T the tokens of the step and d the length of each document of each sequence of the
step (causal attention: forward QK^T and PV are 2*heads*head_dim*d^2 per layer, backward twice the
forward). One document of S tokens per sequence here, so sum(d^2) = S^2. Model FLOPs only: recomputation
is not counted, on either side. Step times are medians of the timed steps after the warmup steps. The
whole run ends within --time-limit (default 540 s, so it fits one 10-minute job): a run predicted not to
finish in the time left is skipped, one still running at the limit is ended; both are said so in the table.

examples:
  # the whole benchmark
  python3 tools/bench/gpu_bench.py --train build/src/train/ulysses-train --pack build/src/pack/ulysses-pack
  # one length, more timed steps, results also as JSON
  python3 tools/bench/gpu_bench.py --lengths 32768 --no-search --steps 5 --json out/gpu-bench.json
  # the same code path end to end on CPU: the tiny Llama of datasets/sample, fp32, 256/512 tokens without
  # recomputation, then 512/1024 with it
  python3 tools/bench/gpu_bench.py --smoke

Torch runs only in child processes, under --python (default: this interpreter if it has torch and
transformers, else $ULYSSES_DEPS/venv/bin/python from tools/bootstrap.sh). Exit code: 0 when the runs
finished (even with targets missed; --check makes a missed target exit 1), 2 on bad input.
"""
import argparse
import array
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

REPO = pathlib.Path(__file__).resolve().parents[2]
WORKERS = pathlib.Path(__file__).resolve().with_name("gpu_bench_workers.py")   # what runs under torch
DEFAULT_LENGTHS = [16384, 32768, 65536]
SMOKE_LENGTHS = [256, 512]
RATIO_TARGET = 1.3
MFU_TARGET = 0.45
ALIGN = 64   # ulysses-pack's default --align: S must be a multiple of it at --sp 1
FLOPS_FORMULA = "6*M*T + 6*layers*heads*head_dim*sum(d^2) (src/plan/memory_model.cpp step_flops; M = matrix " \
                "weights, T = tokens of the step, d = each document's length: causal attention, forward " \
                "2*heads*head_dim*d^2 per layer and backward twice that; one document of S tokens per sequence " \
                "here, so sum(d^2) = S^2; model FLOPs, recomputation not counted), the same for both sides"
OLD_FLOPS_FORMULA = "6*M*T + 12*layers*heads*head_dim*S*T"   # what trainers built before the causal count report
# Datasheet dense (no sparsity) bf16 tensor-core peaks per GPU in TFLOPS: the trainer's own table
# (src/train/device.cpp known_peak_tflops), read from its source so that the two cannot differ. A key is matched as
# a substring of the device name, first match wins (so "H100 PCIe" and "H100 NVL" before "H100").
PEAK_TABLE = REPO / "src" / "train" / "device.cpp"


def datasheet_bf16_peaks():
    """[(name key, dense bf16 TFLOPS)] in the trainer's order."""
    text = PEAK_TABLE.read_text()
    start = text.index("kPeaks{{")
    rows = re.findall(r'\{"([^"]+)", ([0-9.]+), ([0-9.]+)\}', text[start:text.index("}};", start)])
    if not rows:
        raise SystemExit(f"no GPU peaks found in {PEAK_TABLE} (kPeaks)")
    return [(key, float(bf16)) for key, bf16, _ in rows]


# Recomputation labels: off at the fixed lengths, per-layer on both sides in the search for the longest that fits.
RECOMPUTE = {False: "off", True: "on"}
RECOMPUTE_OURS = {False: "no --activation-checkpointing (every layer's activations kept)",
                  True: "--activation-checkpointing (each decoder layer recomputed in backward)"}
RECOMPUTE_HF = {False: "no gradient checkpointing (every layer's activations kept)",
                True: "gradient_checkpointing_enable(use_reentrant=False) (each decoder layer recomputed in backward)"}
SIDES = (("ours", "ours"), ("hf", "transformers"))
OOM_PATTERNS = re.compile(r"out of memory|OutOfMemoryError|can't allocate memory|std::bad_alloc", re.I)
# ulysses-train refuses a run its memory plan predicts not to fit (src/plan/fit_check.cpp): an OOM predicted,
# not measured, and said so in the table
PLAN_REFUSAL = re.compile(r"the memory plan at S = \d+ needs .*")


class BenchError(Exception):
    """A one-line failure for the user: what went wrong, naming the thing, and a hint."""

    def __init__(self, what, hint):
        super().__init__(f"{what} — HINT: {hint}")


# ---------------------------------------------------------------------------------------------------------
# model shape and FLOPs


def llama_1b_config(max_len):
    """Llama-3.2-1B's shape (hidden 2048, 16 layers, 32 heads / 8 KV of 64, tied embeddings, llama3 RoPE)."""
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 128256, "hidden_size": 2048,
            "intermediate_size": 8192, "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8,
            "head_dim": 64, "hidden_act": "silu", "max_position_embeddings": max(131072, max_len),
            "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
            "rope_scaling": {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                             "original_max_position_embeddings": 8192},
            "attention_bias": False, "mlp_bias": False, "tie_word_embeddings": True, "initializer_range": 0.02,
            "bos_token_id": 128000, "eos_token_id": 128001}


def ours_precision(a):
    """Ours' --precision beside transformers' autocast(bfloat16) over fp32 weights: amp-bf16, the same arithmetic."""
    return "amp-bf16" if a.precision == "bf16" else a.precision


def smoke_config(max_len):
    cfg = json.loads((REPO / "datasets/sample/tiny-llama/config.json").read_text())
    cfg["max_position_embeddings"] = max(cfg.get("max_position_embeddings", 0), max_len)
    return cfg


def head_dim(cfg):
    return cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]


def param_count(cfg):
    """Parameters of a bias-free Llama, a tied embedding counted once (as the trainer and HF count them)."""
    h, vocab = cfg["hidden_size"], cfg["vocab_size"]
    norms = cfg["num_hidden_layers"] * 2 * h + h
    return matmul_params(cfg) + norms + (0 if cfg.get("tie_word_embeddings") else vocab * h)


def matmul_params(cfg):
    """The weights of matrix products (arch::matmul_parameter_count): every matrix but an untied embedding
    table, which is a lookup; the head (or the tied table) once."""
    h, inter, vocab = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    heads, kv, d = cfg["num_attention_heads"], cfg["num_key_value_heads"], head_dim(cfg)
    per_layer = 2 * h * heads * d + 2 * h * kv * d + 3 * h * inter
    return cfg["num_hidden_layers"] * per_layer + vocab * h


def step_flops(cfg, tokens, doc_sq_sum):
    """Model FLOPs of one training step (src/plan/memory_model.cpp step_flops): 6*M*T for the matrix products of
    T tokens (forward 2*M*T, backward twice that) plus causal attention, 6*layers*heads*head_dim*sum(d^2) over
    every document d of every sequence of the step (forward QK^T and PV are heads*head_dim*d^2 each with the
    causal half, 2*heads*head_dim*d^2 per layer; backward twice the forward). Recomputation is not counted."""
    return 6.0 * matmul_params(cfg) * tokens \
        + 6.0 * cfg["num_hidden_layers"] * cfg["num_attention_heads"] * head_dim(cfg) * doc_sq_sum


def seq_flops(cfg, S):
    """A step of this benchmark: one sequence of S tokens holding one document of S tokens."""
    return step_flops(cfg, S, float(S) * S)


def old_seq_flops(cfg, S):
    """The same step by the formula of trainers built before the causal count (OLD_FLOPS_FORMULA)."""
    return 6.0 * matmul_params(cfg) * S + 12.0 * cfg["num_hidden_layers"] * cfg["num_attention_heads"] * head_dim(cfg) \
        * float(S) * S


def datasheet_peak(device_name, device):
    """(TFLOPS, the name it matched) of the datasheet dense bf16 peak, or (None, why not)."""
    peaks = datasheet_bf16_peaks()   # read on CPU too, so the smoke run checks the table still parses
    if device != "cuda":
        return None, "no datasheet bf16 peak on CPU"
    for key, tflops in peaks:
        if key in device_name:
            return tflops, key
    return None, f"{device_name!r} is not in the trainer's GPU table ({PEAK_TABLE.relative_to(REPO)})"


# ---------------------------------------------------------------------------------------------------------
# the parent: data, runs, table


def find_tool(path, name, hint):
    p = pathlib.Path(path)
    for cand in ([p] if p.is_absolute() else [p, REPO / p]):
        if cand.is_file() and os.access(cand, os.X_OK):
            return cand.resolve()
    raise BenchError(f"{name} not found at {path}", hint)


def find_python(explicit):
    deps = pathlib.Path(os.environ.get("ULYSSES_DEPS", "/opt/ulysses-deps")) / "venv/bin/python"
    cands = [explicit] if explicit else [sys.executable, str(deps)]
    for c in cands:
        if c and (shutil.which(c) or pathlib.Path(c).is_file()):
            if subprocess.run([c, "-c", "import torch, transformers"], capture_output=True).returncode == 0:
                return c
    raise BenchError(f"no Python with torch and transformers (tried {', '.join(map(str, cands))})",
                     "pass --python PATH of the venv that has them (tools/bootstrap.sh makes one)")


def kill_group(p):
    """Ends the child this script started, with everything it started (its own session)."""
    if p.poll() is None:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    p.wait()


def tail(path, lines=15):
    try:
        text = pathlib.Path(path).read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.rstrip().splitlines()[-lines:])


def failure_status(rc, log):
    """(status, message) of a run that exited `rc`, from its log file."""
    return failure_status_of(rc, pathlib.Path(log).read_text(errors="replace") if pathlib.Path(log).exists() else "")


def failure_status_of(rc, text):
    """The same from the run's output: OOM (out of memory, or refused by the plan) or FAILED."""
    plan = PLAN_REFUSAL.search(text)
    if plan:
        return "OOM", f"refused by the trainer's memory plan (predicted, not measured): {plan.group(0)[:300]}"
    if OOM_PATTERNS.search(text):
        return "OOM", next((l.strip() for l in text.splitlines() if OOM_PATTERNS.search(l)), "")[:300]
    if rc in (-9, 137):
        return "OOM", "killed by SIGKILL (host out of memory?)"
    last = next((l.strip() for l in reversed(text.splitlines()) if l.strip()), f"exit code {rc}")
    return "FAILED", f"exit code {rc}: {last[:300]}"


class Runner:
    def __init__(self, a, work, cfg, cfg_path, env):
        self.a, self.work, self.cfg, self.cfg_path, self.env = a, work, cfg, cfg_path, env
        self.deadline = a.start + a.time_limit if a.time_limit > 0 else None
        # (side, recompute) -> (length, median step s, overhead s): predicts the next run's time
        self.history = {}

    def remaining(self):
        return None if self.deadline is None else self.deadline - time.monotonic()

    def predict(self, side, S, recompute):
        """Seconds a run would take: the last run of the side scaled by model FLOPs; from the other
        recomputation setting when this one has not run yet (recomputing every layer is one more forward:
        about 4/3 of the step)."""
        if (side, recompute) in self.history:
            s0, step0, over = self.history[(side, recompute)]
        elif (side, not recompute) in self.history:
            s0, step0, over = self.history[(side, not recompute)]
            step0 *= 4 / 3 if recompute else 3 / 4
        else:
            return None
        scale = seq_flops(self.cfg, S) / seq_flops(self.cfg, s0)
        return over + (self.a.warmup + self.a.steps) * step0 * scale

    def fits_in_time(self, side, S, recompute):
        rem, est = self.remaining(), self.predict(side, S, recompute)
        if rem is not None and rem <= 5:
            return False, "time limit reached"
        if rem is not None and est is not None and est > rem:
            return False, f"would take ~{est:.0f} s, {rem:.0f} s left of --time-limit"
        return True, ""

    def wait(self, p, done=None):
        """Waits for a child; done() true ends it early. Returns (rc or None, timed out)."""
        try:
            while True:
                rc = p.poll()
                if done is not None and done():
                    kill_group(p)
                    return 0, False
                if rc is not None:
                    return rc, False
                rem = self.remaining()
                if rem is not None and rem <= 0:
                    kill_group(p)
                    return None, True
                time.sleep(0.05)
        finally:
            kill_group(p)

    def pack(self, S):
        """One document of exactly S tokens per sequence (S-1 random ids below the vocabulary, then EOS =
        vocab-1, so the flat reader splits there): identical attention work on both sides."""
        vocab = self.cfg["vocab_size"]
        eos = vocab - 1
        n_seq = self.a.warmup + self.a.steps + 1
        rng = random.Random(S)
        ids = array.array("I", rng.randbytes(4 * S * n_seq))
        ids = array.array("I", (x % eos for x in ids))
        for k in range(n_seq):
            ids[(k + 1) * S - 1] = eos
        src = self.work / f"tokens-{S}.u32"
        with open(src, "wb") as f:
            ids.tofile(f)
        out = self.work / f"packed-{S}"
        cmd = [str(self.a.pack), "pack", str(src), "--format", "flat", "--flat-dtype", "uint32", "--eos-id", str(eos),
               "-o", str(out), "--seq-len", str(S), "--sp", "1", "--policy", "pad", "--model-config",
               str(self.cfg_path), "--overwrite"]
        r = subprocess.run(cmd, capture_output=True, text=True)
        src.unlink()
        if r.returncode != 0:
            last = (r.stderr.strip().splitlines() or [f"exit code {r.returncode}"])[-1]
            raise BenchError(f"ulysses-pack failed for S={S}: {last}", f"run it by hand: {' '.join(cmd)}")
        return out, cmd

    def run_ours(self, S, ceiling, recompute, extra=(), name="ours", precision=None):
        """One trainer run of S tokens; `extra` flags (memory_bench --gpu: the memory features) make another side,
        `name`, timed apart. ceiling None: no --peak-tflops. precision: --precision (default the benchmark's)."""
        a = self.a
        total = a.warmup + a.steps
        data, pack_cmd = self.pack(S)
        tag = f"{S}-recompute-{RECOMPUTE[recompute]}"
        out = self.work / f"{name}-{tag}"
        cmd = [str(a.train), "--data", str(data), "--model-config", str(self.cfg_path), "--output", str(out),
               "--sp", "1", "--steps", str(total), "--micro-batch", "1", "--lr", "1e-4", "--warmup", "0",
               "--save-every", "-1"]
        # one rank: nothing to shard, but said so (unless `extra` offloads: that shards over the one rank);
        # recomputation exactly as transformers' side of this length
        cmd += ["--device", a.device, "--precision", precision or a.precision]
        cmd += [] if {"--offload-params", "--offload-optimizer"} & set(extra) else ["--sharding", "no_shard"]
        cmd += [] if ceiling is None else ["--peak-tflops", f"{ceiling:.3f}"]
        if recompute:
            cmd += ["--activation-checkpointing"]
        cmd += list(extra)
        if a.device == "cpu":
            cmd += ["--threads", str(a.threads)]
        log = self.work / f"{name}-{tag}.log"
        metrics = out / "metrics.jsonl"

        def rows():
            try:
                text = metrics.read_text()
            except OSError:
                return []
            return [json.loads(l) for l in text[: text.rfind("\n") + 1].splitlines() if l.strip()]

        start = time.monotonic()
        with open(log, "w") as f:
            p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=self.env, start_new_session=True)
        # once the last step's metrics line is written the run is ended: what follows (the final log lines,
        # teardown) is not what is measured
        rc, timed_out = self.wait(p, done=lambda: len(rows()) >= total)
        wall = time.monotonic() - start
        got = rows()
        res = {"command": cmd, "pack_command": pack_cmd, "recompute": recompute}
        res.update(trainer_log_lines(log))
        if timed_out:
            res.update(status="TIMEOUT", message=f"--time-limit reached after {len(got)} of {total} steps")
        elif len(got) < total:
            status, msg = failure_status(rc, log) if rc != 0 else ("FAILED", f"wrote {len(got)} of {total} steps")
            res.update(status=status, message=msg, log_tail=tail(log))
        else:
            timed = got[a.warmup:total]
            res.update(status="ok", step_seconds=[m["seconds"] for m in got[:total]],
                       losses=[m["loss"] for m in got[:total]])
            key = "peak_gpu_mib" if a.device == "cuda" else "peak_rss_mib"
            peaks = [m[key] for m in got[:total] if key in m]
            res["peak_mib"] = max(peaks) if peaks else None
            # the trainer's own count, for the cross-check only: the table counts both sides with seq_flops
            res["trainer_tflops"] = statistics.median(m["tflops"] for m in timed)
            res["trainer_step_flops"] = statistics.median(m["tflops"] * 1e12 * m["seconds"] for m in timed)
            if all("mfu" in m for m in timed):
                res["trainer_mfu"] = statistics.median(m["mfu"] for m in timed)
            med = statistics.median(res["step_seconds"][a.warmup:])
            self.history[(name, recompute)] = (S, med, max(0.0, wall - sum(res["step_seconds"])))
        shutil.rmtree(out, ignore_errors=True)
        shutil.rmtree(data, ignore_errors=True)
        return res

    def run_hf(self, S, recompute, alst_chunk=0, name="hf"):
        """One transformers run of S tokens; alst_chunk > 0 adds ALST's TiledMLP and tiled loss over chunks of that
        many tokens (alst_stack.py: memory_bench --gpu's side B), a side `name` timed apart."""
        a = self.a
        tag = f"{name}-{S}-recompute-{RECOMPUTE[recompute]}"
        spec_path, result_path = self.work / f"{tag}.spec.json", self.work / f"{tag}.result.json"
        spec = {"config": str(self.cfg_path), "length": S, "warmup": a.warmup, "steps": a.steps, "device": a.device,
                "precision": a.precision, "threads": a.threads if a.device == "cpu" else 0,
                "gradient_checkpointing": recompute, "alst_loss_chunk": alst_chunk, "result": str(result_path)}
        spec_path.write_text(json.dumps(spec))
        log = self.work / f"{tag}.log"
        start = time.monotonic()
        with open(log, "w") as f:
            p = subprocess.Popen([a.python, str(WORKERS), "hf", str(spec_path)], stdout=f, stderr=subprocess.STDOUT,
                                 env=self.env, start_new_session=True)
        rc, timed_out = self.wait(p)
        wall = time.monotonic() - start
        if timed_out:
            return {"status": "TIMEOUT", "message": "--time-limit reached"}
        if rc == 2 and not result_path.exists():
            raise BenchError(tail(log, 1).removeprefix("error: ").split(" — HINT: ")[0],
                             (tail(log, 1).split(" — HINT: ") + ["see the log"])[1])
        if not result_path.exists():
            status, msg = failure_status(rc, log)
            return {"status": status, "message": msg, "log_tail": tail(log), "recompute": recompute}
        res = json.loads(result_path.read_text())
        res["recompute"] = recompute
        if res["status"] == "ok":
            med = statistics.median(res["step_seconds"][a.warmup:])
            self.history[(name, recompute)] = (S, med, max(0.0, wall - sum(res["step_seconds"])))
        return res


def trainer_log_lines(log):
    """The trainer's own words on its attention kernel and its activations ("attention: ..." and
    "activations: ..." of src/train/trainer.cpp), from its log."""
    try:
        text = pathlib.Path(log).read_text(errors="replace")
    except OSError:
        return {}
    out = {}
    for key in ("attention", "activations"):
        m = re.search(rf"^(?:\[[^\]]*\] )?{key}: (.+)$", text, re.M)
        if m:
            out[key] = m.group(1).strip()
    return out


def measure_ceiling(a, work, env):
    spec_path, result_path = work / "matmul.spec.json", work / "matmul.result.json"
    n = a.matmul_size or (1024 if a.smoke else 8192)
    spec = {"device": a.device, "n": n, "reps": 10 if a.smoke else 20, "inner": 3 if a.smoke else 10,
            "warmup_s": 0.3 if a.smoke else 2.0, "threads": a.threads if a.device == "cpu" else 0,
            "result": str(result_path)}
    spec_path.write_text(json.dumps(spec))
    try:
        r = subprocess.run([a.python, str(WORKERS), "matmul", str(spec_path)], capture_output=True, text=True, env=env,
                           timeout=300)
    except subprocess.TimeoutExpired:
        raise BenchError("the matmul-ceiling worker did not finish in 300 s", "check the GPU (nvidia-smi)") from None
    if r.returncode != 0 or not result_path.exists():
        lines = r.stderr.strip().splitlines() or [f"exit code {r.returncode}"]
        err = next((l for l in lines if l.startswith("error: ")), None)
        if err:
            what, _, hint = err.removeprefix("error: ").partition(" — HINT: ")
            raise BenchError(what, hint or "see above")
        raise BenchError(f"the matmul-ceiling worker failed: {lines[-1]}", f"run {a.python} -c 'import torch' there")
    return json.loads(result_path.read_text())


def summarize(res, a, cfg, S, ceiling, peak):
    """Adds tokens/s, TFLOPS and MFU against both denominators (the measured matmul ceiling and the datasheet
    peak, None when not known) from the median timed step to one side's result."""
    if res.get("status") != "ok":
        return res
    med = statistics.median(res["step_seconds"][a.warmup:])
    flops = seq_flops(cfg, S)
    tflops = flops / med / 1e12
    res.update(median_step_s=med, tokens_per_s=S / med, step_flops=flops, tflops=tflops, mfu_ceiling=tflops / ceiling,
               mfu_datasheet=None if peak is None else tflops / peak)
    return res


def status_cell(res):
    status = res.get("status", "—")
    return "OOM (plan)" if status == "OOM" and "memory plan" in res.get("message", "") else status


def cell(res, key, fmt):
    if res.get("status") != "ok":
        return status_cell(res)
    v = res.get(key)
    return "n/a" if v is None else fmt.format(v)


def mfu_cell(res):
    if res.get("status") != "ok":
        return status_cell(res)
    sheet = "n/a" if res.get("mfu_datasheet") is None else f"{res['mfu_datasheet']:.1%}"
    return f"{res['mfu_ceiling']:.1%} / {sheet}"


def short_attention(res, side):
    """The attention kernel in a few words for the table (the whole description is printed under it)."""
    if side == "ours":
        line = res.get("attention")
        if not line:
            return "—"
        m = re.search(r"PyTorch picks (\w+)", line)   # "fused SDPA per document (PyTorch picks X for T on D)"
        if m:
            return f"SDPA {m.group(1)}"
        return "flash varlen" if "varlen" in line else line.split(" (")[0][:24]
    return (res.get("sdpa") or {}).get("backend", "—")


def describe_sdpa(sd):
    """transformers' SDPA backend with what it was chosen for (the sequence length written S, so that one
    description serves every length)."""
    if not sd:
        return "n/a"
    if not sd.get("calls"):
        return sd.get("backend", "n/a")
    seq = sd["query"][2]   # [batch, heads, S, head_dim]
    shape = lambda dims: "[" + ", ".join("S" if d == seq else str(d) for d in dims) + "]"   # noqa: E731
    mask = "no mask" if sd.get("attn_mask") is None else f"a mask {shape(sd['attn_mask'])}"
    enabled = ", ".join(k for k, v in (sd.get("enabled") or {}).items() if v) or "none"
    return (f"{sd['backend']} on {sd['device'].split(':')[0]} (torch._fused_sdp_choice on the arguments transformers "
            f"passes to scaled_dot_product_attention in the first step: q {shape(sd['query'])}, k/v "
            f"{shape(sd['key'])} {sd['dtype']}, {mask}, is_causal={sd['is_causal']}, enable_gqa={sd['enable_gqa']}; "
            f"backends enabled: {enabled})")


def print_table(rows, a, ceiling, peak, peak_key):
    unit, div = ("MiB", 1.0) if a.smoke else ("GiB", 1024.0)
    mem = "peak RSS" if a.device == "cpu" else "peak GPU"
    head = ["length", "recompute", "ours tok/s", "HF tok/s", "RATIO ours/HF", "ours TFLOPS", "ours MFU ceil/sheet",
            "HF TFLOPS", "HF MFU ceil/sheet", f"ours {mem} {unit}", f"HF {mem} {unit}", "ours attention", "HF SDPA"]
    body = []
    tf = "{:.1f}" if not a.smoke else "{:.3f}"
    for r in rows:
        o, h = r["ours"], r["hf"]
        ratio = f"{r['ratio']:.2f}" if r.get("ratio") is not None else "—"
        peak_of = lambda res: {**res, "peak": None if res.get("peak_mib") is None else res["peak_mib"] / div}  # noqa
        body.append([str(r["length"]), RECOMPUTE[r["recompute"]], cell(o, "tokens_per_s", "{:,.0f}"),
                     cell(h, "tokens_per_s", "{:,.0f}"), ratio, cell(o, "tflops", tf), mfu_cell(o),
                     cell(h, "tflops", tf), mfu_cell(h), cell(peak_of(o), "peak", "{:,.1f}"),
                     cell(peak_of(h), "peak", "{:,.1f}"), short_attention(o, "ours"), short_attention(h, "hf")])
    widths = [max(len(x[i]) for x in [head] + body) for i in range(len(head))]
    line = lambda cols: "  ".join(c.rjust(w) for c, w in zip(cols, widths))   # noqa: E731
    print(line(head))
    print("  ".join("-" * w for w in widths))
    for b in body:
        print(line(b))
    sheet = f"{peak:.1f} TFLOPS" if peak is not None else f"n/a: {peak_key}"
    print(f"recompute: the same on both sides of a row: off = ours {RECOMPUTE_OURS[False]}, transformers "
          f"{RECOMPUTE_HF[False]}; on = ours {RECOMPUTE_OURS[True]}, transformers {RECOMPUTE_HF[True]}")
    print(f"MFU ceil/sheet: model FLOPs against the measured matmul ceiling ({ceiling:.1f} TFLOPS) / against the "
          f"datasheet dense bf16 peak ({sheet})")
    for side, label, what in (("ours", "ours", "its log's \"attention:\" line"),
                              ("hf", "transformers", "SDPA backend")):
        seen = {}
        for r in rows:
            text = r[side].get("attention") if side == "ours" else describe_sdpa(r[side].get("sdpa"))
            if text and text != "n/a":
                seen.setdefault(text, []).append(f"{r['length']}/{RECOMPUTE[r['recompute']]}")
        for text, where in seen.items() or [("n/a", [])]:
            at = "" if len(seen) == 1 else f" [at {', '.join(where)}]"
            print(f"attention, {label} ({what}): {text}{at}")


def judge(rows, a):
    """Target lines in the house style; returns whether every judged target was met (and one was judged)."""
    judged, ok = 0, True
    note = "not judged in --smoke" if a.smoke else None
    for r in rows:
        o, h, S = r["ours"], r["hf"], r["length"]
        tag = f"S={S}, recompute {RECOMPUTE[r['recompute']]}"
        if r.get("ratio") is not None:
            met = r["ratio"] >= RATIO_TARGET
            verdict = note or ("met" if met else "MISSED")
            print(f"RATIO tokens/s ours/transformers ({tag}) = {r['ratio']:.2f}  (target >= {RATIO_TARGET}: {verdict})")
            judged += 1
            ok &= met or a.smoke
        elif o.get("status") == "ok" and h.get("status") == "OOM":
            print(f"RATIO tokens/s ours/transformers ({tag}) = n/a: transformers is out of memory, ours fits")
        elif h.get("status") == "ok" and o.get("status") == "OOM":
            print(f"RATIO tokens/s ours/transformers ({tag}) = n/a: ours is out of memory, transformers fits")
        if o.get("status") == "ok":
            sheet = "n/a" if o.get("mfu_datasheet") is None else f"{o['mfu_datasheet']:.1%}"
            both = f"{o['mfu_ceiling']:.1%} of the measured ceiling, {sheet} of the datasheet peak"
            if r["recompute"]:   # recomputation is not model FLOPs: the target is for the rows without it
                print(f"MFU ours ({tag}) = {both}  (target >= {MFU_TARGET:.0%}: not judged with recomputation)")
                continue
            met = o["mfu_ceiling"] >= MFU_TARGET
            verdict = note or ("met" if met else "MISSED")
            print(f"MFU ours ({tag}) = {both}  (target >= {MFU_TARGET:.0%} of the measured ceiling: {verdict})")
            judged += 1
            ok &= met or a.smoke
    return ok and judged > 0


def longest(rows, side):
    rows = sorted(rows, key=lambda r: r["length"])
    fit = [r["length"] for r in rows if r[side].get("status") == "ok"]
    after = [f"{r['length']}: {status_cell(r[side])}"
             + (f" ({r[side]['message']})" if r[side]["status"] in ("skipped", "TIMEOUT") else "") for r in rows
             if r[side].get("status") not in ("ok", None, "not run") and (not fit or r["length"] > max(fit))]
    return (max(fit) if fit else None), (after[0] if after else None)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--train", default="build/src/train/ulysses-train", help="the ulysses-train binary")
    ap.add_argument("--pack", default="build/src/pack/ulysses-pack", help="the ulysses-pack binary")
    ap.add_argument("--lengths", type=int, nargs="+", help="sequence lengths in tokens, multiples of 64, run "
                    "without recomputation on both sides (default 16384 32768 65536; --smoke: 256 512)")
    ap.add_argument("--no-search", dest="search", action="store_false",
                    help="do not search for the longest length each side fits with per-layer recomputation on "
                    "both sides (from the longest of --lengths, doubling; halving for a side that does not fit "
                    "there)")
    ap.add_argument("--max-length", type=int, help="the doubling search stops here (default 1048576; --smoke: 1024)")
    ap.add_argument("--warmup", type=int, help="untimed steps per run (default 2; --smoke: 1)")
    ap.add_argument("--steps", type=int, help="timed steps per run, median reported (default 3; --smoke: 2)")
    ap.add_argument("--time-limit", type=float, default=540, help="seconds for the whole benchmark (0: none); a "
                    "length predicted not to finish in what is left is skipped (default 540)")
    ap.add_argument("--matmul-size", type=int, help="n of the n^3 matmuls of the ceiling (default 8192; --smoke 1024)")
    ap.add_argument("--alloc-conf", default="expandable_segments:True",
                    help="PYTORCH_CUDA_ALLOC_CONF for both sides unless already set (default %(default)s; '' : none)")
    ap.add_argument("--python", help="Python with torch and transformers for the workers (default: this one if it "
                    "has them, else $ULYSSES_DEPS/venv/bin/python)")
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="CPU threads of both sides in --smoke")
    ap.add_argument("--json", help="also write the results as JSON to this file")
    ap.add_argument("--workdir", help="scratch directory (default: a new temporary one, removed at the end)")
    ap.add_argument("--check", action="store_true", help="exit 1 when a target is missed (never in --smoke)")
    ap.add_argument("--smoke", action="store_true", help="the same code path on CPU: tiny Llama "
                    "(datasets/sample/tiny-llama shape), fp32, lengths 256 512 without recomputation, then the "
                    "search with it from 512 to 1024, 1 warmup + 2 timed steps; the ceiling is an fp32 CPU matmul, "
                    "there is no datasheet peak and the targets are printed, not judged")
    a = ap.parse_args()
    try:
        return bench(a)
    except BenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def bench(a):
    # a SIGTERM (timeout, a job's end) unwinds through Runner.wait, which ends the run in flight (its own session)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    a.start = time.monotonic()   # --time-limit counts from here: the whole benchmark, ceiling and packing included
    a.device, a.precision = ("cpu", "fp32") if a.smoke else ("cuda", "bf16")
    a.lengths = sorted(set(a.lengths or (SMOKE_LENGTHS if a.smoke else DEFAULT_LENGTHS)))
    a.max_length = a.max_length or (1024 if a.smoke else 1048576)
    a.warmup = (1 if a.smoke else 2) if a.warmup is None else a.warmup
    a.steps = (2 if a.smoke else 3) if a.steps is None else a.steps
    for S in a.lengths:
        if S <= 0 or S % ALIGN:
            lo = max(ALIGN, S // ALIGN * ALIGN)
            raise BenchError(f"--lengths {S} is not a positive multiple of {ALIGN} (ulysses-pack's --align)",
                             f"use {lo} or {lo + ALIGN}")
    if a.steps < 1 or a.warmup < 0:
        raise BenchError(f"--steps {a.steps} / --warmup {a.warmup}", "need --steps >= 1 and --warmup >= 0")
    a.train = find_tool(a.train, "ulysses-train", "build it (bash tools/build.sh) or pass --train PATH")
    a.pack = find_tool(a.pack, "ulysses-pack", "build it (bash tools/build.sh) or pass --pack PATH")
    helptext = subprocess.run([str(a.train), "--help"], capture_output=True, text=True).stdout
    missing = [f for f in ("--device", "--precision", "--peak-tflops", "--sharding", "--activation-checkpointing")
               if f not in helptext]
    if missing:
        plural = "s" if len(missing) > 1 else ""
        raise BenchError(f"{a.train} has no {', '.join(missing)} flag{plural} (an older build?)",
                         "rebuild it from this checkout, or pass --train PATH to a newer build")
    a.python = find_python(a.python)
    if a.json:
        pathlib.Path(a.json).parent.mkdir(parents=True, exist_ok=True)

    env = dict(os.environ)
    if a.alloc_conf and "PYTORCH_CUDA_ALLOC_CONF" not in env and a.device == "cuda":
        env["PYTORCH_CUDA_ALLOC_CONF"] = a.alloc_conf
    tmp = None
    if a.workdir:
        work = pathlib.Path(a.workdir)
        work.mkdir(parents=True, exist_ok=True)
    else:
        tmp = tempfile.mkdtemp(prefix="ulysses-gpu-bench-")
        work = pathlib.Path(tmp)
    try:
        return run_all(a, work, env)
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


def run_all(a, work, env):
    max_len = max(a.lengths + ([a.max_length] if a.search else []))
    cfg = smoke_config(max_len) if a.smoke else llama_1b_config(max_len)
    cfg_path = work / "config.json"
    cfg_path.write_text(json.dumps(cfg, indent=2) + "\n")
    params = param_count(cfg)

    dev = measure_ceiling(a, work, env)
    ceiling = dev["ceiling_tflops"]
    peak, peak_key = datasheet_peak(dev["device_name"], a.device)
    name = "tiny Llama (datasets/sample/tiny-llama shape)" if a.smoke else "Llama-3.2-1B shape"
    tied = "tied" if cfg.get("tie_word_embeddings") else "untied"
    alloc = env.get("PYTORCH_CUDA_ALLOC_CONF")
    print(f"device: {dev['device_name']} ({dev['device_memory_gib']:.1f} GiB); torch {dev['torch']}"
          f"{' (CUDA ' + dev['torch_cuda'] + ')' if dev.get('torch_cuda') else ''}; "
          f"transformers {dev['transformers']}; ulysses-train {a.train}")
    print(f"matmul ceiling: {dev['matmul_n']}^3 {dev['matmul_dtype']} matmuls, median of {dev['matmul_reps']} reps: "
          f"{ceiling:.1f} TFLOPS (best {dev['best_tflops']:.1f}){'  [--smoke: CPU fp32]' if a.smoke else ''}")
    print("datasheet dense bf16 peak: " + (f"{peak:.1f} TFLOPS ({peak_key!r} in the device name)" if peak is not None
                                           else f"n/a ({peak_key})"))
    print(f"model: {name}: hidden {cfg['hidden_size']}, {cfg['num_hidden_layers']} layers, "
          f"{cfg['num_attention_heads']} heads / {cfg['num_key_value_heads']} KV of {head_dim(cfg)}, intermediate "
          f"{cfg['intermediate_size']}, vocab {cfg['vocab_size']}, {tied} embeddings; N = {params:,} parameters; "
          f"random weights")
    print(f"precision: {'bf16 compute, fp32 weights and AdamW state' if a.precision == 'bf16' else 'fp32'} on both "
          f"sides; transformers: sdpa, all-ones attention mask, "
          f"{'autocast(bfloat16), fused ' if a.precision == 'bf16' else ''}AdamW, clip 1.0; ours: --sp 1 --device "
          f"{a.device} --precision {ours_precision(a)} --sharding no_shard")
    print(f"recomputation, the same on both sides: off at the fixed lengths (ours: {RECOMPUTE_OURS[False]}; "
          f"transformers: {RECOMPUTE_HF[False]}); on in the search for the longest that fits (ours: "
          f"{RECOMPUTE_OURS[True]}; transformers: {RECOMPUTE_HF[True]}){'' if a.search else ' [--no-search: not run]'}")
    print(f"FLOPs per step: {FLOPS_FORMULA}")
    print(f"steps: {a.warmup} warmup + {a.steps} timed per run (median), micro-batch 1, one document of S tokens per "
          f"sequence; each side of each length in its own process"
          f"{'; PYTORCH_CUDA_ALLOC_CONF=' + alloc if alloc else ''}")
    sys.stdout.flush()

    runner = Runner(a, work, cfg, cfg_path, env)
    said = {}   # what was printed once: the kernels of each side, the trainer's FLOP formula

    def attempt(side, S, recompute):
        label = dict(SIDES)[side]
        at = f"[S={S}, recompute {RECOMPUTE[recompute]}] {label}"
        ok, why = runner.fits_in_time(side, S, recompute)
        if not ok:
            print(f"{at}: skipped ({why})", flush=True)
            return {"status": "skipped", "message": why, "recompute": recompute}
        print(f"{at}: running ...", flush=True)
        res = (runner.run_ours(S, ceiling, recompute, precision=ours_precision(a)) if side == "ours"
               else runner.run_hf(S, recompute))
        summarize(res, a, cfg, S, ceiling, peak)
        kernel = res.get("attention") if side == "ours" else describe_sdpa(res.get("sdpa")) if res.get("sdpa") else None
        if kernel and said.get(side) != kernel:
            print(f"  attention, {label}: {kernel}", flush=True)
            said[side] = kernel
        # the setting each side reports back must be the one asked for, or the row is not like for like
        if side == "ours" and "activations" in res and ("checkpointed" in res["activations"]) != recompute:
            print(f"  WARNING: the trainer says 'activations: {res['activations']}' though the recomputation of this "
                  f"row is {RECOMPUTE[recompute]}", flush=True)
        if side == "hf" and "gradient_checkpointing" in res and res["gradient_checkpointing"] != recompute:
            print(f"  WARNING: transformers reports gradient checkpointing {res['gradient_checkpointing']} though the "
                  f"recomputation of this row is {RECOMPUTE[recompute]}", flush=True)
        if res["status"] == "ok":
            unit, div = ("GiB", 1024) if a.device == "cuda" else ("MiB", 1)
            mem = "n/a" if res.get("peak_mib") is None else f"{res['peak_mib'] / div:,.2f} {unit}"
            sheet = "n/a" if res.get("mfu_datasheet") is None else f"{res['mfu_datasheet']:.1%}"
            print(f"{at}: median step {res['median_step_s']:.3f} s -> {res['tokens_per_s']:,.0f} tok/s, "
                  f"{res['tflops']:.3f} TFLOPS, MFU {res['mfu_ceiling']:.1%} of the ceiling / {sheet} of the datasheet "
                  f"peak, peak {mem}; first loss {res['losses'][0]:.3f}", flush=True)
            want = (cfg.get("rope_scaling") or {}).get("rope_type", "default")
            if side == "hf" and res.get("rope_type", want) != want:
                print(f"  note: transformers built RoPE type {res.get('rope_type')!r}, the config asks for "
                      f"{want!r}", flush=True)
            if side == "ours":
                cross_check_flops(res, cfg, S, said)
        else:
            print(f"{at}: {status_cell(res)}: {res.get('message', '')}", flush=True)
            if res["status"] == "FAILED" and res.get("log_tail"):
                print("  " + res["log_tail"].replace("\n", "\n  "), flush=True)
        return res

    def finish(row):
        o, h = row["ours"], row["hf"]
        row["ratio"] = o["tokens_per_s"] / h["tokens_per_s"] if o["status"] == h["status"] == "ok" else None
        return row

    # 1. the fixed lengths, no recomputation on either side; a side out of memory stays out at longer ones
    fixed, dead = [], {}
    for S in a.lengths:
        row = {"length": S, "recompute": False, "phase": "fixed"}
        for side, _ in SIDES:
            if side in dead:
                status, at = dead[side]
                row[side] = {"status": status, "message": f"not run: {status} at {at} without recomputation",
                             "recompute": False}
                continue
            row[side] = attempt(side, S, False)
            if row[side]["status"] in ("OOM", "FAILED"):
                dead[side] = (row[side]["status"], S)
        fixed.append(finish(row))

    # 2. the longest that fits, per-layer recomputation on both sides: from the longest fixed length, doubling
    # while a side fits, halving for a side that does not fit there; each side's longest at power-of-two steps.
    # Where one side halves below a length the other fits, the other runs there too: a like-for-like ratio at
    # the longest length both fit.
    search = {}
    if a.search:
        start = max(a.lengths)
        state = {side: {"next": start, "ok": None, "fail": None} for side, _ in SIDES}
        while any(st["next"] is not None for st in state.values()):
            todo = {side: st["next"] for side, st in state.items() if st["next"] is not None}
            for S in sorted(set(todo.values())):
                row = search.setdefault(S, {"length": S, "recompute": True, "phase": "search"})
                for side, _ in SIDES:
                    st = state[side]
                    if todo.get(side) != S:
                        continue
                    res = row[side] = attempt(side, S, True)
                    st["next"] = None
                    if res["status"] == "ok":
                        st["ok"] = max(st["ok"] or 0, S)
                        if st["fail"] is None and S * 2 <= a.max_length:
                            st["next"] = S * 2
                    elif res["status"] == "OOM":
                        st["fail"] = min(st["fail"] or S, S)
                        if st["ok"] is None and S // 2 >= ALIGN and (S // 2) % ALIGN == 0:
                            st["next"] = S // 2
                for side, _ in SIDES:   # the companion run: the other side fit here, this one fits longer
                    if side not in row and (state[side]["ok"] or 0) > S and any(
                            row.get(o, {}).get("status") == "ok" for o, _ in SIDES if o != side):
                        row[side] = attempt(side, S, True)
        for S, row in search.items():
            for side, label in SIDES:
                row.setdefault(side, {"status": "not run", "recompute": True,
                                      "message": f"the search for {label}'s longest did not need this length"})
            finish(row)
    searched = [search[S] for S in sorted(search)]
    rows = fixed + searched

    print()
    print_table(rows, a, ceiling, peak, peak_key)
    print()
    met = judge(rows, a)
    for side, label in SIDES:
        if a.search:
            fit, nxt = longest(searched, side)
            how = "with per-layer recomputation on both sides"
        else:
            fit, nxt = longest(fixed, side)
            how = "without recomputation, of the fixed lengths [--no-search]"
        print(f"longest that fits {how}, {label}: {fit if fit else 'none'}" + (f" ({nxt})" if nxt else ""))
    if a.json:
        out = {"smoke": a.smoke, "device": dev, "ceiling_tflops": ceiling, "datasheet_peak_tflops": peak,
               "datasheet_match": peak_key, "mfu": "model FLOPs / median step s / denominator: mfu_ceiling against "
               "ceiling_tflops (measured), mfu_datasheet against datasheet_peak_tflops", "config": cfg,
               "params": params, "flops_formula": FLOPS_FORMULA, "precision": a.precision,
               "recomputation": {"fixed": {"ours": RECOMPUTE_OURS[False], "hf": RECOMPUTE_HF[False]},
                                 "search": {"ours": RECOMPUTE_OURS[True], "hf": RECOMPUTE_HF[True]}},
               "warmup_steps": a.warmup, "timed_steps": a.steps,
               "targets": {"ratio_ours_over_hf": RATIO_TARGET, "mfu_ours_of_ceiling_without_recomputation": MFU_TARGET},
               "targets_met": None if a.smoke else met, "env": {"PYTORCH_CUDA_ALLOC_CONF": env.get(
                   "PYTORCH_CUDA_ALLOC_CONF")}, "rows": rows}
        for side, label in SIDES:
            fit, nxt = longest(searched if a.search else fixed, side)
            out.setdefault("longest_that_fits", {})[side] = {"length": fit, "next": nxt,
                                                             "recompute": a.search}
        pathlib.Path(a.json).write_text(json.dumps(out, indent=1) + "\n")
        print(f"results: {a.json}")
    if a.smoke:   # a smoke run checks the script itself: every side of every length must have run
        return 0 if all(row[side]["status"] == "ok" for row in rows for side, _ in SIDES) else 1
    return 1 if a.check and not met else 0


def cross_check_flops(res, cfg, S, said):
    """The trainer's own FLOPs per step against this script's: the table uses this script's count for both
    sides, so a trainer with the older formula (or other matrix weights) is a note, not an error."""
    flops, old, got = seq_flops(cfg, S), old_seq_flops(cfg, S), res["trainer_step_flops"]
    if abs(got / flops - 1) <= 0.01:
        res["trainer_flops_formula"] = "this script's"
    elif abs(got / old - 1) <= 0.01:
        res["trainer_flops_formula"] = f"older: {OLD_FLOPS_FORMULA}"
        if not said.get("old_flops"):
            print(f"  note: this ulysses-train reports TFLOPS with the older formula ({OLD_FLOPS_FORMULA}, attention "
                  f"not halved for causality): {got:.4g} FLOPs per step against this script's {flops:.4g}; the "
                  f"table counts both sides with this script's", flush=True)
            said["old_flops"] = True
    else:
        res["trainer_flops_formula"] = "different"
        print(f"  note: the trainer counts {got:.4g} FLOPs per step, this script {flops:.4g} (the older formula "
              f"{old:.4g}): its matrix weights differ from M = {matmul_params(cfg):,}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
