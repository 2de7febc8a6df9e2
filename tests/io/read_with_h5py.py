"""Reads the datasets written by write_example_shard with h5py, following only docs/data-format.md.

Usage: read_with_h5py.py WRITE_EXAMPLE_SHARD. Runs the writer into a temporary folder, then checks, for
both datasets (masked: with loss_mask; plain: without), the manifest, every attribute and dataset, and
the labels / position ids / document ids derived per the doc, for the whole sequence and for what each
SP rank reads. The expected content is rebuilt here document by document from the rules that
write_example_shard.cpp states (not from the doc's formulas), so the two derivations are independent.
Fails when h5py, numpy or xxhash is missing (tools/bootstrap.sh installs them). read_dataset, the
content-free part, also reads every dataset ulysses-pack writes in tests/pack/cli/test_pack_cli.py.
"""
import json
import os
import subprocess
import sys
import tempfile

try:
    import h5py
    import numpy as np
    import xxhash
except ImportError as e:
    sys.exit(f"cannot import h5py/numpy/xxhash ({e}): run tools/bootstrap.sh, or pass -Dtorch_python=PY")

# ---- The known content (restated from write_example_shard.cpp) ------------------------------------
S, P, ALIGNMENT, PAD_ID = 512, 4, 32, 9
SPLITS = {  # file -> (split, base, [(length, doc_starts)])
    "shard-00000.h5": ("train", 1000, [(512, [0, 128, 300]), (400, [0, 127, 129, 256]), (129, [0]),
                                       (512, [0]), (1, [0])]),
    "valid-00000.h5": ("valid", 500000, [(384, [0, 383]), (256, [0, 100])]),
}


def expected_sequence(base, seq, length, starts, has_mask):
    """ids, mask, labels, positions, doc ids of one sequence, built document by document."""
    ids, mask, labels, positions, docs = [], [], [], [], []
    bounds = starts + [length]
    for d in range(len(starts)):
        for i in range(bounds[d], bounds[d + 1]):
            g = seq * S + i
            ids.append(base + g)
            mask.append(0 if has_mask and g % 7 == 3 else 1)
            positions.append(i - bounds[d])
            docs.append(d)
    for i in range(length, S):   # padding: its own document, positions from 0
        ids.append(PAD_ID)
        mask.append(0 if has_mask else 1)
        positions.append(i - length)
        docs.append(len(starts))
    for d in range(len(starts)):   # inside a document, each token but the last predicts the next one
        for i in range(bounds[d], bounds[d + 1]):
            last = i + 1 == bounds[d + 1]
            labels.append(-100 if last or mask[i + 1] == 0 else ids[i + 1])
    labels += [-100] * (S - length)
    return [np.array(v, dtype=np.int64) for v in (ids, mask, labels, positions, docs)]


