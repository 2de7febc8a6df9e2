"""No behaviour change on today's architectures: the plans, parameter tables, losses, checkpoints and exports of a
fixed set of runs equal those recorded in golden/no_behaviour_change.json, written by the tools as they were before
the layer description (arch/layer_spec.hpp) took over from the hand-kept lists (commit 1a5cff2).

Usage: test_no_behaviour_change.py PACK TRAIN CKPT PLAN MPIEXEC [--write]   (--write records the golden anew)

What is compared, and how:
- structure, always and exactly: ulysses-plan's --json and text output for 4 model shapes × 8 flag sets (pure
  arithmetic: the same on every machine); per run, the checkpoint's and the exports' tensor names, shapes, dtypes and
  file offsets (safetensors headers), and the exports' config.json;
- bytes, where this machine computes as the recording one did (the same LibTorch CPU kernels: the CPU capability
  torch reports and the CPU's model name): the losses and gradient norms of every step, exactly, and the SHA-256 of
  each checkpoint tensor file and export. Elsewhere the test says it compared the structure only.
The runs: the tiny sample Llama and four variants of it (Mistral with a sliding window, Qwen2 with q/k/v biases,
Qwen3 with q/k norms and head_dim 24, a tied Llama with attention biases and llama3 RoPE scaling), 2 steps each at
SP 1, exported to Hugging Face; the Llama also at SP 2 in 2 head groups with checkpointing and TiledMLP, and with
LoRA on all seven projections, exported to PEFT.
"""
import hashlib
import json
import pathlib
import platform
import struct
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
GOLDEN = HERE / "golden/no_behaviour_change.json"
SAMPLE = ROOT / "datasets/sample/licenses.jsonl.gz"
TINY = json.loads((ROOT / "datasets/sample/tiny-llama/config.json").read_text())


def variant(drop=(), **changes):
    """The tiny Llama's config.json with `changes`, less the keys in `drop`."""
    return {k: v for k, v in dict(TINY, **changes).items() if k not in drop}


QWEN = dict(use_sliding_window=False, sliding_window=None, max_window_layers=2)
MODELS = {
    "llama": TINY,
    "mistral": variant(architectures=["MistralForCausalLM"], model_type="mistral", sliding_window=6,
                       drop=("attention_bias", "mlp_bias")),
    "qwen2": variant(architectures=["Qwen2ForCausalLM"], model_type="qwen2", drop=("attention_bias", "mlp_bias"),
                     **QWEN),
    "qwen3": variant(architectures=["Qwen3ForCausalLM"], model_type="qwen3", head_dim=24, drop=("mlp_bias",), **QWEN),
    "llama_tied": variant(tie_word_embeddings=True, attention_bias=True, rope_theta=500000.0,
                          rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                        "high_freq_factor": 4.0, "original_max_position_embeddings": 32}),
}

LLAMA_8B = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 128256, "hidden_size": 4096,
            "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
            "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
            "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                             "original_max_position_embeddings": 8192}}
PLAN_MODELS = {
    "llama8b": LLAMA_8B,
    "llama8b_tied": dict(LLAMA_8B, tie_word_embeddings=True),
    "mistral7b": {"architectures": ["MistralForCausalLM"], "model_type": "mistral", "vocab_size": 32768,
                  "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
                  "num_key_value_heads": 8, "head_dim": 128, "max_position_embeddings": 32768, "rms_norm_eps": 1e-5,
                  "rope_theta": 1000000.0, "sliding_window": 4096},
    "qwen3_8b": {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": 151936,
                 "hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 36, "num_attention_heads": 32,
                 "num_key_value_heads": 8, "head_dim": 128, "max_position_embeddings": 40960, "rms_norm_eps": 1e-6,
                 "rope_theta": 1000000.0, "use_sliding_window": False, "sliding_window": None,
                 "max_window_layers": 36, "tie_word_embeddings": False, "attention_bias": False},
}
PLAN_FLAGS = {
    "plain": ["--sp", 8],
    "memory": ["--sp", 8, "--seq-len", "1M", "--precision", "bf16", "--offload-optimizer", "--offload-checkpoints",
               -1, "--tiled-mlp", "--tiled-logits"],
    "groups": ["--sp", 4, "--attention-head-groups", 4, "--activation-checkpointing", "--precision", "bf16"],
    "amp": ["--sp", 8, "--precision", "amp-bf16", "--sharding", "no_shard"],
    "fp32": ["--sp", 2, "--precision", "fp32", "--tiled-logits", "--offload-params"],
    "lora": ["--sp", 8, "--lora-rank", 16, "--lora-targets", "all-linear", "--precision", "bf16"],
    "lora_sharded": ["--sp", 8, "--lora-rank", 8, "--offload-optimizer", "--sharding", "full_shard"],
    "ring": ["--nodes", 4, "--sp", 32, "--sp-ring", 4, "--seq-len", "4M", "--precision", "bf16",
             "--offload-optimizer", "--offload-checkpoints", -1, "--tiled-mlp", "--tiled-logits"],
}
TRAIN = ["--threads", 1, "--lr", 3e-3, "--warmup", 2, "--steps", 2]
RUNS = {name: (1, name, []) for name in MODELS}
RUNS["llama_sp2_groups"] = (2, "llama", ["--sp", 2, "--attention-head-groups", 2, "--activation-checkpointing",
                                         "--tiled-mlp"])
