#!/usr/bin/env python3
"""Plots one or more runs' metrics.jsonl against the step: loss and eval loss, learning rate, tokens/s, MFU (when
known) and peak memory (host RSS; GPU when known); several runs are overlaid, labelled by their directory.

usage: tools/plot_metrics.py RUN [RUN ...] [-o metrics.png]
  RUN: an ulysses-train --output directory (or its metrics.jsonl)
"""
import argparse
import json
import pathlib
import sys

import matplotlib

matplotlib.use("Agg")   # files only: no display needed
import matplotlib.pyplot as plt  # noqa: E402


def read(run):
    path = pathlib.Path(run)
    path = path if path.is_file() else path / "metrics.jsonl"
    if not path.exists():
        sys.exit(f"error: {path} does not exist — HINT: pass an ulysses-train --output directory")
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    steps = [r for r in rows if "loss" in r]
    evals = [r for r in rows if "eval_loss" in r]
    return (path.parent.name if path.name == "metrics.jsonl" else path.stem), steps, evals


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+")
    ap.add_argument("-o", "--output", default="metrics.png")
    a = ap.parse_args()
    runs = [read(r) for r in a.runs]
    panels = [("loss", "loss"), ("lr", "learning rate"), ("tokens_per_s", "tokens/s"), ("mfu", "MFU"),
              ("peak_rss_mib", "peak memory (MiB)")]
    fig, axes = plt.subplots(len(panels), 1, figsize=(8, 2.4 * len(panels)), sharex=True)
    for (key, title), ax in zip(panels, axes):
        for name, steps, evals in runs:
            xs = [r["step"] for r in steps if key in r]
            if xs:
                ax.plot(xs, [r[key] for r in steps if key in r], label=name if key != "peak_rss_mib" else f"{name} host")
            if key == "loss" and evals:
                ax.plot([r["step"] for r in evals], [r["eval_loss"] for r in evals], "o--", label=f"{name} eval")
            if key == "peak_rss_mib" and any("peak_gpu_mib" in r for r in steps):
                ax.plot([r["step"] for r in steps if "peak_gpu_mib" in r],
                        [r["peak_gpu_mib"] for r in steps if "peak_gpu_mib" in r], label=f"{name} GPU")
        ax.set_ylabel(title)
        if ax.lines:
            ax.legend(fontsize="small")
        else:
            ax.text(0.5, 0.5, "not recorded (CPU run)" if key == "mfu" else "not recorded", ha="center",
                    va="center", transform=ax.transAxes)
    axes[-1].set_xlabel("step")
    fig.tight_layout()
    fig.savefig(a.output, dpi=100)
    print(f"wrote {a.output} ({len(runs)} run{'s' if len(runs) != 1 else ''})")


if __name__ == "__main__":
    main()
