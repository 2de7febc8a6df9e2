"""Sharded model states through ulysses-train's command line under mpiexec, on the sample corpus and tiny model:
a checkpoint saved by 4 ranks sharding their states resumes unsharded at 2 ranks and sharded at 1 rank, and the
losses continue as the uninterrupted run's; merge + export-hf of a sharded run's checkpoint equals the export of
an unsharded run's byte for byte (same seed, lr 0: the weights are the seeded init); kill -9 during a sharded save
leaves `latest` on an intact checkpoint that resumes; --offload-optimizer trains as the plain run does, and
--offload-params as --offload-optimizer, bit for bit.

usage: test_sharding_cli.py ULYSSES_TRAIN ULYSSES_PACK ULYSSES_CKPT MPIEXEC
"""
import functools
import json
import pathlib
import subprocess
import sys
import time
import unittest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))   # tests/: the shared CLI checks
from cli_checks import TINY_CONFIG as CONFIG, PackedSample, kill_mid_write, losses, train_command  # noqa: E402

TRAIN, PACK, CKPT, MPIEXEC = sys.argv[1:5]
del sys.argv[1:5]


train_cmd = functools.partial(train_command, TRAIN, MPIEXEC)


class ShardedCli(PackedSample):
    PACK = PACK

    def assert_track(self, got, want, what):
        self.assertEqual(len(got), len(want), what)
        for step, (x, y) in enumerate(zip(got, want), 1):
            self.assertLessEqual(abs(x - y), 1e-5 * max(1.0, abs(y)), f"{what}, step {step}: {x} vs {y}")

    def test_sharded_checkpoint_resumes_at_other_layouts_and_modes(self):
        full = self.root / "full"
        p = self.run_ok(train_cmd(4, self.data, full, "--sp", 2, "--steps", 20, "--save-every", 10,
                                  "--sharding", "full_shard"))
        self.assertIn("memory: fp32; full_shard over 4 ranks", p.stderr)
        middle = full / "checkpoints/step-0000010"
        # the same two sequences per step in every layout: DP=2, or one rank accumulating two micro-batches
        for n, sp, accum, mode in [(2, 1, 1, "no_shard"), (1, 1, 2, "full_shard"), (4, 2, 1, "hybrid_shard")]:
            out = self.root / f"resumed-{n}-{mode}"
            p = self.run_ok(train_cmd(n, self.data, out, "--sp", sp, "--grad-accum", accum, "--steps", 20,
                                      "--sharding", mode, "--resume", middle))
            self.assertIn("resumed from", p.stderr)
            self.assert_track(losses(out), losses(full)[10:], f"resumed at {n} ranks, SP={sp}, {mode}")

    def test_export_of_a_sharded_run_equals_the_unsharded_runs(self):
        runs = {"sharded": (4, "full_shard"), "replicated": (1, "no_shard")}
        exports = {}
        for name, (n, mode) in runs.items():   # lr 0: one step leaves the seeded init, which must be the same
            out = self.root / f"lr0-{name}"
            self.run_ok(train_cmd(n, self.data, out, "--sp", 1, "--steps", 1, "--sharding", mode, lr=0))
            merged = self.root / f"merged-{name}"
            self.run_ok([CKPT, "merge", out / "checkpoints", "-o", merged])
            exports[name] = self.root / f"hf-{name}"
            self.run_ok([CKPT, "export-hf", merged, "-o", exports[name], "--dtype", "fp32"])
        a, b = (exports[k] / "model.safetensors" for k in runs)
        self.assertEqual(a.read_bytes(), b.read_bytes())

    def test_kill_during_a_sharded_save_keeps_latest_intact(self):
        out = self.root / "killed-save"
        cmd = train_cmd(4, self.data, out, "--sp", 2, "--steps", 3, "--save-every", 1, "--sharding", "full_shard")
        watch = out / "checkpoints/.step-0000002.tmp-*/model-0000[0-3]-of-00004.safetensors"   # a rank is writing
        self.assertTrue(kill_mid_write(cmd, watch), "every run finished before its second save could be caught")
        self.assertEqual((out / "checkpoints/latest").read_text().strip(), "step-0000001")
        self.run_ok(train_cmd(4, self.data, out, "--sp", 2, "--steps", 3, "--sharding", "full_shard",
                              "--resume", "auto"))
        self.assertEqual((out / "checkpoints/latest").read_text().strip(), "step-0000003")

    def test_prefetch_trains_as_without_it(self):
        # SP 2 x DP 2, hybrid, layer inputs offloaded, 2 head groups: the next unit's gathers, the inputs' copies back
        # and the next head group's projections and all-to-all issued ahead (on a CPU at once, through the same code)
        # change no loss, bit for bit in what the log prints
        runs = {}
        for prefetch in ("on", "off"):
            runs[prefetch] = self.root / f"prefetch-{prefetch}"
            p = self.run_ok(train_cmd(4, self.data, runs[prefetch], "--sp", 2, "--steps", 10, "--sharding",
                                      "hybrid_shard", "--offload-checkpoints", 1, "--attention-head-groups", 2,
                                      "--prefetch", prefetch))
            for ahead in ("prefetch: the next unit's all-gather is issued ahead",
                          "the next head group's projections and all-to-all are issued ahead"):
                self.assertEqual(ahead in p.stderr, prefetch == "on", p.stderr[-2000:])
        self.assertEqual(losses(runs["on"]), losses(runs["off"]))

    def test_offloaded_optimizer_trains_as_the_plain_run(self):
        plain, offloaded = self.root / "plain", self.root / "offloaded"
        self.run_ok(train_cmd(2, self.data, plain, "--sp", 2, "--steps", 10, "--sharding", "no_shard"))
        p = self.run_ok(train_cmd(2, self.data, offloaded, "--sp", 2, "--steps", 10, "--offload-optimizer"))
        self.assertIn("optimizer offloaded", p.stderr)
        self.assertIn("offloaded model states", p.stderr)
        self.assert_track(losses(offloaded), losses(plain), "offloaded optimizer")
        # the parameters too: the same run bit for bit in what the log prints (their copies in host memory)
        params = self.root / "offloaded-params"
        p = self.run_ok(train_cmd(2, self.data, params, "--sp", 2, "--steps", 10, "--offload-params"))
        self.assertIn("optimizer and parameters offloaded", p.stderr)
        self.assertEqual(losses(params), losses(offloaded))
        # accumulating: a step's first gradient of each shard is copied into its own host buffer, the second added
        plain, offloaded = self.root / "plain-accum", self.root / "offloaded-accum"
        self.run_ok(train_cmd(1, self.data, plain, "--grad-accum", 2, "--steps", 10, "--sharding", "no_shard"))
        self.run_ok(train_cmd(1, self.data, offloaded, "--grad-accum", 2, "--steps", 10, "--offload-optimizer"))
        self.assert_track(losses(offloaded), losses(plain), "offloaded optimizer, 2 micro-batches a step")

    def test_dry_run_builds_nothing_and_reports_states(self):
        out = self.root / "dry"
        p = self.run_ok(train_cmd(4, self.data, out, "--sp", 2, "--sharding", "hybrid_shard", "--offload-optimizer",
                                  "--dry-run"))
        for needle in ["memory: fp32; hybrid_shard over 2 ranks; optimizer offloaded", "weights",
                       "offloaded model states", "host memory per node (4 ranks)"]:
            self.assertIn(needle, p.stderr)
        self.assertFalse(out.exists())
        resumed = self.root / "dry-resume"
        self.run_ok(train_cmd(2, self.data, resumed, "--sp", 2, "--steps", 1))
        p = self.run_ok(train_cmd(2, self.data, resumed, "--sp", 2, "--steps", 2, "--resume", "auto", "--dry-run"))
        self.assertIn("would resume from", p.stderr)
        self.assertIn("sharded states", p.stderr)
        p = self.run_ok(train_cmd(2, self.data, resumed, "--sp", 2, "--steps", 2, "--dry-run"), code=2)
        self.assertIn("already holds checkpoints", p.stderr)

    def test_states_that_cannot_fit_are_refused_before_anything_is_built(self):
        """A Llama-3.1-70B shape at 8 ranks on one node: 16 bytes per parameter between them (~1.1 TB) is more than
        any CI machine has, so the plan alone refuses it, in the dry run too."""
        cfg = self.root / "llama70b.json"
        cfg.write_text(json.dumps({
            "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 320, "hidden_size": 8192,
            "intermediate_size": 28672, "num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8,
            "hidden_act": "silu", "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
            "tie_word_embeddings": False}))
        for extra in (["--dry-run"], []):
            start = time.time()
            p = self.run_ok([MPIEXEC, "-n", 8, TRAIN, "--data", self.data, "--model-config", cfg, "--output",
                             self.root / "big", "--sp", 8, "--threads", 1, *extra], code=2)
            self.assertLess(time.time() - start, 30)
            for needle in ["needs", "on this node (8 ranks", "MemTotal", "more ranks or nodes"]:
                self.assertIn(needle, p.stderr)
            self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
            self.assertFalse((self.root / "big").exists())

    def test_offload_without_sharding_is_bad_input(self):
        for flag in ("--offload-optimizer", "--offload-params"):
            p = self.run_ok(train_cmd(2, self.data, self.root / "bad", "--sp", 2, flag, "--sharding", "no_shard",
                                      "--dry-run"), code=2)
            self.assertIn(flag, p.stderr)
            self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)


if __name__ == "__main__":
    unittest.main()