RUNS["llama_lora"] = (1, "llama", ["--lora-rank", 4, "--lora-targets", "all-linear"])


def run(cmd, **kw):
    p = subprocess.run(list(map(str, cmd)), capture_output=True, text=True, timeout=300, **kw)
    if p.returncode != 0:
        sys.exit(f"{' '.join(map(str, cmd))}: exit {p.returncode}\n{p.stderr[-3000:]}")
    return p.stdout


def safetensors_header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n))


def sha256(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def machine():
    """What decides the bytes a CPU run computes: LibTorch's kernels for this CPU."""
    import torch
    model = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    return {"cpu_capability": torch.backends.cpu.get_cpu_capability(), "cpu": model, "arch": platform.machine()}


def plans(plan, tmp):
    out = {}
    for name, config in PLAN_MODELS.items():
        path = tmp / f"{name}.json"
        path.write_text(json.dumps(config))
        for flags_name, flags in PLAN_FLAGS.items():
            base = list(map(str, [plan, "--model", path, *flags]))
            text, js = (subprocess.run(cmd, capture_output=True, text=True) for cmd in (base, [*base, "--json"]))
            out[f"{name} {flags_name}"] = {"exit": [text.returncode, js.returncode], "json": json.loads(js.stdout),
                                          "text": (text.stdout + text.stderr).replace(str(path), "CONFIG").splitlines()}
    return out


def training_runs(tools, tmp):
    pack, train, ckpt, mpiexec = tools
    data = tmp / "packed"
    run([pack, "pack", SAMPLE, "-o", data, "--seq-len", 256, "--sp", 4, "--pad-id", 258, "--model-config",
         ROOT / "datasets/sample/tiny-llama/config.json"])
    structure, bytes_ = {}, {}
    for name, (ranks, model, extra) in RUNS.items():
        config = tmp / f"{model}.json"
        config.write_text(json.dumps(MODELS[model]))
        out = tmp / name
        run([mpiexec, "-n", ranks, train, "--data", data, "--model-config", config, "--output", out, *TRAIN, *extra])
        step = out / "checkpoints/step-0000002"
        metrics = [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines()]
        files = sorted(p.name for p in step.glob("*.safetensors"))
        export = tmp / f"{name}.export"
        if "--lora-rank" in extra:
            run([ckpt, "export-peft", step, "-o", export])
        else:
            run([ckpt, "export-hf", step, "-o", export])
        exported = sorted(p.name for p in export.iterdir() if p.suffix == ".safetensors")
        structure[name] = {"checkpoint": {f: safetensors_header(step / f) for f in files},
                           "export": {f: safetensors_header(export / f) for f in exported},
                           "export_config": json.loads(next(export.glob("*config.json")).read_text())}
        bytes_[name] = {"loss": [m["loss"] for m in metrics], "grad_norm": [m["grad_norm"] for m in metrics],
                        "checkpoint": {f: sha256(step / f) for f in files},
                        "export": {f: sha256(export / f) for f in exported}}
    return structure, bytes_


def differences(want, got, where=""):
    """Paths at which two JSON values differ (at most a few)."""
    if isinstance(want, dict) and isinstance(got, dict):
        out = [f"{where}/{k}: only one side has it" for k in sorted(set(want) ^ set(got))]
        for k in sorted(set(want) & set(got)):
            out += differences(want[k], got[k], f"{where}/{k}")
        return out
    if isinstance(want, list) and isinstance(got, list) and len(want) == len(got):
        return [d for i, (a, b) in enumerate(zip(want, got)) for d in differences(a, b, f"{where}[{i}]")]
    return [] if want == got else [f"{where}: recorded {json.dumps(want)[:200]}, now {json.dumps(got)[:200]}"]


def main():
    args = sys.argv[1:]
    write = "--write" in args
    args = [a for a in args if a != "--write"]
    if len(args) != 5:
        sys.exit(__doc__)
    pack, train, ckpt, plan, mpiexec = args
    with tempfile.TemporaryDirectory() as t:
        tmp = pathlib.Path(t)
        structure, bytes_ = training_runs((pack, train, ckpt, mpiexec), tmp)
        now = {"plans": plans(plan, tmp), "structure": structure, "bytes": bytes_, "machine": machine()}
    if write:
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(json.dumps(now, indent=1, sort_keys=True) + "\n")
        print(f"wrote {GOLDEN}")
        return
    golden = json.loads(GOLDEN.read_text())
    diffs = differences(golden["plans"], now["plans"], "plans") + differences(golden["structure"], now["structure"],
                                                                             "structure")
    same_machine = golden["machine"] == now["machine"]
    if same_machine:
        diffs += differences(golden["bytes"], now["bytes"], "bytes")
    if diffs:
        print(f"{len(diffs)} differences from {GOLDEN.name}:\n  " + "\n  ".join(diffs[:20]))
        sys.exit(1)
    print(f"{len(now['plans'])} plans and {len(RUNS)} runs' tensor layouts equal the recorded ones")
    print(f"losses, gradient norms and the bytes of every checkpoint and export equal: {len(RUNS)} runs" if same_machine
          else f"bytes not compared: recorded on {golden['machine']}, this is {now['machine']} (other CPU kernels)")


if __name__ == "__main__":
    main()
