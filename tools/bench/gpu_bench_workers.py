#!/usr/bin/env python3
"""The torch side of tools/bench/gpu_bench.py, run by it in child processes (torch is imported only here):

  gpu_bench_workers.py matmul SPEC.json   the bf16 (GPU) / fp32 (CPU) matmul ceiling
  gpu_bench_workers.py hf SPEC.json       one transformers run of a length: warmup + timed steps

SPEC.json holds the parameters and the path to write the result (JSON) to; a BenchError prints one
"error: … — HINT: …" line and exits 2.
"""
import json
import os
import pathlib
import resource
import statistics
import sys
import time

from gpu_bench import OOM_PATTERNS, BenchError

def worker_matmul(spec):
    """The matmul ceiling: bf16 n^3 on the GPU (CUDA events), fp32 on the CPU in --smoke; and the versions."""
    import torch
    info = {"torch": torch.__version__, "torch_cuda": torch.version.cuda}
    try:
        import transformers
        info["transformers"] = transformers.__version__
    except ImportError:
        info["transformers"] = None
    n, reps, inner = spec["n"], spec["reps"], spec["inner"]
    if spec["device"] == "cuda":
        if not torch.cuda.is_available():
            raise BenchError("no CUDA GPU visible to torch (torch.cuda.is_available() is False)",
                             "run it on a GPU machine, or pass --smoke for the CPU end-to-end check")
        props = torch.cuda.get_device_properties(0)
        info["device_name"] = torch.cuda.get_device_name(0)
        info["device_memory_gib"] = props.total_memory / 2**30
        dtype = torch.bfloat16
        a, b = (torch.randn(n, n, device="cuda", dtype=dtype) for _ in range(2))
        c = torch.empty(n, n, device="cuda", dtype=dtype)
        start = time.perf_counter()
        while time.perf_counter() - start < spec["warmup_s"]:   # clocks up, cuBLAS heuristics cached
            for _ in range(inner):
                torch.matmul(a, b, out=c)
            torch.cuda.synchronize()
        times = []
        for _ in range(reps):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            for _ in range(inner):
                torch.matmul(a, b, out=c)
            e.record()
            e.synchronize()
            times.append(s.elapsed_time(e) / 1e3 / inner)
    else:
        if spec.get("threads"):
            torch.set_num_threads(spec["threads"])
        info["device_name"] = cpu_name()
        info["device_memory_gib"] = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
        dtype = torch.float32
        a, b = (torch.randn(n, n, dtype=dtype) for _ in range(2))
        c = torch.empty(n, n, dtype=dtype)
        start = time.perf_counter()
        while time.perf_counter() - start < spec["warmup_s"]:
            torch.matmul(a, b, out=c)
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            for _ in range(inner):
                torch.matmul(a, b, out=c)
            times.append((time.perf_counter() - t0) / inner)
    flops = 2.0 * n**3
    info.update(matmul_n=n, matmul_dtype=str(dtype).replace("torch.", ""), matmul_reps=reps,
                ceiling_tflops=flops / statistics.median(times) / 1e12, best_tflops=flops / min(times) / 1e12)
    return info


def cpu_name():
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"CPU {line.split(':', 1)[1].strip()} ({os.cpu_count()} cores)"
    except OSError:
        pass
    return f"CPU ({os.cpu_count()} cores)"


def is_oom(exc):
    import torch
    oom_type = getattr(torch, "OutOfMemoryError", None) or getattr(torch.cuda, "OutOfMemoryError", ())
    return isinstance(exc, oom_type) or bool(OOM_PATTERNS.search(str(exc)))


def worker_hf(spec):
    """transformers' side of one length: the same config, sdpa, gradient checkpointing, autocast bf16 over
    fp32 weights, fused AdamW, clip 1.0; one sequence of S tokens per step (plain causal LM: positions
    0..S-1, labels = inputs, which the model shifts)."""
    import torch
    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM

    device, S = spec["device"], spec["length"]
    cuda = device == "cuda"
    bf16 = spec["precision"] == "bf16"
    cfg = json.loads(pathlib.Path(spec["config"]).read_text())
    result = {"transformers": transformers.__version__, "torch": torch.__version__}
    if not cuda and spec.get("threads"):
        torch.set_num_threads(spec["threads"])
    if cuda and not torch.cuda.is_available():
        raise BenchError("no CUDA GPU visible to torch in the transformers worker",
                         "run it on a GPU machine, or pass --smoke")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    step = "model construction"
    try:
        torch.manual_seed(0)
        config = LlamaConfig(**cfg)
        config._attn_implementation = "sdpa"
        with torch.device(device):
            model = LlamaForCausalLM(config)
        if getattr(model.config, "_attn_implementation", None) != "sdpa" and hasattr(model, "set_attn_implementation"):
            model.set_attn_implementation("sdpa")
        result["attn_implementation"] = getattr(model.config, "_attn_implementation", None)
        if result["attn_implementation"] != "sdpa":
            raise BenchError(f"transformers {transformers.__version__} built the model with attention "
                             f"{result['attn_implementation']!r}, not sdpa", "check the transformers install")
        model.float()   # fp32 master weights whatever the library's default dtype
        model.train()
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.config.use_cache = False
        rope = getattr(model.config, "rope_parameters", None) or getattr(model.config, "rope_scaling", None) or {}
        result["rope_type"] = (rope.get("rope_type", rope.get("type")) if isinstance(rope, dict) else str(rope)) \
            or "default"
        result["gradient_checkpointing"] = bool(getattr(model, "is_gradient_checkpointing", True))
        result["tied_embeddings"] = model.get_output_embeddings().weight is model.get_input_embeddings().weight
        result["params"] = sum(p.numel() for p in model.parameters())
        result["param_dtype"] = str(next(model.parameters()).dtype).replace("torch.", "")
        params = list(model.parameters())
        opt = torch.optim.AdamW(params, lr=1e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1,
                                fused=True if cuda else None)
        if cuda:
            sync()
            torch.cuda.reset_peak_memory_stats()
        times, losses = [], []
        vocab = cfg["vocab_size"]
        for k in range(spec["warmup"] + spec["steps"]):
            step = f"step {k + 1}"
            ids = torch.randint(0, vocab - 1, (1, S), device=device)
            sync()
            t0 = time.perf_counter()
            with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=bf16):
                loss = model(input_ids=ids, labels=ids, use_cache=False).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            sync()
            times.append(time.perf_counter() - t0)
            losses.append(loss.item())
    except BenchError:
        raise
    except Exception as e:  # noqa: BLE001 - an OOM is a result, anything else is reported by the parent
        if not is_oom(e):
            raise
        result.update(status="OOM", message=f"{step}: {str(e).splitlines()[0][:300]}")
        return result
    result.update(status="ok", step_seconds=times, losses=losses)
    if cuda:
        result["peak_mib"] = torch.cuda.max_memory_allocated() / 2**20
        result["peak_reserved_mib"] = torch.cuda.max_memory_reserved() / 2**20
    else:
        result["peak_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return result


def worker_main(kind, spec_path):
    spec = json.loads(pathlib.Path(spec_path).read_text())
    try:
        result = {"matmul": worker_matmul, "hf": worker_hf}[kind](spec)
    except BenchError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    pathlib.Path(spec["result"]).write_text(json.dumps(result))


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("matmul", "hf"):
        sys.exit(f"usage: {sys.argv[0]} matmul|hf SPEC.json (run by gpu_bench.py)")
    worker_main(sys.argv[1], sys.argv[2])
