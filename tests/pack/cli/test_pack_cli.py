"""ulysses-pack end to end, through the real binary: outputs read back with h5py (the outside reference),
determinism across --threads, and every bad input → one line naming the file, exit code 2, no output left.

usage: test_pack_cli.py ULYSSES_PACK SAMPLE_CORPUS
"""
import gzip
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import unittest
from collections import Counter

import h5py
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))   # tests/: the shared CLI checks
from cli_checks import BadInputCase, TempDirCase, kill_mid_write, one_error_line, small_tmpfs  # noqa: E402
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "io"))   # the spec-following h5py reader
import read_with_h5py  # noqa: E402
from reference_writers import MegatronBuilder, write_datafile  # noqa: E402

PACK = sys.argv.pop(1)
SAMPLE = pathlib.Path(sys.argv.pop(1))


def run(*args, check=True):
    p = subprocess.run([PACK, *map(str, args)], capture_output=True, text=True)
    if check and p.returncode != 0:
        raise AssertionError(f"exit {p.returncode}: {p.stderr}")
    return p


def sample_docs():
    with gzip.open(SAMPLE, "rt") as f:
        return [json.loads(line)["input_ids"] for line in f if line.strip()]


def read_dataset(d):
    """Documents (pieces) of every sequence, read per docs/data-format.md with h5py alone; the whole dataset
    first goes through the spec's reader (checksums, attributes, chunks, labels of every SP slice)."""
    read_with_h5py.read_dataset(str(d))
    m = json.loads((d / "manifest.json").read_text())
    pieces, seqs = [], 0
    for entry in m["shards"]:
        with h5py.File(d / entry["file"], "r") as f:
            ids, lengths = f["input_ids"][()], f["seq_lengths"][()]
            offsets, starts = f["doc_offsets"][()], f["doc_starts"][()]
            assert f.attrs["format"] == "ulysses-packed" or f.attrs["format"] == b"ulysses-packed"
            assert ids.shape[1] == m["seq_len"]
            for s in range(ids.shape[0]):
                st = list(starts[offsets[s]:offsets[s + 1]]) + [lengths[s]]
                for a, b in zip(st[:-1], st[1:]):
                    pieces.append(tuple(ids[s, a:b]))
                assert (ids[s, lengths[s]:] == m["pad_id"]).all()
                seqs += 1
    return m, pieces, seqs


