#!/usr/bin/env python3
"""The length tables of docs/cluster-guide.md, recomputed with ulysses-plan: the longest sequence each row's layout
reaches with ALST's features (ZeRO-3, optimizer and every layer input offloaded, TiledMLP, tiled logits; 80 GiB
H100s — or 141 GB H200s where the row says so —, 1.9 TiB host per node), for ALST's constants (profile alst-h100,
--prefetch off) and for ours (profile h100 or h200) in --precision bf16 and amp-bf16, with --prefetch auto (on for a
GPU) and, in parentheses, off; and ours in bf16 with attention in head groups (--attention-head-groups auto: the
least G that fits the longest length), with the parameters offloaded too (--offload-params) where that reaches further,
and what stops the next length (ulysses-plan's refusal one unit past it). Then LoRA (rank 16 on all seven projections,
the frozen bf16 base sharded over the ranks) with the same features, against ALST's full fine-tune on the same GPUs.
Then the mixtures of experts (Qwen3-30B-A3B against TRL's 1M on the same 8 H100s, Mixtral-8x7B) with what expert
parallelism would move at their longest. Then Llama-3.1-8B past one node and past its 32 heads: SP 32 as pure Ulysses over 4 nodes against Ulysses 8 inside
each node × a ring of 4 (--sp-ring), and SP 64 and 128 as Ulysses 8 × a ring of 8 and 16. The byte model's own
lengths, as the records are measured maxima: --headroom 0 (ulysses-plan's default keeps 5% free on the counted h100/h200 profiles).

usage: tools/length_table.py [--build build]     prints the markdown rows; nothing else is written
"""
import argparse
import json
import pathlib
import re
import subprocess
import sys
import tempfile


