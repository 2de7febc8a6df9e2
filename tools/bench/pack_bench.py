#!/usr/bin/env python3
"""Benchmark of ulysses-pack against two anchors measured in the same run, on the same input and disk:

  1. a raw copy of the same input bytes to the same output location (cp) — target: pack >= 0.6x copy
  2. a straightforward Python packer (numpy + h5py, best-fit-decreasing, same shard format) — target: >= 5x,
     and the same at one thread each (pack --threads 1: the Python packer uses one core)

The work both packers do: read the flat tokens, split at EOS, cut documents longer than seq_len, best-fit-
decreasing into sequences, shuffle the sequences with a seed, write HDF5 shards (input_ids chunked per row,
seq_lengths, doc_offsets, doc_starts), XXH3-64 of the input and of every shard, a JSON manifest. Ours also
validates every token id and writes the attributes the spec requires (a few bytes). The Python packer is
timed inside its process after its imports (interpreter start excluded).

Input: a generated flat uint32 token file (>= 1 GiB by default) whose documents end with EOS, with
log-normal document lengths (median ~700 tokens, a long tail past the sequence length, as web corpora).
Prints tokens/s, peak RSS, and the ratios; medians over --repeat runs. Page cache is warm for all three.

usage: tools/bench/pack_bench.py [--pack build/src/pack/ulysses-pack] [--gib 1.0] [--seq-len 8192]
                                 [--repeat 3] [--workdir /tmp/ulysses-pack-bench] [--threads 0]
"""
import argparse
import bisect
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import time

import numpy as np

EOS = 50_000