# ---- The reader, as docs/data-format.md describes it ----------------------------------------------
def derive(ids_plus1, mask_plus1, begin, length, starts):
    """Labels, position ids and document ids of positions [begin, begin + n) of one sequence."""
    n = len(ids_plus1) - 1
    g = np.arange(begin, begin + n)                      # global positions [n]
    keep = (g + 1 < length) & ~np.isin(g + 1, starts) & (mask_plus1[1:] == 1)
    labels = np.where(keep, ids_plus1[1:].astype(np.int64), -100)
    doc = np.searchsorted(starts, g, side="right") - 1   # index of the last start <= g
    real = g < length
    positions = np.where(real, g - starts[doc], g - length)
    doc_ids = np.where(real, doc, len(starts))
    return labels, positions, doc_ids


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def read_dataset(root, expect=None):
    """Walks a packed dataset as docs/data-format.md describes it: the manifest, each shard's size and XXH3,
    attributes, dtypes, chunking and CSR metadata; for every sequence the labels, position ids and document
    ids derived from the whole sequence, and from what each SP rank reads (its slice and the token after
    it), which must agree. `expect(path, n, ids, mask, derived)` checks the content when it is known.
    Returns the manifest and the number of SP slices checked."""
    with open(os.path.join(root, "manifest.json")) as f:
        manifest = json.load(f)
    check(manifest["format"] == "ulysses-packed" and manifest["format_version"] == 1, "manifest format")
    for key in ("vocab_size", "max_token_id", "policy", "seed", "command", "created_by", "inputs", "stats"):
        check(key in manifest, f"manifest field {key}")
    S, P = manifest["seq_len"], manifest["sp"]
    sizes = (S, P, manifest["alignment"], manifest["pad_id"])
    checked = 0
    for shard in manifest["shards"]:
        path = os.path.join(root, shard["file"])
        check(shard["bytes"] == os.path.getsize(path), f"{path}: bytes")
        with open(path, "rb") as f:   # XXH3-64 of the whole file, by the reference implementation's bindings
            check(shard["xxh3"] == xxhash.xxh3_64_hexdigest(f.read()), f"{path}: xxh3")
        with h5py.File(path, "r") as f:
            a = f.attrs
            fmt = a["format"].decode() if isinstance(a["format"], bytes) else a["format"]   # fixed-length: bytes
            check(fmt == "ulysses-packed" and a["format_version"] == 1, f"{path}: format")
            check((a["seq_len"], a["sp"], a["alignment"], a["pad_id"]) == sizes, f"{path}: attrs")
            chunk_len = int(a["chunk_len"])
            check((S // P) % chunk_len == 0 and S % (P * a["alignment"]) == 0, f"{path}: chunk_len {chunk_len}")
            x = f["input_ids"]
            check(x.dtype == np.int32 and x.shape == (shard["num_sequences"], S) and x.chunks == (1, chunk_len),
                  f"{path}: input_ids")
            has_mask = "loss_mask" in f
            check(has_mask == manifest["has_loss_mask"], f"{path}: loss_mask presence")
            if has_mask:
                m = f["loss_mask"]
                check(m.dtype == np.uint8 and m.shape == x.shape and m.chunks == (1, chunk_len), "loss_mask")
            lengths, offsets, starts_all = f["seq_lengths"][:], f["doc_offsets"][:], f["doc_starts"][:]
            check(lengths.dtype == np.int32 and offsets.dtype == np.int64 and starts_all.dtype == np.int32,
                  f"{path}: metadata dtypes")
            check(len(lengths) == x.shape[0] and len(offsets) == x.shape[0] + 1
                  and offsets[0] == 0 and offsets[-1] == len(starts_all), f"{path}: CSR sizes")
            for n in range(x.shape[0]):
                starts = starts_all[offsets[n]:offsets[n + 1]]
                check(len(starts) > 0 and starts[0] == 0 and (np.diff(starts) > 0).all()
                      and starts[-1] < max(lengths[n], 1) and lengths[n] <= S, f"{path}[{n}]: document starts")
                whole_ids = x[n, :]
                whole_mask = f["loss_mask"][n, :] if has_mask else np.ones(S, np.uint8)
                check((whole_ids[lengths[n]:] == a["pad_id"]).all(), f"{path}[{n}]: padding")
                whole = derive(np.append(whole_ids, 0), np.append(whole_mask, 1), 0, lengths[n], starts)
                if expect:
                    expect(path, n, lengths[n], list(starts), whole_ids, whole_mask, whole)
                for r in range(P):   # what SP rank r reads: its slice and the token after it
                    lo, hi = r * S // P, (r + 1) * S // P
                    end = min(hi + 1, S)
                    s_ids = x[n, lo:end]
                    s_mask = f["loss_mask"][n, lo:end] if has_mask else np.ones(end - lo, np.uint8)
                    if end == hi:    # the last rank has no next token; its slot is never used
                        s_ids, s_mask = np.append(s_ids, 0), np.append(s_mask, 1)
                    got = derive(s_ids, s_mask, lo, lengths[n], starts)
                    for name, g, e in zip(("labels", "positions", "doc ids"), got, whole):
                        check(np.array_equal(g, e[lo:hi]), f"{path}[{n}] rank {r}: {name}")
                    checked += 1
    return manifest, checked


def check_example(root, has_mask):
    """The example dataset: read_dataset, and its content against the rules restated above."""
    def expect(path, n, length, starts, whole_ids, whole_mask, whole):
        split, base, table = SPLITS[os.path.basename(path)]
        check((length, starts) == table[n], f"{path}[{n}]: metadata")
        ids, mask, labels, positions, docs = expected_sequence(base, n, length, starts, has_mask)
        check(np.array_equal(whole_ids, ids) and np.array_equal(whole_mask, mask), f"{path}[{n}]: tokens")
        for name, g, e in zip(("labels", "positions", "doc ids"), whole, (labels, positions, docs)):
            check(np.array_equal(g, e), f"{path}[{n}]: whole-sequence {name}")

    manifest, checked = read_dataset(root, expect)
    check((manifest["seq_len"], manifest["sp"], manifest["alignment"], manifest["pad_id"])
          == (S, P, ALIGNMENT, PAD_ID), "manifest sizes")
    check(manifest["has_loss_mask"] == has_mask, "manifest has_loss_mask")
    check([s["file"] for s in manifest["shards"]] == list(SPLITS), "shard list")
    for shard in manifest["shards"]:
        split, _, table = SPLITS[shard["file"]]
        check(shard["split"] == split and shard["num_sequences"] == len(table), f"{shard['file']}: manifest entry")
    return checked


def main():
    writer = sys.argv[1]
    with tempfile.TemporaryDirectory(prefix="uly-h5py-") as tmp:
        print("+", writer, tmp, flush=True)
        subprocess.run([writer, tmp], check=True)
        for name, has_mask in (("masked", True), ("plain", False)):
            slices = check_example(os.path.join(tmp, name), has_mask)
            check(slices == 7 * P, f"{name}: {slices} slices checked")
            print(f"{name}: manifest, attributes, datasets, {slices} SP slices: OK")


if __name__ == "__main__":
    main()