def llama(h, i, layers, heads, kv, vocab, **kw):
    return dict({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": vocab, "hidden_size": h,
                 "intermediate_size": i, "num_hidden_layers": layers, "num_attention_heads": heads,
                 "num_key_value_heads": kv, "hidden_act": "silu", "max_position_embeddings": 131072,
                 "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "tie_word_embeddings": False}, **kw)


MODELS = {"Llama-3.1-8B": llama(4096, 14336, 32, 32, 8, 128256),
          "Llama-3.1-70B": llama(8192, 28672, 80, 64, 8, 128256),
          "Qwen3-32B": llama(5120, 25600, 64, 64, 8, 151936, head_dim=128, architectures=["Qwen3ForCausalLM"],
                             model_type="qwen3")}
# Mixtures of experts (issue 60): Qwen3-30B-A3B and Mixtral-8x7B as their config.json ship them
MOE_MODELS = {"Qwen3-30B-A3B": llama(2048, 6144, 48, 32, 4, 151936, head_dim=128, architectures=["Qwen3MoeForCausalLM"],
                                     model_type="qwen3_moe", num_experts=128, num_experts_per_tok=8,
                                     moe_intermediate_size=768, norm_topk_prob=True, decoder_sparse_step=1,
                                     mlp_only_layers=[], rope_theta=1e6, rms_norm_eps=1e-6),
              "Mixtral-8x7B": llama(4096, 14336, 32, 32, 8, 32000, architectures=["MixtralForCausalLM"],
                                    model_type="mixtral", num_local_experts=8, num_experts_per_tok=2, rope_theta=1e6,
                                    sliding_window=None)}
# (model, nodes, gpus per node, SP, the published figure or None, its source)
MOE_ROWS = [("Qwen3-30B-A3B", 1, 8, 8, "1M", "TRL"), ("Mixtral-8x7B", 1, 8, 8, None, None)]
ALL = ["--offload-optimizer", "--offload-checkpoints", "-1", "--tiled-mlp", "--tiled-logits"]
BASE = ["--offload-optimizer", "--activation-checkpointing"]
LONGEST = ["--attention-head-groups", "auto", "--offload-params"]
# (model, nodes, gpus per node, SP, flags, the published figure, its source[, GPU]); UPipe's 8M and 4M: its README's
# two-node benchmarks (torchtitan/exps/*/run_all_multinode_*.sh, 8 GPUs a node)
ROWS = [("Llama-3.1-8B", 1, 1, 1, ALL, "500K", "ALST"), ("Llama-3.1-8B", 1, 1, 1, ALL, "1.2M", "ALST", "H200"),
        ("Llama-3.1-8B", 1, 8, 8, ALL, "3.7M", "ALST"), ("Llama-3.1-8B", 1, 8, 8, ALL, "5M", "UPipe"),
        ("Llama-3.1-8B", 2, 8, 16, ALL, "8M", "UPipe"), ("Llama-3.1-8B", 4, 8, 32, ALL, "15M", "ALST"),
        ("Llama-3.1-70B", 1, 8, 8, BASE + ["--tiled-mlp", "--tiled-logits"], "200K†", "ALST"),
        ("Llama-3.1-70B", 2, 8, 16, ALL, "1.2M†", "ALST"), ("Llama-3.1-70B", 4, 8, 32, ALL, "4M†", "ALST"),
        ("Qwen3-32B", 1, 8, 8, ALL, "1.55M†", "ALST"), ("Qwen3-32B", 2, 8, 16, ALL, "4M†", "ALST"),
        ("Qwen3-32B", 2, 8, 16, ALL, "4M", "UPipe"), ("Qwen3-32B", 4, 8, 32, ALL, "7M†", "ALST")]
GPU_MEMORY = {"H100": "80GiB", "H200": "141GB"}
# LoRA over the frozen base, sharded: against ALST's full fine-tune rows of the same model and GPUs
LORA = ["--lora-rank", "16", "--lora-targets", "all-linear", "--sharding", "full_shard"]
LORA_ROWS = [("Llama-3.1-70B", 1, 8, 8, "200K†"), ("Llama-3.1-70B", 2, 8, 16, "1.2M†"), ("Qwen3-32B", 1, 8, 8, "1.55M†")]
# Past a node and past the head limit (Llama-3.1-8B: 32 heads): (model, nodes, gpus per node, SP, ring, published)
RING_ROWS = [("Llama-3.1-8B", 4, 8, 32, 1, "15M"), ("Llama-3.1-8B", 4, 8, 32, 4, "15M"),
             ("Llama-3.1-8B", 8, 8, 64, 8, None), ("Llama-3.1-8B", 16, 8, 128, 16, None)]
ABLATION = [("ZeRO-3, optimizer offload, checkpointing (SP 1)", 1, BASE, "32K"),
            ("+ tiled logits and loss", 1, BASE + ["--tiled-logits"], "160K"),
            ("+ Ulysses SP 8", 8, BASE + ["--tiled-logits"], "1.1M"),
            ("+ TiledMLP", 8, BASE + ["--tiled-logits", "--tiled-mlp"], "1.2M"),
            ("SP + tiled logits + layer-input offload (no TiledMLP)", 8,
             ["--offload-optimizer", "--offload-checkpoints", "-1", "--tiled-logits"], "2.4M"),
            ("all", 8, ALL, "3.7M")]


def tokens(text):
    n = float(text.rstrip("†")[:-1]) * (1e3 if text.rstrip("†")[-1] == "K" else 1e6)
    return n


def human(n):
    return f"{n / 1e6:.2f}M" if n >= 1e6 else f"{n / 1e3:.0f}K"


# The records' 16- and 32-GPU rows run SP across nodes (ALST and UPipe over InfiniBand): the trainer's opt-in.
ACROSS = ["--allow-sp-across-islands"]


def plan(a, cfg, nodes, gpus, sp, flags, profile, precision, prefetch, gpu="H100"):
    """ulysses-plan --json's answer for the row's layout: its longest length and the head groups it settles."""
    cmd = [f"{a.build}/src/plan/ulysses-plan", "--model", str(cfg), "--nodes", str(nodes), "--gpus-per-node",
           str(gpus), "--sp", str(sp), "--precision", precision, "--host-memory", "1.9TiB", "--profile", profile,
           "--gpu-memory", GPU_MEMORY[gpu], "--prefetch", prefetch, "--headroom", "0", *ACROSS, "--json"] + flags
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)}: exit {p.returncode}: {p.stderr.strip()}")
    return json.loads(p.stdout)


def longest(*args, **kw):
    return plan(*args, **kw)["longest"]


def ours(a, cfg, nodes, gpus, sp, flags, precision, gpu="H100"):
    """(the length with --prefetch auto, its text with --prefetch off beside it, the head groups with auto)."""
    profile = gpu.lower()
    on, off = (plan(a, cfg, nodes, gpus, sp, flags, profile, precision, x, gpu) for x in ("auto", "off"))
    return on["longest"], f"{human(on['longest'])} ({human(off['longest'])})", on["attention_head_groups"]