def generate(path, gib, seed=1):
    rng = np.random.default_rng(seed)
    target = int(gib * (1 << 30) // 4)
    lengths = []
    total = 0
    while total < target:
        chunk = np.maximum(1, rng.lognormal(6.5, 1.2, 100_000).astype(np.int64))
        lengths.append(chunk)
        total += int(chunk.sum()) + len(chunk)
    lengths = np.concatenate(lengths)
    ends = np.cumsum(lengths + 1)
    lengths = lengths[: int(np.searchsorted(ends, target)) + 1]
    tokens = rng.integers(0, EOS, int(lengths.sum() + len(lengths)), dtype=np.uint32)
    tokens[np.cumsum(lengths + 1) - 1] = EOS
    tokens.tofile(path)
    return len(tokens), len(lengths)


def timed(cmd):
    start = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(p.pid, 0)
    elapsed = time.perf_counter() - start
    err = p.stderr.read().decode()
    if status != 0:
        sys.exit(f"failed: {' '.join(map(str, cmd))}\n{err}")
    return elapsed, usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime  # s, MiB, CPU s


def xxh3_file(path):
    import xxhash

    h = xxhash.xxh3_64()
    with open(path, "rb") as f:
        while chunk := f.read(16 << 20):
            h.update(chunk)
    return h.hexdigest()


def python_pack(inp, out, seq_len, seed=0):
    """What a user would write: numpy for the tokens, bisect for best fit, h5py for the shards; the same
    checksums, shuffle and manifest as ulysses-pack."""
    import json

    import h5py

    input_xxh3 = xxh3_file(inp)
    tokens = np.fromfile(inp, dtype=np.uint32)
    ends = np.flatnonzero(tokens == EOS) + 1
    starts = np.concatenate([[0], ends[:-1]])
    pieces = []  # (length, start)
    for s, e in zip(starts.tolist(), ends.tolist()):
        while e - s > seq_len:
            pieces.append((seq_len, s))
            s += seq_len
        pieces.append((e - s, s))
    pieces.sort(key=lambda p: -p[0])
    bins, free = [], []  # free: sorted list of (remaining, bin index)
    for length, start in pieces:
        i = bisect.bisect_left(free, (length, -1))
        if i == len(free):
            bins.append([(start, length)])
            rem, b = seq_len - length, len(bins) - 1
        else:
            rem, b = free.pop(i)
            bins[b].append((start, length))
            rem -= length
        if rem > 0:
            bisect.insort(free, (rem, b))
    order = np.random.default_rng(seed).permutation(len(bins))
    bins = [bins[i] for i in order]
    out.mkdir(parents=True)
    shards = []
    per_shard = max(1, (1 << 26) // seq_len)
    for k in range(0, len(bins), per_shard):
        group = bins[k : k + per_shard]
        with h5py.File(out / f"shard-{k // per_shard:05d}.h5", "w") as f:
            ids = f.create_dataset("input_ids", (len(group), seq_len), np.int32, chunks=(1, min(seq_len, 65536)))
            lengths, offsets, doc_starts = [], [0], []
            block = np.zeros((256, seq_len), np.int32)
            for j, b in enumerate(group):
                row, pos = block[j % 256], 0
                row[:] = 0
                for start, length in b:
                    doc_starts.append(pos)
                    row[pos : pos + length] = tokens[start : start + length]
                    pos += length
                lengths.append(pos)
                offsets.append(len(doc_starts))
                if j % 256 == 255 or j == len(group) - 1:
                    first = j - j % 256
                    ids[first : j + 1] = block[: j - first + 1]
            f["seq_lengths"] = np.asarray(lengths, np.int32)
            f["doc_offsets"] = np.asarray(offsets, np.int64)
            f["doc_starts"] = np.asarray(doc_starts, np.int32)
        path = out / f"shard-{k // per_shard:05d}.h5"
        shards.append({"file": path.name, "num_sequences": len(group), "bytes": path.stat().st_size,
                       "xxh3": xxh3_file(path)})
    manifest = {"seq_len": seq_len, "inputs": [{"path": str(inp), "xxh3": input_xxh3}], "shards": shards,
                "stats": {"sequences": len(bins), "tokens": int(tokens.size)}}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return len(bins)


def python_timed(inp, out, seq_len):
    """Seconds of python_pack in a child process, measured there after its imports, and the sequences."""
    code = f"import sys, time; sys.path.insert(0, {str(pathlib.Path(__file__).parent)!r}); import pack_bench, " \
           f"pathlib, h5py, xxhash; t = time.perf_counter(); " \
           f"n = pack_bench.python_pack(pathlib.Path({str(inp)!r}), pathlib.Path({str(out)!r}), {seq_len}); " \
           f"print(time.perf_counter() - t, n)"
    t, n = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout.split()
    return float(t), int(n)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pack", default="build/src/pack/ulysses-pack")
    ap.add_argument("--gib", type=float, default=1.0)
    ap.add_argument("--seq-len", type=int, default=8192)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--workdir", default="/tmp/ulysses-pack-bench")
    ap.add_argument("--skip-python", action="store_true")
    a = ap.parse_args()
    work = pathlib.Path(a.workdir)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    inp = work / "tokens.u32"
    # generated in a child process: a forked child inherits this process's RSS high-water mark, so the
    # 1 GiB array must never live here, or every measured peak RSS would read >= 1 GiB
    code = f"import sys; sys.path.insert(0, {str(pathlib.Path(__file__).parent)!r}); import pack_bench, pathlib; " \
           f"print(*pack_bench.generate(pathlib.Path({str(inp)!r}), {a.gib}))"
    ntok, ndocs = map(int, subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                                          text=True).stdout.split())
    size = inp.stat().st_size
    print(f"input: {ntok:,} tokens ({size / 2**30:.2f} GiB), {ndocs:,} documents, seq_len {a.seq_len}")
    subprocess.run(["cat", str(inp)], stdout=subprocess.DEVNULL, check=True)  # warm the page cache

    copies, packs, packs1, pys, rss, copy_cpu, pack_cpu = [], [], [], [], [], [], []
    pack_cmd = [a.pack, "pack", str(inp), "--format", "flat", "--flat-dtype", "uint32", "--eos-id", str(EOS),
                "-o", str(work / "packed"), "--seq-len", str(a.seq_len), "--overwrite"]
    for r in range(a.repeat):   # interleaved, so a slow spell of the machine hits copy and pack alike
        dst = work / "copy.u32"
        t, _, c = timed(["cp", str(inp), str(dst)])
        copies.append(t)
        copy_cpu.append(c)
        dst.unlink()
        # like the copy's destination, the previous run's output is removed outside the timing
        shutil.rmtree(work / "packed", ignore_errors=True)
        t, m, c = timed(pack_cmd + ["--threads", str(a.threads)])
        packs.append(t)
        rss.append(m)
        pack_cpu.append(c)
        line = f"  run {r + 1}: copy {copies[-1]:.2f} s ({copy_cpu[-1]:.2f} s CPU), pack {t:.2f} s " \
               f"({c:.2f} s CPU, peak RSS {m:.0f} MiB)"
        if not a.skip_python:
            shutil.rmtree(work / "packed", ignore_errors=True)
            packs1.append(timed(pack_cmd + ["--threads", "1"])[0])
            line += f", pack --threads 1 {packs1[-1]:.2f} s"
        print(line, flush=True)
    # The Python packer runs after, not between: its GiBs of arrays push the input out of the page cache and
    # would slow the next copy (measured: cp 0.34 s -> 1.3 s).
    for r in range(0 if a.skip_python else a.repeat):
        shutil.rmtree(work / "packed-python", ignore_errors=True)
        py_t, nseq = python_timed(inp, work / "packed-python", a.seq_len)
        pys.append(py_t)
        print(f"  python run {r + 1}: {py_t:.2f} s ({nseq} sequences)", flush=True)
    copy_t, pack_t = statistics.median(copies), statistics.median(packs)
    print(f"copy  : {size / copy_t / 2**30:.2f} GiB/s ({copy_t:.2f} s median)")
    print(f"pack  : {ntok / pack_t / 1e6:.1f} M tokens/s, {size / pack_t / 2**30:.2f} GiB/s of input "
          f"({pack_t:.2f} s median), peak RSS {max(rss):.0f} MiB")
    print(f"RATIO pack/copy throughput = {copy_t / pack_t:.2f}  (target >= 0.6)")
    # The copy uses one core, the packer all of them: on a loaded machine the wall ratio tends to the CPU one.
    print(f"cpu   : copy {statistics.median(copy_cpu):.2f} s, pack {statistics.median(pack_cpu):.2f} s "
          f"(medians; pack/copy CPU-time ratio {statistics.median(copy_cpu) / statistics.median(pack_cpu):.2f})")
    if not a.skip_python:
        py_t, pack1_t = statistics.median(pys), statistics.median(packs1)
        print(f"python: {ntok / py_t / 1e6:.2f} M tokens/s ({py_t:.2f} s median of {a.repeat})")
        print(f"RATIO pack speed-up over python = {py_t / pack_t:.1f}x  (target >= 5)")
        print(f"RATIO pack --threads 1 speed-up over python (one core each) = {py_t / pack1_t:.1f}x  (target >= 5)")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
