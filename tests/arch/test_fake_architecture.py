"""A new architecture is one row of src/arch/architectures.cpp: the real ulysses-pack, ulysses-train and
ulysses-ckpt, linked with a copy of that file holding one more row ("fakellama", add_fake_architecture.py),
accept a config.json of that model_type end to end — pack checks it, the trainer builds and trains the model
and writes a checkpoint, ulysses-ckpt inspects and exports it — while the programs built from the tree as it
is refuse the same config.

usage: test_fake_architecture.py PACK FAKE_PACK FAKE_TRAIN CKPT FAKE_CKPT MPIEXEC
"""
import json
import pathlib
import subprocess
import sys
import unittest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))   # tests/: the shared CLI checks
from cli_checks import SAMPLE, TINY_CONFIG, TempDirCase  # noqa: E402

PACK, FAKE_PACK, FAKE_TRAIN, CKPT, FAKE_CKPT, MPIEXEC = sys.argv[1:7]
del sys.argv[1:7]


def run(*cmd):
    return subprocess.run(list(map(str, cmd)), capture_output=True, text=True, timeout=600)


class FakeArchitecture(TempDirCase):
    def setUp(self):
        super().setUp()
        cfg = json.loads(TINY_CONFIG.read_text())
        cfg["model_type"] = "fakellama"
        cfg["architectures"] = ["FakeLlamaForCausalLM"]
        self.config = self.root / "config.json"
        self.config.write_text(json.dumps(cfg))

    def pack(self, binary, out):
        return run(binary, "pack", SAMPLE, "-o", out, "--seq-len", 256, "--sp", 2, "--pad-id", 258,
                   "--model-config", self.config)

    def test_one_row_is_all_an_architecture_needs(self):
        refused = self.pack(PACK, self.root / "refused")
        self.assertEqual(refused.returncode, 2, refused.stderr)
        self.assertIn('"fakellama" is not supported', refused.stderr)

        data = self.root / "packed"
        p = self.pack(FAKE_PACK, data)
        self.assertEqual(p.returncode, 0, p.stderr)

        run_dir = self.root / "run"
        p = run(MPIEXEC, "-n", 2, FAKE_TRAIN, "--data", data, "--model-config", self.config, "--output", run_dir,
                "--sp", 2, "--steps", 2, "--threads", 1)
        self.assertEqual(p.returncode, 0, p.stderr[-3000:])
        self.assertIn("model FakeLlamaForCausalLM", p.stderr)

        p = run(FAKE_CKPT, "inspect", run_dir)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("config: FakeLlamaForCausalLM (fakellama)", p.stdout)
        p = run(FAKE_CKPT, "export-hf", run_dir, "-o", self.root / "hf")
        self.assertEqual(p.returncode, 0, p.stderr)
        exported = json.loads((self.root / "hf" / "config.json").read_text())
        self.assertEqual((exported["model_type"], exported["architectures"]), ("fakellama", ["FakeLlamaForCausalLM"]))

        p = run(CKPT, "inspect", run_dir)
        self.assertEqual(p.returncode, 2, p.stdout)
        self.assertIn('"fakellama" is not supported', p.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
