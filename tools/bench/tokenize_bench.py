#!/usr/bin/env python3
"""Tokenization speed: `ulysses-pack tokenize` against Hugging Face, on the same text, threads and tokenizer.

The text is tests/tokenize/text_corpus.py's (prose, code, CJK, emoji, …) repeated in shuffled order up to --mb
megabytes of UTF-8 as JSONL ({"text": …} per line); the tokenizer is its Llama 3-style byte-level BPE trained by
`tokenizers` with a 32,000-token vocabulary. Each side runs --repeat times on --threads threads; medians:

  ours      ulysses-pack tokenize TEXT.jsonl -o IDS.jsonl --threads T — the whole command: reading and parsing the
            JSONL, tokenizing, writing the ids
  rust      tokenizers' Tokenizer.encode_batch(texts) with RAYON_NUM_THREADS=T, the texts already in memory (the
            anchor: the library transformers' fast tokenizers call)
  datasets  datasets.Dataset.from_dict({"text": texts}).map(tokenizer, batched=True, num_proc=T) with a
            PreTrainedTokenizerFast of the same file — the everyday `datasets.map(tokenizer)` path (needs
            `pip install datasets`; SKIP without it)

RATIO ours/rust (tokens per second) — target >= 1.0; RATIO ours/datasets — target >= 3.0. The ids of the three
are compared first (they must be equal: a fast wrong tokenizer is not measured).

usage: tools/bench/tokenize_bench.py [--pack build/src/pack/ulysses-pack] [--mb 100] [--threads 2] [--repeat 3]
"""
import argparse
import json
import os
import pathlib
import random
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "tokenize"))
from text_corpus import corpus, train  # noqa: E402

SAMPLE = ROOT / "datasets/sample/licenses.jsonl.gz"

RUST = """
import json, sys, time
from tokenizers import Tokenizer
tok = Tokenizer.from_file(sys.argv[1])
texts = [json.loads(l)["text"] for l in open(sys.argv[2], encoding="utf-8")]
t0 = time.perf_counter()
ids = [e.ids for e in tok.encode_batch(texts)]
print(json.dumps({"seconds": time.perf_counter() - t0, "tokens": sum(map(len, ids)), "first": ids[:50]}))
"""

DATASETS = """
import json, sys, time
from datasets import Dataset, disable_progress_bars
from transformers import PreTrainedTokenizerFast
disable_progress_bars()
tok = PreTrainedTokenizerFast(tokenizer_file=sys.argv[1])
texts = [json.loads(l)["text"] for l in open(sys.argv[2], encoding="utf-8")]
ds = Dataset.from_dict({"text": texts})
t0 = time.perf_counter()
out = ds.map(lambda b: tok(b["text"]), batched=True, num_proc=int(sys.argv[3]), remove_columns=["text"])
ids = out["input_ids"]
print(json.dumps({"seconds": time.perf_counter() - t0, "tokens": sum(map(len, ids)), "first": ids[:50]}))
"""


def text_file(path, mb):
    docs = corpus(SAMPLE, 10_500_000)
    rng = random.Random(7)
    written = 0
    with open(path, "w", encoding="utf-8") as f:
        while written < mb * 1_000_000:
            rng.shuffle(docs)
            for d in docs:
                line = json.dumps({"text": d}, ensure_ascii=False) + "\n"
                f.write(line)
                written += len(line.encode())
    return docs


def python_side(script, tokenizer, text, threads, repeat, env):
    runs = []
    for _ in range(repeat):
        p = subprocess.run([sys.executable, "-c", script, str(tokenizer), str(text), str(threads)],
                           capture_output=True, text=True, env=env, check=True)
        runs.append(json.loads(p.stdout.strip().splitlines()[-1]))
    return runs


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pack", default=str(ROOT / "build/src/pack/ulysses-pack"))
    ap.add_argument("--mb", type=float, default=100)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        text = tmp / "text.jsonl"
        docs = text_file(text, a.mb)
        _, eos = train("llama3", docs, tmp / "tok", vocab_size=32000)
        tokenizer = tmp / "tok" / "tokenizer.json"
        print(f"text: {text.stat().st_size / 1e6:.0f} MB; tokenizer: Llama 3-style, 32000 tokens; {a.threads} threads")

        ours = []
        for _ in range(a.repeat):
            out = tmp / "ids.jsonl"
            t0 = time.perf_counter()
            subprocess.run([a.pack, "tokenize", text, "-o", out, "--tokenizer", tmp / "tok", "--threads",
                            str(a.threads), "--no-append-eos", "--overwrite"], check=True, capture_output=True)
            seconds = time.perf_counter() - t0
            with open(out) as f:
                ids = [json.loads(line)["input_ids"] for line in f]
            ours.append({"seconds": seconds, "tokens": sum(map(len, ids)), "first": ids[:50]})
        rust = python_side(RUST, tokenizer, text, a.threads, a.repeat,
                           dict(os.environ, RAYON_NUM_THREADS=str(a.threads), TOKENIZERS_PARALLELISM="true"))
        if ours[0]["first"] != rust[0]["first"] or ours[0]["tokens"] != rust[0]["tokens"]:
            sys.exit("the ids differ from tokenizers': not measuring speed")

        def rate(runs):
            return runs[0]["tokens"] / statistics.median(r["seconds"] for r in runs)

        print(f"ours      {rate(ours) / 1e6:8.2f} M tokens/s  (median of {a.repeat}, {ours[0]['tokens']} tokens)")
        print(f"rust      {rate(rust) / 1e6:8.2f} M tokens/s")
        print(f"RATIO ours/rust = {rate(ours) / rate(rust):.2f}  (target >= 1.0)")
        try:
            import datasets  # noqa: F401
        except ImportError:
            print("SKIP datasets.map: pip install datasets to measure it")
            return
        hf = python_side(DATASETS, tokenizer, text, a.threads, a.repeat, dict(os.environ, TOKENIZERS_PARALLELISM="false"))
        if hf[0]["first"] != rust[0]["first"]:
            sys.exit("datasets.map's ids differ from tokenizers': not measuring speed")
        print(f"datasets  {rate(hf) / 1e6:8.2f} M tokens/s")
        print(f"RATIO ours/datasets = {rate(ours) / rate(hf):.2f}  (target >= 3.0)")


if __name__ == "__main__":
    main()