def binds(a, cfg, nodes, gpus, sp, flags, gpu, length):
    """What stops the next length (one sequence unit past `length`: SP × 64, twice that with a ring): ulysses-plan's
    refusal, shortened."""
    unit = 64 * sp * (2 if "--sp-ring" in flags and flags[flags.index("--sp-ring") + 1] != "1" else 1)
    cmd = [f"{a.build}/src/plan/ulysses-plan", "--model", str(cfg), "--nodes", str(nodes), "--gpus-per-node",
           str(gpus), "--sp", str(sp), "--precision", "bf16", "--host-memory", "1.9TiB", "--profile", gpu.lower(),
           "--gpu-memory", GPU_MEMORY[gpu], "--headroom", "0", *ACROSS, "--seq-len", str(length + unit)] + flags
    err = subprocess.run(cmd, capture_output=True, text=True).stderr
    m = re.search(r"(GPU|host) memory needs ([\d.]+ \w+) of ([\d.]+ \w+) usable", err)
    if m:
        return f"{m.group(1)} memory ({m.group(3)} usable)"
    m = re.search(r"the (.+?) \[", err)
    return f"2^31 elements: {m.group(1)}" if m else err.strip()[:80]


def best(a, cfg, nodes, gpus, sp, flags, gpu):
    """Ours at its longest: head groups (auto), with the parameters offloaded where that reaches further (it moves
    2 bytes a parameter from the GPU to the node's host memory): (length, its text, what binds next)."""
    tries = []
    for extra in (["--attention-head-groups", "auto"], LONGEST):
        length, text, g = ours(a, cfg, nodes, gpus, sp, flags + extra, "bf16", gpu)
        tries.append((length, f"{text}, G={g}" + (", params offloaded" if extra == LONGEST else ""), extra))
    length, text, extra = max(tries, key=lambda t: t[0])
    return length, text, binds(a, cfg, nodes, gpus, sp, flags + extra, gpu, length)


