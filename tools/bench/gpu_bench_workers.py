#!/usr/bin/env python3
"""The torch side of tools/bench/gpu_bench.py, run by it in child processes (torch is imported only here):

  gpu_bench_workers.py matmul SPEC.json   the bf16 (GPU) / fp32 (CPU) matmul ceiling
  gpu_bench_workers.py hf SPEC.json       one transformers run of a length: warmup + timed steps, with or
                                          without gradient checkpointing (and, for memory_bench --gpu, with
                                          ALST's memory stack: alst_stack.py), and the SDPA backend it used

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


def sdpa_backend_name(torch, query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa):
    """The backend torch's scaled_dot_product_attention dispatches these arguments to (torch._fused_sdp_choice:
    the same check the call itself makes, under the same global enable flags)."""
    choose = getattr(torch, "_fused_sdp_choice", None)
    if choose is None:
        return "unknown (this torch has no _fused_sdp_choice)"
    kwargs = {"attn_mask": attn_mask, "dropout_p": dropout_p, "is_causal": is_causal, "scale": scale}
    if enable_gqa:
        kwargs["enable_gqa"] = True
    try:
        index = int(choose(query, key, value, **kwargs))
    except Exception as e:  # noqa: BLE001 - a probe: say why it could not tell
        return f"unknown ({type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''})"
    try:
        from torch.nn.attention import SDPBackend
        return SDPBackend(index).name.lower()
    except (ImportError, ValueError, TypeError):
        return f"backend #{index}"


def sdpa_flags(torch):
    """The global enable flags of the SDPA backends (torch.backends.cuda.*_sdp_enabled; CPU runs honour them too)."""
    b = torch.backends.cuda
    flags = {}
    for name in ("flash", "mem_efficient", "math", "cudnn"):
        fn = getattr(b, f"{name}_sdp_enabled", None)
        if fn is not None:
            flags[name] = bool(fn())
    return flags


class SdpaProbe:
    """Wraps torch.nn.functional.scaled_dot_product_attention (which transformers' sdpa attention calls through
    the module attribute) and, while active, records the arguments of the calls and the backend each goes to."""

    def __init__(self, torch):
        self.torch, self.active, self.calls, self.choices, self.first = torch, False, 0, {}, None
        self.original = torch.nn.functional.scaled_dot_product_attention
        torch.nn.functional.scaled_dot_product_attention = self

    def autocast_dtype(self, t):
        try:
            dev = t.device.type
            return self.torch.get_autocast_dtype(dev) if self.torch.is_autocast_enabled(dev) else None
        except (AttributeError, TypeError, RuntimeError):   # a torch before the device_type forms
            return None

    def __call__(self, query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, **kwargs):
        cast = self.autocast_dtype(query)
        if cast is not None and query.dtype != cast and query.is_floating_point():
            # what autocast does to SDPA's inputs anyway (lower_precision_fp), done here so that the backend is
            # chosen for the dtype the kernel sees; never the case for transformers' Llama (q/k/v already cast)
            query, key, value = (x.to(cast) for x in (query, key, value))
            if attn_mask is not None and attn_mask.is_floating_point():
                attn_mask = attn_mask.to(cast)
        if self.active:
            gqa = bool(kwargs.get("enable_gqa", False))
            name = sdpa_backend_name(self.torch, query, key, value, attn_mask, dropout_p, is_causal, scale, gqa)
            self.calls += 1
            self.choices[name] = self.choices.get(name, 0) + 1
            if self.first is None:
                self.first = {"query": list(query.shape), "key": list(key.shape), "dtype":
                              str(query.dtype).replace("torch.", ""), "device": str(query.device),
                              "attn_mask": None if attn_mask is None else list(attn_mask.shape),
                              "is_causal": bool(is_causal), "enable_gqa": gqa, "dropout_p": dropout_p}
        return self.original(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
                             scale=scale, **kwargs)

    def result(self):
        backend = "+".join(sorted(self.choices)) if self.choices else \
            "not called (transformers did not go through torch.nn.functional.scaled_dot_product_attention)"
        return {"backend": backend, "choices": self.choices, "calls": self.calls, **(self.first or {}),
                "enabled": sdpa_flags(self.torch),
                "how": "torch._fused_sdp_choice on the arguments of transformers' calls in the first step"}


def worker_hf(spec):
    """transformers' side of one length: the same config, sdpa, autocast bf16 over fp32 weights, fused AdamW,
    clip 1.0, gradient checkpointing (use_reentrant=False) only when the spec asks for recomputation; one
    sequence of S tokens per step (plain causal LM: positions 0..S-1, an all-ones attention mask, labels =
    inputs, which the model shifts). Records the SDPA backend the first step's attention calls go to."""
    import torch
    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM

    device, S = spec["device"], spec["length"]
    cuda = device == "cuda"
    bf16 = spec["precision"] == "bf16"
    recompute = bool(spec.get("gradient_checkpointing"))
    alst_chunk = spec.get("alst_loss_chunk", 0)
    if alst_chunk:   # ALST's memory stack (memory_bench --gpu, side B), patched in before the model is built
        from alst_stack import patch_tiled_mlp, tiled_loss_sum
        patch_tiled_mlp(torch.bfloat16 if bf16 else None)
    cfg = json.loads(pathlib.Path(spec["config"]).read_text())
    result = {"transformers": transformers.__version__, "torch": torch.__version__}
    probe = SdpaProbe(torch)
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
        if recompute:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        else:
            model.gradient_checkpointing_disable()
        model.config.use_cache = False
        rope = getattr(model.config, "rope_parameters", None) or getattr(model.config, "rope_scaling", None) or {}
        result["rope_type"] = (rope.get("rope_type", rope.get("type")) if isinstance(rope, dict) else str(rope)) \
            or "default"
        result["gradient_checkpointing"] = bool(getattr(model, "is_gradient_checkpointing", recompute))
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
            # the all-ones mask a tokenizer gives: without it transformers (4.57 at least) takes the position ids it
            # makes for a packed batch, builds a dense [S, S] boolean mask and calls SDPA with it (is_causal=False,
            # K/V repeated to all heads), which rules out the flash kernel; with it, is_causal=True and no mask
            mask = torch.ones_like(ids)
            sync()
            probe.active = k == 0   # the first step only (backward's recomputation included); a cheap host check
            t0 = time.perf_counter()
            with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=bf16):
                if alst_chunk:   # the model's mean loss, its head and cross-entropy over token chunks
                    hidden = model.model(input_ids=ids, attention_mask=mask, use_cache=False).last_hidden_state
                    shifted = torch.cat([ids[:, 1:], torch.full_like(ids[:, :1], -100)], dim=1)
                    loss = tiled_loss_sum(model, hidden, shifted, alst_chunk, torch.bfloat16 if bf16 else None)
                    loss = loss / (S - 1)
                else:
                    loss = model(input_ids=ids, attention_mask=mask, labels=ids, use_cache=False).loss
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
        if probe.calls:
            result["sdpa"] = probe.result()
        return result
    probe.active = False
    result["alst_loss_chunk"] = alst_chunk
    result.update(status="ok", step_seconds=times, losses=losses, sdpa=probe.result(),
                  attention_mask="all ones [1, S] (no padding)")
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
