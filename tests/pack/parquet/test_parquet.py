"""ulysses-pack's parquet inputs against pyarrow (the outside reference that writes them) and `tokenizers`.

Token-id columns: the sample corpus written by pyarrow as parquet — list<int32>, list<int64>, large_list<uint16>
and fixed-size lists, several row groups, snappy / zstd / gzip / no compression, a loss mask as list<int8> or
list<bool> — packs into the very shards (XXH3 of every file, manifest stats) that the same documents as JSONL pack
into. Text columns: the rows of a string (or large_string) column tokenized by `ulysses-pack tokenize` are
`Tokenizer.encode(text).ids` + EOS for every row, and `pack --tokenizer` from parquet writes the shards that packing
the same text from JSONL writes. Bad rows and bad files: one error line naming the file (and row), exit 2, no output;
--on-error skip counts bad rows.

usage: test_parquet.py ULYSSES_PACK SAMPLE_JSONL_GZ
"""
import gzip
import json
import os
import pathlib
import subprocess
import sys
import unittest

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))   # tests/: the shared CLI checks
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "tokenize"))
from cli_checks import TempDirCase, one_error_line  # noqa: E402
from text_corpus import corpus, train  # noqa: E402

PACK = sys.argv.pop(1)
SAMPLE = pathlib.Path(sys.argv.pop(1))
COMMON = ["--seq-len", 512, "--sp", 4, "--valid-fraction", 0.05, "--threads", 2]


def run(*args, code=0):
    p = subprocess.run([PACK, *map(str, args)], capture_output=True, text=True, errors="replace", timeout=600)
    assert p.returncode == code, f"exit {p.returncode} (wanted {code}): {p.stderr[-3000:]}"
    return p


def sample_docs():
    with gzip.open(SAMPLE, "rt") as f:
        return [json.loads(line)["input_ids"] for line in f if line.strip()]


def peak_memory(*args):
    """Runs ulysses-pack ARGS from a small Python (whose children start small) and returns (exit code, its peak
    resident memory in bytes)."""
    measure = ("import resource, subprocess, sys; code = subprocess.run(sys.argv[1:], capture_output=True).returncode; "
               "print(code, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    p = subprocess.run([sys.executable, "-c", measure, PACK, *map(str, args)], capture_output=True, text=True,
                       timeout=600)
    code, kib = p.stdout.split()
    return int(code), int(kib) * 1024


def shards(folder):
    m = json.loads((folder / "manifest.json").read_text())
    return m, [(s["file"], s["xxh3"]) for s in m["shards"]]