def moe_tables(a, cfgs):
    """The MoE rows, then what expert parallelism would move at each row's longest length, against what sharding the
    experts moves: per layer and rank, ZeRO-3 gathers the layer in bf16 twice (forward, and again for the
    checkpointed backward) and reduce-scatters its fp32 gradient (8 bytes a parameter); EP's all-to-alls send each of
    the rank's T tokens to its k experts and back, in forward, recompute and backward (6 · T · k · hidden · 2 bytes).
    Both times (W - 1) / W crosses the wire. EP moves less only below T = 2 · E · I / k tokens a rank."""
    print("| model | parameters (active) | GPUs (SP) | published | ours, bf16 | ours / published | ours, bf16, head "
          "groups (+ parameter offload) | ours / published | what binds |")
    print("|---|---|---|---|---|---|---|---|---|")
    longest_of = {}
    for model, nodes, gpus, sp, figure, source in MOE_ROWS:
        cfg = cfgs[model]
        on = plan(a, cfg, nodes, gpus, sp, ALL, "h100", "bf16", "auto")
        bf16, bf16_text, _ = ours(a, cfg, nodes, gpus, sp, ALL, "bf16")
        longest_ours, best_text, bound = best(a, cfg, nodes, gpus, sp, ALL, "H100")
        longest_of[model] = (longest_ours, sp)
        ratio = (lambda n: f"{n / tokens(figure):.2f}") if figure else (lambda n: "—")
        print(f"| {model} | {on['parameters'] / 1e9:.1f}B ({on['active_parameters'] / 1e9:.1f}B) | {nodes * gpus} H100 "
              f"({sp}) | {f'{figure} ({source})' if figure else '—'} | {bf16_text} | {ratio(bf16)} | {best_text} | "
              f"{ratio(longest_ours)} | {bound} |")
    print()
    print("| model | tokens a rank (T) | picks per expert a rank (T·k/E) | a layer's experts, ZeRO-3 (8 B a parameter) | "
          "EP's token all-to-alls a layer (6·T·k·hidden·2 B) | EP / ZeRO-3 | EP moves less below T = |")
    print("|---|---|---|---|---|---|---|")
    for model, (length, sp) in longest_of.items():
        c = MOE_MODELS[model]
        E = c.get("num_experts") or c["num_local_experts"]
        k, h = c["num_experts_per_tok"], c["hidden_size"]
        I = c.get("moe_intermediate_size") or c["intermediate_size"]
        T = length // sp
        zero = 8 * E * 3 * h * I
        ep = 6 * T * k * h * 2
        print(f"| {model} | {human(T)} | {human(T * k / E)} | {zero / 2**30:.1f} GiB | {ep / 2**30:.1f} GiB | "
              f"{ep / zero:.1f} | {human(2 * E * I / k)} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cfgs = {}
        for name, c in {**MODELS, **MOE_MODELS}.items():
            cfgs[name] = pathlib.Path(tmp, f"{name}.json")
            cfgs[name].write_text(json.dumps(c))
        print("| model | GPUs (SP) | published | planner, alst-h100 | error | ours, bf16 | ours / published | "
              "ours, amp-bf16 | ours, bf16, head groups (+ parameter offload) | ours / published | what binds |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        for model, nodes, gpus, sp, flags, figure, source, *rest in ROWS:
            cfg, gpu = cfgs[model], (rest or ["H100"])[0]
            alst = longest(a, cfg, nodes, gpus, sp, flags, "alst-h100", "bf16", "off", gpu)
            bf16, bf16_text, _ = ours(a, cfg, nodes, gpus, sp, flags, "bf16", gpu)
            _, amp_text, _ = ours(a, cfg, nodes, gpus, sp, flags, "amp-bf16", gpu)
            error = f"{100 * (alst / tokens(figure) - 1):+.0f}%" if source == "ALST" else "—"
            longest_ours, best_text, bound = best(a, cfg, nodes, gpus, sp, flags, gpu)
            print(f"| {model} | {nodes * gpus} {gpu} ({sp}) | {figure} ({source}) | {human(alst)} | {error} | "
                  f"{bf16_text} | {bf16 / tokens(figure):.2f} | {amp_text} | {best_text} | "
                  f"{longest_ours / tokens(figure):.2f} | {bound} |")
        print()
        print("| model | GPUs (SP) | ALST, full fine-tune | ours, LoRA, bf16 | ours / ALST | ours, LoRA, head groups "
              "(+ parameter offload) | ours / ALST | what binds |")
        print("|---|---|---|---|---|---|---|---|")
        for model, nodes, gpus, sp, figure in LORA_ROWS:
            cfg, flags = cfgs[model], ALL + LORA
            lora, lora_text, _ = ours(a, cfg, nodes, gpus, sp, flags, "bf16")
            longest_ours, best_text, bound = best(a, cfg, nodes, gpus, sp, flags, "H100")
            print(f"| {model} | {nodes * gpus} H100 ({sp}) | {figure} | {lora_text} | {lora / tokens(figure):.2f} | "
                  f"{best_text} | {longest_ours / tokens(figure):.2f} | {bound} |")
        print()
        print("| model | GPUs (SP) | layout | published | ours, bf16, head groups (+ parameter offload) | "
              "ours / published | what binds |")
        print("|---|---|---|---|---|---|---|")
        for model, nodes, gpus, sp, ring, figure in RING_ROWS:
            flags = ALL + ["--sp-ring", str(ring)]
            longest_ours, best_text, bound = best(a, cfgs[model], nodes, gpus, sp, flags, "H100")
            layout = f"Ulysses {sp // ring} × ring {ring}" if ring > 1 else f"Ulysses {sp} (across nodes)"
            ratio = f"{longest_ours / tokens(figure):.2f}" if figure else "—"
            print(f"| {model} | {nodes * gpus} H100 ({sp}) | {layout} | {figure or '— (past the head limit)'} | "
                  f"{best_text} | {ratio} | {bound} |")
        print()
        moe_tables(a, cfgs)
        print()
        print("| features | ALST | planner, alst-h100 | error | ours, bf16 (h100) | ours / ALST | ours, amp-bf16 (h100) |")
        print("|---|---|---|---|---|---|---|")
        for what, sp, flags, figure in ABLATION:
            cfg = cfgs["Llama-3.1-8B"]
            alst = longest(a, cfg, 1, 8, sp, flags, "alst-h100", "bf16", "off")
            bf16, bf16_text, _ = ours(a, cfg, 1, 8, sp, flags, "bf16")
            _, amp_text, _ = ours(a, cfg, 1, 8, sp, flags, "amp-bf16")
            error = f"{100 * (alst / tokens(figure) - 1):+.0f}%"
            print(f"| {what} | {figure} | {human(alst)} | {error} | {bf16_text} | {bf16 / tokens(figure):.2f} | "
                  f"{amp_text} |")


if __name__ == "__main__":
    main()
