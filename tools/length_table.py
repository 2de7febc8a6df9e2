#!/usr/bin/env python3
"""The length tables of docs/cluster-guide.md, recomputed with ulysses-plan: the longest sequence each row's layout
reaches with ALST's features (ZeRO-3, optimizer and every layer input offloaded, TiledMLP, tiled logits; 80 GiB
H100s, 1.9 TiB host per node), for ALST's constants (profile alst-h100, --prefetch off) and for ours (profile h100)
in --precision bf16 and amp-bf16, with --prefetch auto (on for a GPU) and, in parentheses, off; and ours in bf16 with
the most attention head groups the heads allow at that SP degree (--attention-head-groups, arch::check_head_groups).

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
ALL = ["--offload-optimizer", "--offload-checkpoints", "-1", "--tiled-mlp", "--tiled-logits"]
BASE = ["--offload-optimizer", "--activation-checkpointing"]
# (model, nodes, gpus per node, SP, flags, the published figure, its source)
ROWS = [("Llama-3.1-8B", 1, 1, 1, ALL, "500K", "ALST"), ("Llama-3.1-8B", 1, 8, 8, ALL, "3.7M", "ALST"),
        ("Llama-3.1-8B", 1, 8, 8, ALL, "5M", "UPipe"), ("Llama-3.1-8B", 4, 8, 32, ALL, "15M", "ALST"),
        ("Llama-3.1-70B", 1, 8, 8, BASE + ["--tiled-mlp", "--tiled-logits"], "200K†", "ALST"),
        ("Llama-3.1-70B", 2, 8, 16, ALL, "1.2M†", "ALST"), ("Llama-3.1-70B", 4, 8, 32, ALL, "4M†", "ALST"),
        ("Qwen3-32B", 1, 8, 8, ALL, "1.55M†", "ALST"), ("Qwen3-32B", 2, 8, 16, ALL, "4M†", "ALST"),
        ("Qwen3-32B", 4, 8, 32, ALL, "7M†", "ALST")]
ABLATION = [("ZeRO-3, optimizer offload, checkpointing (SP 1)", 1, BASE, "32K"),
            ("+ tiled logits and loss", 1, BASE + ["--tiled-logits"], "160K"),
            ("+ Ulysses SP 8", 8, BASE + ["--tiled-logits"], "1.1M"),
            ("+ TiledMLP", 8, BASE + ["--tiled-logits", "--tiled-mlp"], "1.2M"),
            ("SP + tiled logits + layer-input offload (no TiledMLP)", 8,
             ["--offload-optimizer", "--offload-checkpoints", "-1", "--tiled-logits"], "2.4M"),
            ("all", 8, ALL, "3.7M")]


def most_head_groups(cfg, sp):
    """The largest G whose groups hold whole KV heads (or lie inside one) and split over sp (arch::check_head_groups)."""
    heads, kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    def ok(g):
        if heads % g or (kv % g and g % kv):
            return False
        gh, gkv = heads // g, max(kv // g, 1)
        return gh % sp == 0 and (gkv % sp == 0 or sp % gkv == 0)
    return max(g for g in range(1, heads + 1) if ok(g))


def tokens(text):
    n = float(text.rstrip("†")[:-1]) * (1e3 if text.rstrip("†")[-1] == "K" else 1e6)
    return n


def human(n):
    return f"{n / 1e6:.2f}M" if n >= 1e6 else f"{n / 1e3:.0f}K"


def longest(a, cfg, nodes, gpus, sp, flags, profile, precision, prefetch):
    cmd = [f"{a.build}/src/plan/ulysses-plan", "--model", str(cfg), "--nodes", str(nodes), "--gpus-per-node",
           str(gpus), "--sp", str(sp), "--precision", precision, "--host-memory", "1.9TiB", "--profile", profile,
           "--prefetch", prefetch] + flags
    p = subprocess.run(cmd, capture_output=True, text=True)
    m = re.search(r"longest sequence that fits: (\d+) tokens", p.stdout)
    if not m:
        sys.exit(f"{' '.join(cmd)}: no longest sequence in its output (exit {p.returncode}): {p.stderr.strip()}")
    return int(m.group(1))


def ours(a, cfg, nodes, gpus, sp, flags, precision):
    on, off = (longest(a, cfg, nodes, gpus, sp, flags, "h100", precision, x) for x in ("auto", "off"))
    return on, f"{human(on)} ({human(off)})"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cfgs = {}
        for name, c in MODELS.items():
            cfgs[name] = pathlib.Path(tmp, f"{name}.json")
            cfgs[name].write_text(json.dumps(c))
        print("| model | H100s (SP) | published | planner, alst-h100 | error | ours, bf16 (h100) | ours / published | "
              "ours, amp-bf16 (h100) | ours, bf16, head groups | ours / published |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for model, nodes, gpus, sp, flags, figure, source in ROWS:
            cfg = cfgs[model]
            alst = longest(a, cfg, nodes, gpus, sp, flags, "alst-h100", "bf16", "off")
            bf16, bf16_text = ours(a, cfg, nodes, gpus, sp, flags, "bf16")
            _, amp_text = ours(a, cfg, nodes, gpus, sp, flags, "amp-bf16")
            error = f"{100 * (alst / tokens(figure) - 1):+.0f}%" if source == "ALST" else "—"
            g = most_head_groups(MODELS[model], sp)
            grouped, grouped_text = ours(a, cfg, nodes, gpus, sp, flags + ["--attention-head-groups", str(g)], "bf16")
            print(f"| {model} | {nodes * gpus} ({sp}) | {figure} ({source}) | {human(alst)} | {error} | {bf16_text} | "
                  f"{bf16 / tokens(figure):.2f} | {amp_text} | {grouped_text}, G={g} | "
                  f"{grouped / tokens(figure):.2f} |")
        print()
        print("| features | ALST | planner, alst-h100 | error | ours, bf16 (h100) | ours / ALST | ours, amp-bf16 (h100) |")
        print("|---|---|---|---|---|---|---|")
        for what, sp, flags, figure in ABLATION:
            cfg = cfgs["Llama-3.1-8B"]
            alst = longest(a, cfg, 1, 8, sp, flags, "alst-h100", "bf16", "off")
            bf16, bf16_text = ours(a, cfg, 1, 8, sp, flags, "bf16")
            _, amp_text = ours(a, cfg, 1, 8, sp, flags, "amp-bf16")
            error = f"{100 * (alst / tokens(figure) - 1):+.0f}%"
            print(f"| {what} | {figure} | {human(alst)} | {error} | {bf16_text} | {bf16 / tokens(figure):.2f} | "
                  f"{amp_text} |")


if __name__ == "__main__":
    main()