class TokenIds(TempDirCase):
    def setUp(self):
        super().setUp()
        self.docs = sample_docs()
        # a loss mask that is not all ones: the first third of each document is a "prompt"
        self.masks = [[0] * (len(d) // 3) + [1] * (len(d) - len(d) // 3) for d in self.docs]

    def pack_jsonl(self, *extra, mask=False):
        f = self.root / "ids.jsonl"
        with open(f, "w") as out:
            for d, m in zip(self.docs, self.masks):
                out.write(json.dumps({"input_ids": d, **({"mask": m} if mask else {})}) + "\n")
        run("pack", f, "-o", self.root / "from-jsonl", *COMMON, *extra)
        return shards(self.root / "from-jsonl")

    def test_list_types_and_codecs_pack_like_jsonl(self):
        want_manifest, want = self.pack_jsonl()
        cases = [(pa.list_(pa.int32()), "snappy", 16), (pa.list_(pa.int64()), "zstd", 100),
                 (pa.large_list(pa.uint16()), "gzip", 7), (pa.list_(pa.uint64()), "none", 1000)]
        for i, (kind, codec, group) in enumerate(cases):
            f = self.root / f"ids-{i}.parquet"
            table = pa.table({"title": [f"doc {k}" for k in range(len(self.docs))],
                              "input_ids": pa.array(self.docs, kind)})
            pq.write_table(table, f, compression=codec, row_group_size=group)
            self.assertGreater(pq.ParquetFile(f).num_row_groups, 1 if group < len(self.docs) else 0)
            out = self.root / f"from-parquet-{i}"
            run("pack", f, "-o", out, *COMMON)
            got_manifest, got = shards(out)
            self.assertEqual(got, want, f"{kind}, {codec}")
            self.assertEqual(got_manifest["stats"], want_manifest["stats"])
            self.assertEqual(got_manifest["inputs"][0]["format"], "parquet")
            self.assertEqual(got_manifest["inputs"][0]["documents"], len(self.docs))

    def test_fixed_size_lists(self):
        docs = [d[:40] for d in self.docs if len(d) >= 40]
        self.docs, self.masks = docs, [[1] * 40 for _ in docs]
        _, want = self.pack_jsonl()
        f = self.root / "fixed.parquet"
        pq.write_table(pa.table({"input_ids": pa.array(docs, pa.list_(pa.int32(), 40))}), f)
        run("pack", f, "-o", self.out, *COMMON)
        self.assertEqual(shards(self.out)[1], want)

    def test_loss_mask_int8_and_bool(self):
        _, want = self.pack_jsonl("--loss-mask-key", "mask", mask=True)
        for kind in (pa.list_(pa.int8()), pa.list_(pa.bool_())):
            f = self.root / f"mask-{kind}.parquet".replace("<", "").replace(">", "").replace(" ", "")
            values = self.masks if kind.value_type != pa.bool_() else [[bool(v) for v in m] for m in self.masks]
            pq.write_table(pa.table({"input_ids": pa.array(self.docs, pa.list_(pa.int32())),
                                     "mask": pa.array(values, kind)}), f, row_group_size=50)
            out = self.root / f"from-{f.stem}"
            run("pack", f, "-o", out, "--loss-mask-key", "mask", *COMMON)
            self.assertEqual(shards(out)[1], want, str(kind))

    def test_memory_does_not_grow_with_the_file(self):
        """A 265 MiB file (45M random ids as int64, in 240 documents of about 190K tokens) packs in less than 3/4 of
        its size of memory (about 100 MiB of what it takes is packing's own, as for JSONL): rows are decoded a batch of
        about 16 MiB at a time — not 1,024 rows, which would be the whole file (843 MiB) —, no row group is cached whole (with
        Arrow's pre-buffering on, the column chunks of the whole file stay cached). Not under the sanitizers, whose
        allocator keeps freed memory in quarantine."""
        if os.environ.get("ULYSSES_SANITIZED") == "1":
            self.skipTest("peak memory under AddressSanitizer measures its quarantine, not the reader")
        rng = np.random.default_rng(0)
        lengths = rng.integers(150_000, 230_000, 240)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
        ids = rng.integers(0, 2**31 - 1, int(offsets[-1]), dtype=np.int64)
        f = self.root / "big.parquet"
        pq.write_table(pa.table({"input_ids": pa.ListArray.from_arrays(pa.array(offsets), pa.array(ids))}), f,
                       row_group_size=100)
        del ids
        code, peak = peak_memory("pack", f, "-o", self.out, "--seq-len", 8192, "--threads", 2)
        self.assertEqual(code, 0)
        self.assertLess(peak, f.stat().st_size * 3 / 4, f"peak {peak / 2**20:.0f} MiB for a {f.stat().st_size / 2**20:.0f} "
                                                    "MiB file")

    def test_threads_do_not_change_the_shards(self):
        files = [self.root / "ids-a.parquet", self.root / "ids-b.parquet"]
        pq.write_table(pa.table({"input_ids": pa.array(self.docs[::2], pa.list_(pa.int32()))}), files[0], row_group_size=10)
        pq.write_table(pa.table({"input_ids": pa.array(self.docs[1::2], pa.list_(pa.int64()))}), files[1])
        for threads in (1, 3):
            run("pack", *files, "-o", self.root / f"t{threads}", *COMMON[:-2], "--threads", threads)
        self.assertEqual(shards(self.root / "t1")[1], shards(self.root / "t3")[1])
        self.assertEqual(json.loads((self.root / "t1/manifest.json").read_text())["stats"]["documents"], len(self.docs))


class Text(TempDirCase):
    @classmethod
    def setUpClass(cls):
        cls.texts = corpus(SAMPLE, 1_500_000)

    def test_text_column_tokenized_like_tokenizers(self):
        tok, eos = train("llama3", self.texts, self.root / "tok")
        want = [ids if ids[-1] == eos else ids + [eos] for ids in (e.ids for e in tok.encode_batch(self.texts))]
        for kind, group in ((pa.string(), 300), (pa.large_string(), 5000), (pa.string_view(), 2000)):
            f = self.root / f"text-{kind}.parquet"
            pq.write_table(pa.table({"id": list(range(len(self.texts))), "text": pa.array(self.texts, kind)}), f,
                           row_group_size=group, compression="zstd")
            out = self.root / f"ids-{kind}.jsonl"
            run("tokenize", f, "-o", out, "--tokenizer", self.root / "tok", "--threads", 3 if kind == pa.string() else 1)
            got = [json.loads(line)["input_ids"] for line in out.read_text().splitlines()]
            self.assertEqual(len(got), len(want))
            bad = [i for i, (g, w) in enumerate(zip(got, want)) if g != w]
            self.assertEqual(bad, [], f"{kind}: {len(bad)} rows differ" if bad else "")
        # pack from parquet text == pack from the same text as JSONL == pack from tokenizers' ids
        jsonl = self.root / "text.jsonl"
        jsonl.write_text("".join(json.dumps({"text": t}) + "\n" for t in self.texts), encoding="utf-8")
        ids = self.root / "want.jsonl"
        ids.write_text("".join(json.dumps({"input_ids": w}) + "\n" for w in want))
        run("pack", self.root / "text-string.parquet", "-o", self.root / "p-parquet", "--tokenizer", self.root / "tok",
            *COMMON)
        run("pack", jsonl, "-o", self.root / "p-jsonl", "--tokenizer", self.root / "tok", *COMMON)
        run("pack", ids, "-o", self.root / "p-ids", *COMMON)
        parquet_manifest, from_parquet = shards(self.root / "p-parquet")
        self.assertEqual(from_parquet, shards(self.root / "p-jsonl")[1])
        self.assertEqual(from_parquet, shards(self.root / "p-ids")[1])
        self.assertEqual(parquet_manifest["tokenizer"]["eos_id"], eos)


class BadParquet(TempDirCase):
    def fails(self, args, *needles, out=None):
        out = out or self.out
        p = run(*args, "-o", out, code=2)
        return one_error_line(self, p.stderr, needles, out)

    def write(self, name, columns, **kw):
        f = self.root / name
        pq.write_table(pa.table(columns), f, **kw)
        return f

    def test_bad_rows_name_the_row(self):
        ids = pa.list_(pa.int32())
        cases = [
            ({"input_ids": pa.array([[1, 2], None, [3]], ids)}, [], "row 2: null in column \"input_ids\""),
            ({"input_ids": pa.array([[1, 2], [3, None]], ids)}, [], "row 2: value 1 of column \"input_ids\" is null"),
            ({"input_ids": pa.array([[1], [2], [-5]], ids)}, [], "row 3: value 0 of column \"input_ids\" is -5"),
            ({"input_ids": pa.array([[1], [2**40]], pa.list_(pa.int64()))}, [], f"row 2: value 0 of column "
                                                                             f"\"input_ids\" is {2**40}, not in [0, 2147483648)"),
            ({"input_ids": pa.array([[1], [300]], ids)}, ["--vocab-size", 259], "row 2: token id 300"),
            ({"input_ids": pa.array([[1, 2]], ids), "m": pa.array([[1]], pa.list_(pa.int8()))},
             ["--loss-mask-key", "m"], "row 1: 2 token ids but 1 loss mask values"),
            ({"input_ids": pa.array([[1, 2]], ids), "m": pa.array([[1, 2]], pa.list_(pa.int8()))},
             ["--loss-mask-key", "m"], "row 1: value 1 of column \"m\" is 2, not in [0, 2)"),
        ]
        for i, (columns, extra, needle) in enumerate(cases):
            f = self.write(f"bad-{i}.parquet", columns)
            self.fails(["pack", f, "--seq-len", 256, *extra], f"{f}: {needle}", "HINT")

    def test_rows_are_numbered_across_batches_and_row_groups(self):
        """Row numbers count from 1 over the whole file: past the reader's 1,024-row batches and the row groups."""
        rows = [[5, 6]] * 3000
        rows[2499] = [5, -6]
        f = self.write("late.parquet", {"input_ids": pa.array(rows, pa.list_(pa.int32()))}, row_group_size=700)
        self.fails(["pack", f, "--seq-len", 256], f"{f}: row 2500: value 1 of column \"input_ids\" is -6")
        texts = ["fine"] * 3000
        texts[2047] = None
        t = self.write("late-text.parquet", {"text": texts}, row_group_size=1000)
        tok = self.root / "tok"
        train("gpt2", ["fine words here"] * 100, tok, vocab_size=300)
        self.fails(["pack", t, "--seq-len", 256, "--tokenizer", tok], f"{t}: row 2048: null text")
        p = run("pack", t, "-o", self.root / "skipped", "--seq-len", 256, "--tokenizer", tok, "--on-error", "skip")
        self.assertIn(f"{t}: row 2048: null text", p.stderr)
        manifest = json.loads((self.root / "skipped/manifest.json").read_text())
        self.assertEqual((manifest["stats"]["skipped_documents"], manifest["inputs"][0]["documents"]), (1, 2999))

    def test_skip_counts_bad_rows(self):
        f = self.write("some-bad.parquet", {"input_ids": pa.array([[1] * 70, None, [2] * 70, [-1]],
                                                                  pa.list_(pa.int32()))})
        p = run("pack", f, "-o", self.out, "--seq-len", 256, "--on-error", "skip")
        self.assertIn(f"{f}: row 2: null", p.stderr)
        manifest = json.loads((self.out / "manifest.json").read_text())
        self.assertEqual((manifest["stats"]["skipped_documents"], manifest["inputs"][0]["documents"]), (2, 2))

    def test_bad_columns_and_files(self):
        f = self.write("cols.parquet", {"text": ["a"], "n": [1]})
        self.fails(["pack", f, "--seq-len", 256], f"{f}: no column \"input_ids\"", "\"text\" (string)", "--tokens-key")
        self.fails(["pack", f, "--seq-len", 256, "--tokens-key", "text"],
                   f"{f}: column \"text\" is string, not token ids")
        self.fails(["pack", f, "--seq-len", 256, "--tokens-key", "n"], "column \"n\" is int64")
        good = self.write("good.parquet", {"input_ids": pa.array([[1, 2, 3]] * 50, pa.list_(pa.int32()))})
        data = good.read_bytes()
        for name, body in (("garbage.parquet", b"not parquet at all\n" * 10), ("truncated.parquet", data[:-30]),
                           ("empty.parquet", b""), ("footer-only.parquet", b"PAR1" + data[-12:])):
            (self.root / name).write_bytes(body)
            self.fails(["pack", self.root / name, "--seq-len", 256], f"{self.root / name}: not a readable parquet file")
        (self.root / "dir.parquet").mkdir()
        self.fails(["pack", self.root / "dir.parquet", "--seq-len", 256], str(self.root / "dir.parquet"),
                   "is not a regular file")
        twice = self.root / "twice.parquet"
        pq.write_table(pa.Table.from_arrays([pa.array([[1]]), pa.array([[2]])], names=["input_ids", "input_ids"]), twice)
        self.fails(["pack", twice, "--seq-len", 256], f'{twice}: 2 columns are named "input_ids"')
        bools = self.write("bool-ids.parquet", {"input_ids": pa.array([[True, False]], pa.list_(pa.bool_()))})
        self.fails(["pack", bools, "--seq-len", 256], 'column "input_ids" is list<element: bool>, not token ids')

    def test_a_page_header_claiming_gigabytes_costs_none(self):
        """A page header that claims 2 GiB (the fuzzer's find): refused in one line before the reader allocates it."""
        f = self.write("claims.parquet", {"input_ids": pa.array([[1, 2, 3]] * 40, pa.list_(pa.int32()))},
                       compression="none", use_dictionary=False)
        data = f.read_bytes()

        def varint(at):   # thrift compact: a varint starting at `at` → (value, end)
            value = shift = 0
            while True:
                value |= (data[at] & 0x7F) << shift
                shift += 7
                at += 1
                if data[at - 1] < 0x80:
                    return value, at
        at = 4   # the first page header: fields 1, 2, 3 (type, uncompressed and compressed size), each i32 (0x15)
        for _ in range(3):
            self.assertEqual(data[at], 0x15)
            start = at + 1
            _, at = varint(start)
        huge, zigzag = bytearray(), 2 * (2**31 - 64)
        while zigzag >= 0x80:
            huge.append(zigzag & 0x7F | 0x80)
            zigzag >>= 7
        huge.append(zigzag)
        f.write_bytes(data[:start] + bytes(huge) + data[at:])
        self.fails(["pack", f, "--seq-len", 256], f"{f}: not a readable parquet file", "the file holds")
        code, peak = peak_memory("pack", f, "-o", self.root / "never", "--seq-len", 256)
        self.assertEqual(code, 2)
        if os.environ.get("ULYSSES_SANITIZED") != "1":
            self.assertLess(peak, 256 << 20)

    def test_corrupt_pages_never_crash(self):
        """Every byte range of a real file overwritten in turn: each run exits 0 or 2 (one line), never a crash."""
        f = self.write("pages.parquet", {"input_ids": pa.array([[k % 200, 7, 9] * 30 for k in range(300)],
                                                               pa.list_(pa.int32()))},
                       compression="snappy", row_group_size=100)
        data = f.read_bytes()
        for k, start in enumerate(range(4, len(data) - 8, max(1, len(data) // 60))):
            bad = self.root / f"corrupt-{k}.parquet"
            bad.write_bytes(data[:start] + bytes([0xFF ^ b for b in data[start:start + 8]]) + data[start + 8:])
            p = subprocess.run([PACK, "pack", str(bad), "-o", str(self.root / f"c{k}"), "--seq-len", "256"],
                               capture_output=True, text=True, timeout=120)
            self.assertIn(p.returncode, (0, 2), f"byte {start}: exit {p.returncode}: {p.stderr[-2000:]}")
            if p.returncode == 2:
                self.assertEqual(len([l for l in p.stderr.splitlines() if l.startswith("error:")]), 1, p.stderr)

    def test_text_rows(self):
        tok = self.root / "tok"
        train("gpt2", ["hello world, this is text"] * 100, tok, vocab_size=300)
        f = self.write("text.parquet", {"text": ["fine", None, "also fine"]})
        self.fails(["pack", f, "--seq-len", 256, "--tokenizer", tok], f"{f}: row 2: null text in column \"text\"")
        self.fails(["tokenize", f, "--tokenizer", tok], f"{f}: row 2: null text", out=self.root / "ids.jsonl")
        ids = self.write("ids.parquet", {"input_ids": pa.array([[1]], pa.list_(pa.int32()))})
        self.fails(["pack", ids, "--seq-len", 256, "--tokenizer", tok], f"{ids}: no column \"text\"", "--text-key")
        self.fails(["tokenize", ids, "--tokenizer", tok, "--text-key", "input_ids"],
                   "column \"input_ids\" is list<element: int32>, not text", out=self.root / "ids2.jsonl")
        binary = self.write("binary.parquet", {"text": pa.array([b"caf\xc3"], pa.binary())})
        self.fails(["pack", binary, "--seq-len", 256, "--tokenizer", tok], "column \"text\" is binary, not text")


if __name__ == "__main__":
    unittest.main(verbosity=2)