class PackSample(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.root = pathlib.Path(cls.tmp.name)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_bfd_keeps_every_document_whole_and_once(self):
        out = self.root / "bfd"
        run("pack", SAMPLE, "-o", out, "--seq-len", 2048, "--sp", 4, "--pad-id", 258)
        m, pieces, seqs = read_dataset(out)
        docs = sample_docs()
        self.assertEqual(Counter(map(tuple, docs)), Counter(pieces))   # all fit in 2048: none split
        self.assertEqual(m["stats"]["sequences"], seqs)
        self.assertEqual(m["stats"]["tokens"], sum(map(len, docs)))
        self.assertEqual(run("verify", out).returncode, 0)

    def test_split_long_documents_account_for_every_token(self):
        out = self.root / "split"
        run("pack", SAMPLE, "-o", out, "--seq-len", 256, "--sp", 2, "--align", 64, "--pad-id", 258)
        m, pieces, _ = read_dataset(out)
        docs = sample_docs()
        # bfd cuts a long document into consecutive 256-token pieces: each piece is one such run, in order
        runs = [tuple(d[i:i + 256]) for d in docs for i in range(0, len(d), 256)]
        self.assertEqual(Counter(runs), Counter(pieces))
        self.assertEqual(m["stats"]["split_documents"], sum(len(d) > 256 for d in docs))
        self.assertTrue(all(len(p) <= 256 for p in pieces))

    def test_concat_and_pad_account_for_tokens(self):
        docs = sample_docs()
        total = sum(map(len, docs))
        out = self.root / "concat"
        run("pack", SAMPLE, "-o", out, "--seq-len", 512, "--policy", "concat")
        m, pieces, seqs = read_dataset(out)
        self.assertEqual(m["stats"]["padding_tokens"], 0)
        self.assertEqual(seqs * 512 + m["stats"]["dropped_tokens"], total)
        out = self.root / "pad"
        run("pack", SAMPLE, "-o", out, "--seq-len", 512, "--policy", "pad", "--long-docs", "drop", "--pad-id", 258)
        m, pieces, seqs = read_dataset(out)
        self.assertEqual(seqs, sum(len(d) <= 512 for d in docs))
        self.assertEqual(Counter(pieces), Counter(tuple(d) for d in docs if len(d) <= 512))

    def test_bfd_truncates_or_drops_long_documents_and_counts_them(self):
        docs = sample_docs()
        long = [d for d in docs if len(d) > 512]
        self.assertTrue(long, "the sample holds no document longer than 512")
        for mode, kept in (("truncate", [tuple(d[:512]) for d in docs]),
                           ("drop", [tuple(d) for d in docs if len(d) <= 512])):
            out = self.root / f"bfd-{mode}"
            run("pack", SAMPLE, "-o", out, "--seq-len", 512, "--long-docs", mode, "--pad-id", 258)
            m, pieces, _ = read_dataset(out)
            self.assertEqual(Counter(pieces), Counter(kept), mode)
            self.assertEqual(m["stats"]["split_documents"], 0)
            if mode == "truncate":
                self.assertEqual(m["stats"]["truncated_tokens"], sum(len(d) - 512 for d in long))
            else:
                self.assertEqual((m["stats"]["dropped_documents"], m["stats"]["dropped_tokens"]),
                                 (len(long), sum(map(len, long))))
            self.assertEqual(run("verify", out).returncode, 0)

    def test_killed_pack_leaves_the_previous_dataset(self):
        """kill -9 while the shards of an --overwrite run are being written: the dataset already there is
        untouched and verifies; no partial dataset appears under the output's name; a rerun succeeds."""
        flat = self.root / "flat.bin"   # 256 MiB of uint32 tokens, documents ending at EOS 299
        tokens = (np.arange(64 << 20, dtype=np.uint64) * 2654435761 % 299).astype(np.uint32)
        tokens[996::997] = 299
        tokens.tofile(flat)
        out = self.root / "crash"
        args = ["pack", flat, "--format", "flat", "--flat-dtype", "uint32", "--eos-id", 299, "-o", out]
        run(*args, "--seq-len", 4096)
        before = (out / "manifest.json").read_text()
        caught = kill_mid_write([PACK, *args, "--seq-len", 8192, "--overwrite"], self.root / ".crash.tmp-*" / "shard-*.h5")
        self.assertTrue(caught, "pack finished before it could be killed mid-write")
        self.assertEqual((out / "manifest.json").read_text(), before)
        self.assertEqual(run("verify", out).returncode, 0)
        self.assertEqual(sorted(x.name for x in self.root.iterdir() if x.name.startswith("crash")), ["crash"])
        stale = [p for p in self.root.glob(".crash.tmp-*") if p.suffix != ".lock"]   # SIGKILL leaves the temporary
        self.assertEqual(len(stale), 1, stale)                                      # (and its lock file): the next
                                                                                    # run removes them
        p = run(*args, "--seq-len", 8192, "--overwrite")
        self.assertIn(f"removed {stale[0]}: left by a run", p.stderr)
        self.assertEqual(list(self.root.glob(".crash.tmp-*")), [])
        self.assertEqual(json.loads((out / "manifest.json").read_text())["seq_len"], 8192)
        flat.unlink()

    def test_deterministic_across_threads_and_valid_split(self):
        outs = []
        for threads in (1, 2):
            out = self.root / f"det{threads}"
            run("pack", SAMPLE, "-o", out, "--seq-len", 512, "--shard-tokens", 4096, "--threads", threads,
                "--valid-fraction", 0.1, "--seed", 7)
            outs.append(out)
        m1 = json.loads((outs[0] / "manifest.json").read_text())
        self.assertGreater(len(m1["shards"]), 3)
        self.assertTrue(any(s["split"] == "valid" for s in m1["shards"]))
        for s in m1["shards"]:
            self.assertEqual((outs[0] / s["file"]).read_bytes(), (outs[1] / s["file"]).read_bytes(), s["file"])
        out = self.root / "det-seed8"
        run("pack", SAMPLE, "-o", out, "--seq-len", 512, "--shard-tokens", 4096, "--seed", 8)
        self.assertNotEqual((out / "shard-00000.h5").read_bytes(), (outs[0] / "shard-00000.h5").read_bytes())

    def test_inspect_shows_boundaries(self):
        out = self.root / "insp"
        run("pack", SAMPLE, "-o", out, "--seq-len", 1024, "--pad-id", 258)
        p = run("inspect", out, "--sample", 0, "--bytes")
        self.assertIn("[doc 0 @ 0..", p.stdout)
        self.assertIn("padding_fraction", p.stdout)

    def test_verify_detects_a_flipped_byte(self):
        out = self.root / "corrupt"
        run("pack", SAMPLE, "-o", out, "--seq-len", 1024)
        shard = out / "shard-00000.h5"
        data = bytearray(shard.read_bytes())
        data[-100] ^= 0xFF
        shard.write_bytes(bytes(data))
        p = run("verify", out, check=False)
        self.assertEqual(p.returncode, 1)
        self.assertIn("xxh3", p.stderr)


class ShardChecksums(TempDirCase):
    """Pass 2 hashes the token rows while it writes them (input_ids only) or hashes the finished file (with
    a loss mask): either way the manifest's xxh3 is the file's, as verify recomputes it from the bytes."""

    def test_flat_tokens_round_trip_verify_and_detect_a_flipped_token(self):
        rng = np.random.default_rng(3)
        docs = [list(rng.integers(0, 1000, int(n))) + [1000] for n in rng.integers(1, 900, 300)]
        path = self.root / "tokens.u32"
        np.concatenate([np.asarray(d, np.uint32) for d in docs]).tofile(path)
        outs = []
        for threads in (1, 2):
            out = self.root / f"flat{threads}"
            run("pack", path, "--format", "flat", "--flat-dtype", "uint32", "--eos-id", 1000, "-o", out,
                "--seq-len", 512, "--shard-tokens", 8192, "--threads", threads)
            self.assertEqual(run("verify", out).returncode, 0)
            outs.append(out)
        m, pieces, _ = read_dataset(outs[0])
        self.assertGreater(len(m["shards"]), 3)
        for s in m["shards"]:
            self.assertEqual((outs[0] / s["file"]).read_bytes(), (outs[1] / s["file"]).read_bytes(), s["file"])
        whole = Counter(tuple(d) for d in docs if len(d) <= 512)
        self.assertTrue(whole <= Counter(tuple(int(t) for t in p) for p in pieces))
        shard = outs[0] / "shard-00001.h5"
        with h5py.File(shard, "r") as f:   # the byte of token [0, 0], inside the rows pass 2 hashed
            offset = f["input_ids"].id.get_chunk_info(0).byte_offset
        data = bytearray(shard.read_bytes())
        data[offset] ^= 0x01
        shard.write_bytes(bytes(data))
        p = run("verify", outs[0], check=False)
        self.assertEqual(p.returncode, 1)
        self.assertIn("xxh3", p.stderr)

    def test_loss_mask_round_trip_and_verify(self):
        rng = np.random.default_rng(4)
        docs = [[int(t) for t in rng.integers(0, 500, int(n))] for n in rng.integers(1, 250, 100)]   # none split
        masks = [[int(i % 3 != 0) for i in range(len(d))] for d in docs]
        path = self.root / "sft.jsonl"
        path.write_text("".join(json.dumps({"input_ids": d, "loss_mask": k}) + "\n" for d, k in zip(docs, masks)))
        out = self.root / "sft"
        p = run("pack", path, "--loss-mask-key", "loss_mask", "-o", out, "--seq-len", 256, "--shard-tokens", 2048,
                "--threads", 2)
        targets = sum(map(sum, masks))   # the report and the manifest count the mask's 1s
        self.assertIn(f"target tokens    {targets:>14}", p.stderr)
        self.assertNotIn("warning:", p.stderr)
        self.assertEqual(json.loads((out / "manifest.json").read_text())["stats"]["target_tokens"], targets)
        self.assertEqual(run("verify", out).returncode, 0)
        # inspect: the count, and per document of the sample its targets and (--show-mask) the mask itself
        shown = run("inspect", out, "--sample", 0, "--show-mask", "--max-tokens", 1000).stdout
        self.assertIn(f"target_tokens        {targets}", shown)
        docs_shown = re.findall(r"\[doc \d+ @ \d+\.\.\d+ \((\d+) target\)\][^\n]*\n    mask ([01]+)", shown)
        self.assertTrue(docs_shown, shown)
        for count, bits in docs_shown:
            self.assertEqual(int(count), bits.count("1"))
            self.assertIn([int(b) for b in bits], masks)
        # a mask of zeros everywhere trains nothing: one line, exit 2, no dataset left behind
        path.write_text("".join(json.dumps({"input_ids": d, "loss_mask": [0] * len(d)}) + "\n" for d in docs))
        p = run("pack", path, "--loss-mask-key", "loss_mask", "-o", self.root / "zeros", "--seq-len", 256,
                check=False)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn('every loss-mask value under "loss_mask" is 0', p.stderr.strip().splitlines()[-1])
        self.assertFalse((self.root / "zeros").exists())
        # records longer than S, split (the default): a warning line with the count (it once said nothing)
        long = [[1] * 300, [2] * 600] + docs[:5]
        path.write_text("".join(json.dumps({"input_ids": d, "loss_mask": [1] * len(d)}) + "\n" for d in long))
        p = run("pack", path, "--loss-mask-key", "loss_mask", "-o", self.root / "long", "--seq-len", 256)
        self.assertIn("warning: 2 records longer than --seq-len split mid-record (--long-docs split)", p.stderr)
        m, slices = read_with_h5py.read_dataset(str(out))   # the spec's labels honour the mask in every SP slice
        self.assertTrue(m["has_loss_mask"])
        self.assertGreater(slices, 0)
        got = Counter()
        for entry in m["shards"]:
            with h5py.File(out / entry["file"], "r") as f:
                ids, mask, lengths = f["input_ids"][()], f["loss_mask"][()], f["seq_lengths"][()]
                offsets, starts = f["doc_offsets"][()], f["doc_starts"][()]
                for s in range(ids.shape[0]):
                    st = list(starts[offsets[s]:offsets[s + 1]]) + [lengths[s]]
                    for a, b in zip(st[:-1], st[1:]):
                        got[(tuple(ids[s, a:b].tolist()), tuple(mask[s, a:b].tolist()))] += 1
                    self.assertFalse(mask[s, lengths[s]:].any())
        self.assertEqual(got, Counter((tuple(d), tuple(k)) for d, k in zip(docs, masks)))


def write_megatron(prefix, docs, dtype=np.uint16):
    """docs as Megatron's IndexedDatasetBuilder writes them: each document as sentences of up to 5 tokens."""
    builder = MegatronBuilder(f"{prefix}.bin", dtype)
    for d in docs:
        builder.add_document(d, [len(d[i:i + 5]) for i in range(0, len(d), 5)])
    builder.finalize(f"{prefix}.idx")


class ProducersOwnFiles(TempDirCase):
    """Megatron and llm.c inputs written by their projects' own writer logic (reference_writers.py) pack into
    exactly the documents that went in, in order."""

    def setUp(self):
        super().setUp()
        self.docs = [[(i * 31 + j * 7) % 250 for j in range(3 + (i * 13) % 40)] for i in range(60)]

    def expect_docs(self, out, docs):
        _, pieces, _ = read_dataset(out)
        self.assertEqual(Counter(pieces), Counter(tuple(d) for d in docs))

    def test_megatron_builder_every_dtype_and_sentences(self):
        for dtype in (np.uint16, np.int32, np.int64, np.uint8):
            prefix = self.root / f"corpus_{np.dtype(dtype).name}"
            write_megatron(prefix, self.docs, dtype)
            out = self.root / f"m-{np.dtype(dtype).name}"
            run("pack", f"{prefix}.bin", "-o", out, "--seq-len", 64)
            self.expect_docs(out, self.docs)
        prefix = self.root / "items"   # add_item per sentence, end_document per document
        builder = MegatronBuilder(f"{prefix}.bin", np.int32)
        for d in self.docs:
            builder.add_item(d[:2])
            builder.add_item(d[2:])
            builder.end_document()
        builder.finalize(f"{prefix}.idx")
        run("pack", f"{prefix}.idx", "-o", self.root / "m-items", "--seq-len", 64)
        self.expect_docs(self.root / "m-items", self.docs)
        run("pack", prefix, "-o", self.root / "m-prefix", "--seq-len", 64)   # Megatron's own form: the prefix
        self.expect_docs(self.root / "m-prefix", self.docs)

    def test_llmc_datafiles_with_the_eot_before_each_document(self):
        for desc, eot in (("gpt-2", 50256), ("llama-3", 128000)):
            toks = [t for d in self.docs for t in [eot] + d]   # fineweb.py: tokens = [eot] + encode(doc)
            path = self.root / f"fineweb_{desc}_000000.bin"
            write_datafile(path, toks, desc)
            out = self.root / f"l-{desc}"
            run("pack", path, "-o", out, "--seq-len", 64)
            self.expect_docs(out, [[eot] + d for d in self.docs])


class BadInput(BadInputCase):
    def expect_bad(self, args, *needles):
        p = run("pack", *args, "-o", self.out, check=False)
        self.assertEqual(p.returncode, 2, p.stderr)
        return one_error_line(self, p.stderr, needles, self.out)

    def jsonl(self, text, name="in.jsonl"):
        path = self.root / name
        path.write_text(text)
        return path

    def test_manifest_fields_of_the_wrong_kind_and_shards_that_are_not_files(self):
        """Library exceptions that reached users (issue 15 item 7): a string where stats counts, a shard entry that
        is a directory or a name too long for the filesystem, and an input name too long."""
        run("pack", self.jsonl('{"input_ids": [1, 2, 3]}\n' * 4), "-o", self.out, "--seq-len", 128)
        manifest = self.out / "manifest.json"
        m = json.loads(manifest.read_text())
        manifest.write_text(json.dumps(dict(m, stats=dict(m["stats"], tokens="many"))))
        p = run("verify", self.out, check=False)
        self.assertEqual((p.returncode, len(p.stderr.splitlines())), (2, 1), p.stderr)
        self.assertIn('stats.tokens is "many", not a non-negative integer', p.stderr)
        (self.out / "adir").mkdir()
        for name, why in (("adir", "not a regular file"), ("x" * 300, "missing")):
            manifest.write_text(json.dumps(dict(m, shards=[dict(m["shards"][0], file=name)])))
            p = run("verify", self.out, check=False)
            self.assertEqual(p.returncode, 1, p.stderr)   # a mismatch report, as for any shard that differs
            self.assertIn(f"{name}: {why}", p.stderr)
            self.assertNotIn("filesystem error", p.stderr)
        self.out = self.root / "other"
        self.expect_bad([self.root / ("y" * 300 + ".jsonl"), "--seq-len", 64], "does not exist")

    def test_crafted_shards_are_one_line_not_a_crash(self):
        """Shards crafted as a fuzzer would (issue 15 items 2, 4, 6), read by inspect (no checksum first)."""
        run("pack", self.jsonl('{"input_ids": [1, 2, 3]}\n' * 4), "-o", self.out, "--seq-len", 128)
        shard = self.out / "shard-00000.h5"
        good = shard.read_bytes()
        attrs = {k: v for k, v in h5py.File(shard, "r").attrs.items()}

        def inspect(*needles):
            p = run("inspect", self.out, "--sample", 0, check=False)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertEqual(len(p.stderr.splitlines()), 1, p.stderr)
            return one_error_line(self, p.stderr, needles, self.root / "no-output")

        # 2^30 declared rows in a file of a few KB: refused before any allocation follows the declared size
        with h5py.File(shard, "w") as f:
            f.attrs.update(attrs)
            f.create_dataset("input_ids", shape=(1 << 30, 128), dtype="<i4", chunks=(1, 128))
        self.assertLess(shard.stat().st_size, 1 << 20)
        inspect("declares 1073741824 sequences of 128 int32 tokens but the file holds only")
        # the manifest's seq_len disagrees with the shard's: inspect read the shard's rows into the manifest's size
        shard.write_bytes(good)
        manifest = self.out / "manifest.json"
        m = json.loads(manifest.read_text())
        manifest.write_text(json.dumps(dict(m, seq_len=64)))
        inspect("parameters (seq_len 128, sp 1", "differ from the manifest's (seq_len 64")
        manifest.write_text(json.dumps(m))
        # a variable-length format attribute, as earlier ulysses-pack versions wrote it: accepted, its bytes unread
        with h5py.File(shard, "a") as f:
            f.attrs["format"] = "ulysses-packed"   # h5py writes a str as a variable-length string
            self.assertTrue(h5py.check_string_dtype(f.attrs.get_id("format").dtype).length is None)
        self.assertEqual(run("inspect", self.out, "--sample", 0).returncode, 0)
        # ... and whose global heap is crafted (the object's and then the collection's declared size 2^40, where
        # libhdf5's H5HG_read read past its buffer or hung): still accepted, the heap never touched
        vlen = shard.read_bytes()
        gcol = vlen.index(b"GCOL")   # "GCOL", version, 3 reserved, collection size (8); then object 1: index (2),
        for field in (gcol + 24, gcol + 8):   # refcount (2), reserved (4), size (8)
            shard.write_bytes(vlen[:field] + (1 << 40).to_bytes(8, "little") + vlen[field + 8:])
            p = run("inspect", self.out, "--sample", 0, check=False)
            self.assertEqual(p.returncode, 0, p.stderr)
        shard.write_bytes(good)
        # the shard's own sp and alignment attributes 2^32 (the manifest's are sound): their product wrapped to 0
        with h5py.File(shard, "a") as f:
            f.attrs["sp"] = np.int64(1 << 32)
            f.attrs["alignment"] = np.int64(1 << 32)
        inspect("4294967296")
        shard.write_bytes(good)
        # a format name with an ANSI escape and a newline: shown escaped, still one line
        with h5py.File(shard, "a") as f:
            f.attrs["format"] = np.bytes_(b"\x1b[31mnot\nours")
        inspect('format is "\\x1b[31mnot\\x0aours", not "ulysses-packed"')

    def test_malformed_json(self):
        f = self.jsonl('{"input_ids": [1, 2]}\n{"input_ids": [1, 2\n')
        self.expect_bad([f, "--seq-len", 64], f"{f.name}:2:")

    def test_missing_and_non_integer_key(self):
        f = self.jsonl('{"input_ids": [1]}\n{"text": "x"}\n')
        self.expect_bad([f, "--seq-len", 64], f"{f.name}:2:", "input_ids")
        f = self.jsonl('{"input_ids": [1, 2.5]}\n', "float.jsonl")
        self.expect_bad([f, "--seq-len", 64], f"{f.name}:1:")

    def test_negative_and_out_of_vocab_ids(self):
        f = self.jsonl('{"input_ids": [1, -3]}\n')
        self.expect_bad([f, "--seq-len", 64], f.name, "-3")
        f = self.jsonl('{"input_ids": [1, 2]}\n{"input_ids": [1, 400]}\n', "vocab.jsonl")
        self.expect_bad([f, "--seq-len", 64, "--vocab-size", 320], f.name, "400", "320")

    def test_overflowing_sp_alignment_and_escaping_shard_paths_are_refused(self):
        f = self.jsonl('{"input_ids": [1, 2, 3]}\n')
        huge = 1 << 32   # huge × huge wraps to 0 in 64 bits
        self.expect_bad([f, "--seq-len", 128, "--sp", huge, "--align", huge], "exceeds the sequence length (128)")
        run("pack", f, "-o", self.out, "--seq-len", 128, "--sp", 2)
        manifest = self.out / "manifest.json"
        m = json.loads(manifest.read_text())
        manifest.write_text(json.dumps(dict(m, sp=huge, alignment=huge)))
        p = run("verify", self.out, check=False)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("must be a positive multiple of sp", p.stderr)
        manifest.write_text(manifest.read_text().replace(f'"sp": {huge}', '"sp": 1e999'))   # no double holds it
        p = run("verify", self.out, check=False)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("a number out of range", p.stderr)
        depth = 200000   # stats nested this deep overflowed the stack in the manifest reader's copies
        manifest.write_text(json.dumps(dict(m, stats=None)).replace('"stats": null', '"stats": ' + "[" * depth + "]" * depth))
        p = run("verify", self.out, check=False)
        self.assertEqual((p.returncode, p.stderr.count("\n")), (2, 1), p.stderr)
        self.assertIn("JSON nested deeper than 64 levels", p.stderr)
        shards = [dict(s, file="/etc/passwd") for s in m["shards"]]   # a shard outside the dataset's folder
        manifest.write_text(json.dumps(dict(m, shards=shards)))
        p = run("verify", self.out, check=False)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn('file "/etc/passwd" is not a plain name inside its folder', p.stderr)

    def test_long_docs_a_policy_cannot_do_is_refused(self):
        f = self.jsonl('{"input_ids": [1, 2, 3]}\n')
        self.expect_bad([f, "--seq-len", 64, "--policy", "concat", "--long-docs", "drop"],
                        "--long-docs drop: the concat policy", "--policy bfd")
        self.expect_bad([f, "--seq-len", 64, "--policy", "pad", "--long-docs", "split"],
                        "--long-docs split: the pad policy", "truncate or drop")

    def test_numbers_out_of_range_in_flags(self):
        f = self.jsonl('{"input_ids": [1, 2, 3]}\n')
        self.expect_bad([f, "--seq-len", 64, "--threads", -3], "--threads", "-3", "0 to 4096")
        self.expect_bad([f, "--seq-len", 64, "--shard-tokens", 0], "--shard-tokens", "1 to")

    def test_a_fifo_input_is_refused_not_waited_on(self):
        fifo = self.root / "tokens.u16"
        os.mkfifo(fifo)   # open() of a FIFO blocks until a writer comes: the reader must not wait
        self.expect_bad([fifo, "--format", "flat", "--flat-dtype", "uint16", "--seq-len", 64], str(fifo),
                        "not a regular file")

    def test_on_error_skip_counts(self):
        f = self.jsonl('{"input_ids": [1, 2]}\nnot json\n{"input_ids": [3]}\n')
        p = run("pack", f, "-o", self.out, "--seq-len", 64, "--on-error", "skip")
        m = json.loads((self.out / "manifest.json").read_text())
        self.assertEqual(m["stats"]["skipped_documents"], 1)
        self.assertEqual(m["stats"]["documents"], 2)
        self.assertIn("skipped", p.stderr)

    def test_megatron_bad_magic_and_size(self):
        docs = [[1, 2, 3], [4, 5]]
        write_megatron(self.root / "bad", docs)
        idx = self.root / "bad.idx"
        idx.write_bytes(b"NOTMAGIC\x00" + idx.read_bytes()[9:])
        self.expect_bad([self.root / "bad.bin", "--seq-len", 64], "bad.idx")
        write_megatron(self.root / "short", docs)
        data = self.root / "short.bin"
        data.write_bytes(data.read_bytes()[:-4])
        self.expect_bad([self.root / "short.bin", "--seq-len", 64], "short")

    def test_truncated_llmc(self):
        header = np.zeros(256, np.int32)
        header[:3] = [20240520, 1, 100]
        path = self.root / "tok.bin"
        path.write_bytes(header.tobytes() + np.arange(50, dtype=np.uint16).tobytes())
        self.expect_bad([path, "--seq-len", 64], "tok.bin", "100")

    def test_empty_corpus(self):
        f = self.jsonl("\n\n")
        self.expect_bad([f, "--seq-len", 64], "empty")

    def test_unaligned_seq_len_names_nearest(self):
        f = self.jsonl('{"input_ids": [1]}\n')
        self.expect_bad([f, "--seq-len", 1000, "--sp", 4], "1000", "768", "1024")

    def test_heads_not_divisible_by_sp(self):
        f = self.jsonl('{"input_ids": [1]}\n')
        cfg = SAMPLE.parent / "tiny-llama" / "config.json"
        self.expect_bad([f, "--seq-len", 192, "--sp", 3, "--model-config", cfg], "config.json", "(4)", "(3)", "--sp 1, 2, 4")

    def test_existing_output_needs_overwrite(self):
        f = self.jsonl('{"input_ids": [1]}\n')
        self.out.mkdir()
        p = run("pack", f, "-o", self.out, "--seq-len", 64, check=False)
        self.assertEqual(p.returncode, 2)
        self.assertIn("--overwrite", p.stderr)

    def test_unwritable_output(self):
        f = self.jsonl('{"input_ids": [1]}\n')
        blocker = self.root / "file"
        blocker.write_text("x")
        p = run("pack", f, "-o", blocker / "out", "--seq-len", 64, check=False)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn(str(blocker), p.stderr)

    def test_full_output_filesystem(self):
        with small_tmpfs(self, self.root / "small") as small:
            docs = [[(i * 7 + j) % 300 for j in range(500)] for i in range(400)]
            path = self.root / "big"
            write_megatron(path, docs)
            self.out = small / "out"
            self.expect_bad([f"{path}.bin", "--seq-len", 1024], "full", str(small))

    def test_the_free_space_asked_is_within_1_5x_of_the_shards(self):
        """The free-space check asks what the shards take (it asked ~4x of a small corpus: a fixed MiB on top): a
        filesystem 1.3x the dataset's size takes it, and a smaller one's refusal names a need within 1.5x of it."""
        path = self.root / "big"
        write_megatron(path, [[(i * 7 + j) % 300 for j in range(500)] for i in range(400)])
        real = self.root / "real"
        run("pack", f"{path}.bin", "-o", real, "--seq-len", 1024)
        size = sum(f.stat().st_size for f in real.iterdir())
        with small_tmpfs(self, self.root / "roomy", size=str(int(size * 1.3) // 4096 * 4096)) as roomy:
            run("pack", f"{path}.bin", "-o", roomy / "out", "--seq-len", 1024)
        with small_tmpfs(self, self.root / "small", size=str(size // 2 // 4096 * 4096)) as small:
            self.out = small / "out"
            line = self.expect_bad([f"{path}.bin", "--seq-len", 1024], "full")
            need = float(line.split("need ")[1].split(" MiB")[0]) * 2**20
            self.assertTrue(0.95 <= need / size <= 1.5, (need, size))

    def test_jsonl_spill_fills_the_disk(self):
        """JSONL is spilled as int32 tokens inside the output folder while it is scanned, before the free-space
        check of the shards: a full disk there is one line and exit 2 (it was a runtime_error, exit 1)."""
        with small_tmpfs(self, self.root / "tiny", size="64k") as small:
            f = self.jsonl("".join(json.dumps({"input_ids": list(range(i, i + 2000))}) + "\n" for i in range(20)))
            self.out = small / "out"
            self.expect_bad([f, "--seq-len", 2048], "cannot write scratch file", "No space left on device",
                            "free space there")


if __name__ == "__main__":
    unittest.main(verbosity=2)
