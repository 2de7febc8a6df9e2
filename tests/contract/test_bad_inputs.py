"""The bad-input contract of the torch-free tools, as one table (issue 15): every row is a hostile or mistaken input
to ulysses-pack, ulysses-ckpt or ulysses-plan, and each must end with exit 2, exactly one line on stderr that
names the file or flag (the needles) with a hint, and nothing left behind that looks complete (no output, no
temporary beside it). FIFOs, /proc files, directories, declared sizes far beyond the file, JSON nested 200,000
deep, numbers no double holds, paths escaping their folder, full disks, out-of-range flags, corrupt streams.

usage: test_bad_inputs.py ULYSSES_PACK ULYSSES_CKPT ULYSSES_PLAN
"""
import gzip
import json
import os
import pathlib
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest

PACK, CKPT, PLAN = (sys.argv.pop(1) for _ in range(3))
ROOT = pathlib.Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "datasets/sample/licenses.jsonl.gz"
CONFIG = ROOT / "datasets/sample/tiny-llama/config.json"
DEEP = "[" * 200000 + "]" * 200000
HUGE = 1 << 32


class Contract(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.root = pathlib.Path(cls.tmp.name)
        cls.good = cls.root / "good.jsonl"
        cls.good.write_text('{"input_ids": [1, 2, 3]}\n' * 8)
        cls.dataset = cls.root / "dataset"
        subprocess.run([PACK, "pack", str(cls.good), "-o", str(cls.dataset), "--seq-len", "128"], check=True,
                       capture_output=True)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def file(self, name, data):
        path = self.case / name
        path.parent.mkdir(parents=True, exist_ok=True)
        (path.write_bytes if isinstance(data, bytes) else path.write_text)(data)
        return path

    def copy_dataset(self, **manifest):
        """The good dataset with manifest fields replaced (a value of str is written raw, unquoted)."""
        d = self.case / "ds"
        shutil.copytree(self.dataset, d)
        m = json.loads((d / "manifest.json").read_text())
        raw = {k: v for k, v in manifest.items() if isinstance(v, Raw)}
        text = json.dumps(dict(m, **{k: v for k, v in manifest.items() if not isinstance(v, Raw)}))
        for k, v in raw.items():
            text = text.replace(f'"{k}": {json.dumps(m[k])}', f'"{k}": {v}')
        (d / "manifest.json").write_text(text)
        return d

    def hf_dir(self, config=None, safetensors=b"\x08\x00\x00\x00\x00\x00\x00\x00{}      "):
        d = self.case / "hf"
        d.mkdir()
        if config is not False:
            (d / "config.json").write_text(config if config is not None else CONFIG.read_text())
        if isinstance(safetensors, bytes):
            (d / "model.safetensors").write_bytes(safetensors)
        return d

    def expect(self, cmd, *needles, out=None):
        p = subprocess.run(list(map(str, cmd)), capture_output=True, text=True, timeout=120)
        lines = p.stderr.splitlines()
        self.assertEqual(p.returncode, 2, f"{cmd}\n{p.stderr}")
        self.assertEqual(len(lines), 1, f"{cmd}: not one line:\n{p.stderr[:2000]}")
        self.assertIn("HINT", lines[0], lines[0])
        for n in needles:
            self.assertIn(str(n), lines[0])
        if out is not None:
            self.assertFalse(out.exists(), f"{cmd}: {out} was left")
            self.assertEqual([x.name for x in out.parent.iterdir() if x.name.startswith("." + out.name)], [],
                             f"{cmd}: a temporary of {out} was left")

    def rows(self):
        """(name, function returning (command, needles, output that must not exist)) per row."""
        out = lambda: self.case / "out"   # noqa: E731
        pack = lambda *a: [PACK, "pack", *a, "-o", out()]   # noqa: E731

        def fifo(name):
            path = self.case / name
            os.mkfifo(path)
            return path

        def fifo_in(d, name):
            os.mkfifo(d / name)
            return d

        def mkdir_in(d, name):
            (d / name).mkdir()
            return d

        def megatron(idx_bytes):
            self.file("m.bin", b"\x01\x00" * 4)
            return self.file("m.idx", idx_bytes)

        def full_disk():
            if os.geteuid() != 0:
                self.skipTest("mounting a small tmpfs needs root")
            mnt = self.case / "small"
            mnt.mkdir()
            subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)], check=True)
            self.addCleanup(subprocess.run, ["umount", str(mnt)])
            big = self.file("big.jsonl", "".join(json.dumps({"input_ids": list(range(i, i + 2000))}) + "\n"
                                                 for i in range(20)))
            return [PACK, "pack", big, "-o", mnt / "out", "--seq-len", 2048], ["No space left on device"], mnt / "out"

        def shard_with_rows(rows):
            import h5py
            d = self.copy_dataset()
            shard = d / "shard-00000.h5"
            attrs = dict(h5py.File(shard, "r").attrs.items())
            with h5py.File(shard, "w") as f:
                f.attrs.update(attrs)
                f.create_dataset("input_ids", shape=(rows, 128), dtype="<i4", chunks=(1, 128))
            return d

        def shard_input_ids(**how):
            """The good shard with input_ids replaced: an external link, or stored compressed or in another file."""
            import h5py
            import numpy as np
            d = self.copy_dataset()
            with h5py.File(d / "shard-00000.h5", "a") as f:
                ids = f["input_ids"][()]
                del f["input_ids"]
                if "link" in how:
                    f["input_ids"] = h5py.ExternalLink(str(self.dataset / "shard-00000.h5"), "/input_ids")
                elif "external" in how:
                    raw = self.file("ids.raw", ids.astype("<i4").tobytes())
                    f.create_dataset("input_ids", shape=ids.shape, dtype="<i4", external=[(str(raw), 0, ids.nbytes)])
                else:
                    f.create_dataset("input_ids", data=ids.astype(np.int32), chunks=(1, 128), compression="gzip")
            return d

        checkpoint_manifest = {"format": "ulysses-checkpoint", "format_version": 1, "step": 1,
                               "layout": {"world": 1, "sp": 1, "dp": 1}, "architecture": "LlamaForCausalLM",
                               "optimizer_layout": "replicated", "consolidated": False,
                               "files": [{"file": "model.safetensors", "bytes": 10, "xxh3": "0123456789abcdef"}]}

        def checkpoint(**fields):
            d = self.case / "step-0000001"
            d.mkdir()
            text = json.dumps(dict(checkpoint_manifest, **{k: v for k, v in fields.items() if not isinstance(v, Raw)}))
            for k, v in fields.items():
                if isinstance(v, Raw):
                    text = text.replace(f'"{k}": {json.dumps(checkpoint_manifest[k])}', f'"{k}": {v}')
            (d / "manifest.json").write_text(text)
            return d

        return [
            # ---- ulysses-pack pack: inputs
            ("fifo jsonl", lambda: (pack(fifo("in.jsonl"), "--seq-len", 64), ["in.jsonl", "not a regular file"], out())),
            ("fifo flat", lambda: (pack(fifo("in.u16"), "--format", "flat", "--flat-dtype", "uint16", "--seq-len", 64),
                                   ["in.u16", "not a regular file"], out())),
            ("proc file", lambda: (pack("/proc/self/status", "--format", "jsonl", "--seq-len", 64),
                                   ["/proc/self/status:1:1"], out())),
            ("directory", lambda: (pack(self.case, "--format", "jsonl", "--seq-len", 64),
                                   [self.case, "not a regular file"], out())),
            ("missing input", lambda: (pack(self.case / "nope.jsonl", "--seq-len", 64), ["nope.jsonl", "does not exist"],
                                       out())),
            ("name too long", lambda: (pack(self.case / ("y" * 300 + ".jsonl"), "--seq-len", 64), ["does not exist"],
                                       out())),
            ("bad json line", lambda: (pack(self.file("in.jsonl", '{"input_ids": [1]}\n{"input_ids": [1,\n'),
                                            "--seq-len", 64), ["in.jsonl:2:"], out())),
            ("id beyond vocabulary", lambda: (pack(self.file("in.jsonl", '{"input_ids": [1, 99999]}\n'), "--seq-len",
                                                   64, "--model-config", CONFIG), ["in.jsonl", "99999"], out())),
            ("corrupt gzip", lambda: (pack(self.file("in.jsonl.gz", gzip.compress(b'{"input_ids": [1]}\n')[:-9] +
                                                     b"garbage!!"), "--seq-len", 64), ["in.jsonl.gz"], out())),
            ("corrupt zstd", lambda: (pack(self.file("in.jsonl.zst", b"\x28\xb5\x2f\xfd" + b"\xff" * 40), "--seq-len",
                                           64), ["in.jsonl.zst"], out())),
            ("megatron idx truncated", lambda: (pack(megatron(b"MMIDIDX\x00\x00" + b"\x01"), "--seq-len", 64),
                                                ["m.idx"], out())),
            ("megatron counts beyond the file", lambda: (pack(megatron(
                b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, 8, (1 << 64) - 1, 2)), "--seq-len", 64),
                ["m.idx", "18446744073709551615", "more than its"], out())),
            ("llm.c bad magic", lambda: (pack(self.file("x.bin", struct.pack("<256i", *([7] + [0] * 255))),
                                              "--format", "llmc", "--seq-len", 64), ["x.bin", "magic"], out())),
            ("flat odd size", lambda: (pack(self.file("t.u32", b"\x01\x00\x00"), "--format", "flat", "--flat-dtype",
                                            "uint32", "--seq-len", 64), ["t.u32", "3 bytes"], out())),
            ("full disk", full_disk),
            # ---- ulysses-pack pack: flags and output
            ("negative seq-len", lambda: (pack(self.good, "--seq-len", -64), ["--seq-len", "must be positive"], out())),
            ("sp beyond seq-len", lambda: (pack(self.good, "--seq-len", 100, "--sp", 3), ["--seq-len", "exceeds"],
                                           out())),
            ("sp x align overflow", lambda: (pack(self.good, "--seq-len", 128, "--sp", HUGE, "--align", HUGE),
                                             ["4294967296", "exceeds"], out())),
            ("negative threads", lambda: (pack(self.good, "--seq-len", 64, "--threads", -3), ["--threads"], out())),
            ("zero shard tokens", lambda: (pack(self.good, "--seq-len", 64, "--shard-tokens", 0), ["--shard-tokens"],
                                           out())),
            ("output under a file", lambda: ([PACK, "pack", self.good, "-o", self.file("f", "x") / "out", "--seq-len",
                                              64], ["f"], None)),
            ("output exists", lambda: ([PACK, "pack", self.good, "-o", self.dataset, "--seq-len", 64],
                                       ["already exists", "--overwrite"], None)),
            ("config nested", lambda: (pack(self.good, "--seq-len", 64, "--model-config",
                                            self.file("config.json", '{"x": ' + DEEP + '}')),
                                       ["config.json", "nested deeper than 64"], out())),
            ("config 1e999", lambda: (pack(self.good, "--seq-len", 64, "--model-config", self.file(
                "config.json", CONFIG.read_text().replace('"vocab_size":', '"x": 1e999, "vocab_size":'))),
                                      ["config.json", "out of range"], out())),
            ("config a directory", lambda: (pack(self.good, "--seq-len", 64, "--model-config",
                                                 mkdir_in(self.case, "config.json") / "config.json"), ["not a regular file"],
                                            out())),
            ("config 3e8 layers", lambda: (pack(self.good, "--seq-len", 64, "--model-config", self.file(
                "config.json", json.dumps(dict(json.loads(CONFIG.read_text()), num_hidden_layers=300000000)))),
                                           ["num_hidden_layers", "300000000"], out())),
            # ---- ulysses-pack verify / inspect: datasets
            ("manifest not json", lambda: ([PACK, "verify", self.file("ds/manifest.json", "{oops").parent],
                                           ["manifest.json", "not valid JSON"], None)),
            ("manifest missing", lambda: ([PACK, "verify", self.case], ["manifest.json"], None)),
            ("manifest a fifo", lambda: ([PACK, "verify", fifo_in(self.case, "manifest.json")],
                                         ["manifest.json", "not a regular file"], None)),
            ("manifest a directory", lambda: ([PACK, "verify", mkdir_in(self.case, "manifest.json")],
                                              ["manifest.json", "not a regular file"], None)),
            ("manifest nested", lambda: ([PACK, "verify", self.copy_dataset(stats=Raw(DEEP))],
                                         ["manifest.json", "nested deeper than 64"], None)),
            ("manifest 1e999", lambda: ([PACK, "verify", self.copy_dataset(seq_len=Raw("1e999"))],
                                        ["manifest.json", "out of range"], None)),
            ("shard outside the folder", lambda: ([PACK, "verify", self.copy_dataset(
                shards=[dict(json.loads((self.dataset / "manifest.json").read_text())["shards"][0], file="/etc/passwd")])],
                ["/etc/passwd", "not a plain name"], None)),
            ("sp x align overflow in manifest", lambda: ([PACK, "verify", self.copy_dataset(sp=HUGE, alignment=HUGE)],
                                                         ["must be a positive multiple"], None)),
            ("stats count a string", lambda: ([PACK, "verify", self.copy_dataset(stats={"tokens": "many"})],
                                              ["stats.tokens"], None)),
            ("format with escapes", lambda: ([PACK, "verify", self.copy_dataset(format="x\n\x1b[31m")],
                                             ["\\x0a\\x1b[31m"], None)),
            ("sample out of range", lambda: ([PACK, "inspect", self.dataset, "--sample", 99999], ["--sample 99999"],
                                             None)),
            ("negative max-tokens", lambda: ([PACK, "inspect", self.dataset, "--sample", 0, "--max-tokens", -5],
                                             ["--max-tokens"], None)),
            ("manifest seq_len differs", lambda: ([PACK, "inspect", self.copy_dataset(seq_len=64), "--sample", 0],
                                                  ["(seq_len 128,", "manifest's (seq_len 64,"], None)),
            ("shard declares 2^30 rows", lambda: ([PACK, "inspect", shard_with_rows(1 << 30), "--sample", 0],
                                                  ["1073741824 sequences", "the file holds only"], None)),
            ("shard ids an external link", lambda: ([PACK, "inspect", shard_input_ids(link=True), "--sample", 0],
                                                    ["input_ids", "a link to elsewhere"], None)),
            ("shard ids in another file", lambda: ([PACK, "inspect", shard_input_ids(external=True), "--sample", 0],
                                                   ["input_ids", "not stored in the file itself"], None)),
            ("shard ids compressed", lambda: ([PACK, "inspect", shard_input_ids(), "--sample", 0],
                                              ["input_ids", "not stored in the file itself"], None)),
            # ---- ulysses-ckpt
            ("import config nested", lambda: ([CKPT, "import-hf", self.hf_dir(config='{"a": ' + DEEP + '}'), "-o",
                                               out()], ["config.json", "nested deeper"], out())),
            ("import fifo safetensors", lambda: ([CKPT, "import-hf", fifo_in(self.hf_dir(safetensors=None),
                                                                              "model.safetensors"), "-o", out()],
                                                 ["model.safetensors", "not a regular file"], out())),
            ("import fifo config", lambda: ([CKPT, "import-hf", fifo_in(self.hf_dir(config=False), "config.json"), "-o",
                                             out()], ["config.json", "not a regular file"], out())),
            ("import header past the end", lambda: ([CKPT, "import-hf", self.hf_dir(
                safetensors=struct.pack("<Q", 5000) + b"{}"), "-o", out()], ["model.safetensors", "5000"], out())),
            ("import header 1e999", lambda: ([CKPT, "import-hf", self.hf_dir(safetensors=(lambda h: struct.pack(
                "<Q", len(h)) + h)(b'{"w": {"dtype": "F32", "shape": [1e999], "data_offsets": [0, 4]}}')), "-o",
                out()], ["model.safetensors", "out of range"], out())),
            ("inspect not a checkpoint", lambda: ([CKPT, "inspect", self.case], ["is neither a checkpoint"], None)),
            ("inspect layout nested", lambda: ([CKPT, "inspect", checkpoint(layout=Raw(DEEP))], ["nested deeper"],
                                               None)),
            ("inspect step 2.7e26", lambda: ([CKPT, "inspect", checkpoint(step=Raw("266666666666666666666666660"))],
                                             ['"step"', "not an integer"], None)),   # found by fuzzing: UB cast
            ("inspect file outside", lambda: ([CKPT, "inspect", checkpoint(
                files=[{"file": "/etc/passwd", "bytes": 1, "xxh3": "0123456789abcdef"}])], ["/etc/passwd"], None)),
            # ---- ulysses-plan
            ("plan missing model", lambda: ([PLAN, "--model", self.case / "nope.json"], ["nope.json"], None)),
            ("plan 3e8 layers", lambda: ([PLAN, "--model", self.file("config.json", json.dumps(
                dict(json.loads(CONFIG.read_text()), num_hidden_layers=300000000)))], ["num_hidden_layers"], None)),
            ("plan unknown profile", lambda: ([PLAN, "--model", CONFIG, "--profile", "tpu-v9"], ["tpu-v9"], None)),
            ("plan profile /dev/zero", lambda: ([PLAN, "--model", CONFIG, "--profile", "/dev/zero"],
                                                ["/dev/zero", "not a regular file"], None)),
            ("plan zero nodes", lambda: ([PLAN, "--model", CONFIG, "--nodes", 0], ["--nodes"], None)),
            ("plan bad size", lambda: ([PLAN, "--model", CONFIG, "--gpu-memory", "80QB"], ["--gpu-memory", "80QB"],
                                       None)),
            # a mistyped flag is named, with the nearest one, whatever else is missing
            ("pack flag typo", lambda: (pack(self.good, "--seq-length", 1024),
                                        ["--seq-length is not a flag of ulysses-pack", "did you mean --seq-len?"], out())),
            ("plan flag typo", lambda: ([PLAN, "--model", CONFIG, "--gpu-memroy", "80GB"],
                                        ["--gpu-memroy is not a flag", "did you mean --gpu-memory?"], None)),
            ("ckpt flag typo", lambda: ([CKPT, "inspect", self.dataset, "--no-tensor"],
                                        ["--no-tensor is not a flag", "did you mean --no-tensors?"], None)),
        ]

    def test_every_bad_input_is_one_line_exit_2_and_nothing_left(self):
        for name, make in self.rows():
            with self.subTest(name):
                self.case = self.root / "cases" / name.replace(" ", "-")
                self.case.mkdir(parents=True)
                cmd, needles, out = make()
                self.expect(cmd, *needles, out=out)


class Raw(str):
    """A manifest value written into the JSON text as it is (deep nesting, 1e999)."""


if __name__ == "__main__":
    unittest.main(verbosity=2)
