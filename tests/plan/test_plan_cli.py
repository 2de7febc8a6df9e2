"""ulysses-plan and the trainer's refusal from the command line, and the planner's prediction against measured runs.

- An 8B config at 4 × 8 H100 and 1M tokens with slurm/train_1m.sbatch's flags fits; without sharding it does not:
  exit 2, one line naming the flag; both in ≤ 2 s and ≤ 200 MiB (the planner is torch-free).
- ulysses-train refuses an 8B config at 8 CPU ranks before building anything (the same arithmetic), ≤ 5 s.
- Prediction (CPU, fp32): a profile calibrated here (ulysses-train --calibrate-memory at 1024 and 4096 tokens) predicts
  the peak RSS per rank of real 2-step runs for S in {2K, 8K} × {plain, all features} × {SP 1, SP 2} on memory_bench's
  model, within 15% (tools/bench/plan_bench.py prints the RATIO over the grid, 32K included). Calibration and runs
  use memory_bench's glibc settings (MALLOC_MMAP_THRESHOLD_/MALLOC_TRIM_THRESHOLD_): with glibc's default dynamic
  threshold freed blocks under 32 MiB stay resident and a peak RSS depends on allocation sizes, not just live bytes
  (docs/planning.md).

usage: test_plan_cli.py ULYSSES_PLAN ULYSSES_TRAIN ULYSSES_PACK MPIEXEC
"""
import json
import os
import pathlib
import random
import resource
import subprocess
import sys
import time
import unittest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))   # tests/: the shared CLI checks
from cli_checks import TempDirCase, one_error_line  # noqa: E402

PLAN, TRAIN, PACK, MPIEXEC = sys.argv[1:5]
del sys.argv[1:5]

LLAMA_8B = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 128256, "hidden_size": 4096,
            "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
            "hidden_act": "silu", "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
            "tie_word_embeddings": False}
BENCH = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 32000, "hidden_size": 256,
         "intermediate_size": 896, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 1,
         "head_dim": 64, "hidden_act": "silu", "max_position_embeddings": 65536, "rms_norm_eps": 1e-5,
         "rope_theta": 500000.0, "tie_word_embeddings": False}
SBATCH_FLAGS = ["--precision", "bf16", "--offload-optimizer", "--offload-checkpoints", "-1", "--tiled-mlp",
                "--tiled-logits"]
ALL_FEATURES = ["--activation-checkpointing", "--tiled-mlp", "--logits-chunk-tokens", "256"]


def timed(cmd):
    """Runs cmd in a fresh Python so RUSAGE_CHILDREN is this command's alone: (process, seconds, peak RSS MiB)."""
    probe = ("import json,resource,subprocess,sys,time;t=time.time();"
             "p=subprocess.run(sys.argv[1:],capture_output=True,text=True);"
             "print(json.dumps([p.returncode,p.stdout,p.stderr,time.time()-t,"
             "resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss/1024]))")
    out = subprocess.run([sys.executable, "-c", probe, *map(str, cmd)], capture_output=True, text=True, check=True)
    code, stdout, stderr, seconds, mib = json.loads(out.stdout)
    return subprocess.CompletedProcess(cmd, code, stdout, stderr), seconds, mib


class PlanCli(TempDirCase):
    def setUp(self):
        super().setUp()
        self.llama = self.root / "llama8b.json"
        self.llama.write_text(json.dumps(LLAMA_8B))

    def test_the_sbatch_plan_fits_and_unsharded_states_are_refused_with_the_flag(self):
        base = [PLAN, "--model", self.llama, "--nodes", 4, "--gpus-per-node", 8, "--sp", 8, "--seq-len", "1M"]
        p, seconds, mib = timed(base + SBATCH_FLAGS)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("fits", p.stdout)
        self.assertIn("ulysses-pack pack CORPUS -o DATA --seq-len 1048576 --sp 8", p.stdout)
        self.assertIn("bash slurm/train_1m.sbatch", p.stdout)
        self.assertLess(seconds, 2)
        self.assertLess(mib, 200)
        p, seconds, mib = timed(base + ["--precision", "bf16", "--sharding", "no_shard", "--activation-checkpointing",
                                        "--offload-checkpoints", "-1", "--tiled-mlp", "--tiled-logits"])
        one_error_line(self, p.stderr, ["--seq-len 1048576 does not fit", "GPU memory", "--sharding full_shard"],
                       self.root / "nothing")
        self.assertEqual(p.returncode, 2)
        self.assertLess(seconds, 2)
        self.assertLess(mib, 200)

    def test_the_sbatch_plans_before_it_submits(self):
        """slurm/train_1m.sbatch's own plan (PLAN_ONLY=1: no Slurm needed) for 8B / 1M / SP 8 / 80 GB fits; without
        its memory flags it stops before submitting, with the planner's line."""
        root = pathlib.Path(__file__).resolve().parents[2]
        env = dict(os.environ, ULYSSES_ROOT=str(root), ULYSSES_BIN=str(pathlib.Path(PLAN).resolve().parents[2]),
                   MODEL_CONFIG=str(self.llama), NODES="4", GPUS_PER_NODE="8", SP="8", PLAN_ONLY="1",
                   PRECISION="bf16")
        p = subprocess.run(["bash", str(root / "slurm/train_1m.sbatch")], env=env, capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("--seq-len 1048576", p.stdout)
        self.assertIn("fits", p.stdout)
        self.assertNotIn("+ sbatch", p.stdout)
        p = subprocess.run(["bash", str(root / "slurm/train_1m.sbatch")], env=dict(env, MEMORY_ARGS="--sharding no_shard"),
                           capture_output=True, text=True)
        self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
        self.assertIn("the memory plan does not fit (exit 2): nothing submitted", p.stdout)
        self.assertIn("does not fit", p.stderr)

    def test_choose_names_a_layout_that_reaches_the_target(self):
        p = subprocess.run(list(map(str, [PLAN, "--model", self.llama, "--nodes", 8, "--sp", "choose", "--seq-len",
                                          "4M", *SBATCH_FLAGS, "--json"])), capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        plan = json.loads(p.stdout)
        self.assertTrue(plan["fits"])
        self.assertGreaterEqual(plan["longest"], 4 << 20)
        self.assertLessEqual(plan["nodes"], 8)

    def test_bad_flags_are_one_line(self):
        for extra, needle in ((["--sp", 3], "--sp 3"), (["--seq-len", "lots"], "--seq-len"),
                              (["--gpu-memory", "huge"], "--gpu-memory"), (["--profile", "nowhere.json"], "nowhere.json"),
                              (["--sp", "choose"], "--sp choose needs a target")):
            p = subprocess.run(list(map(str, [PLAN, "--model", self.llama, *extra])), capture_output=True, text=True)
            self.assertEqual(p.returncode, 2, (extra, p.stderr))
            one_error_line(self, p.stderr, [needle], self.root / "nothing")

    def test_the_trainer_refuses_what_the_plan_says_cannot_fit(self):
        data = self.root / "data"
        src = self.root / "docs.jsonl"
        src.write_text("".join(json.dumps({"input_ids": list(range(1, 600))}) + "\n" for _ in range(4)))
        subprocess.run([PACK, "pack", src, "-o", data, "--seq-len", "512", "--sp", "8", "--vocab-size", "128256"],
                       check=True, capture_output=True)
        p, seconds, _ = timed([MPIEXEC, "-n", 8, TRAIN, "--data", data, "--model-config", self.llama, "--output",
                               self.root / "run", "--sp", 8, "--threads", 1, "--dry-run"])
        self.assertEqual(p.returncode, 2, p.stderr)
        lines = p.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, p.stderr)
        for needle in ["error: the memory plan at S = 512 needs", "on this node (8 ranks", "HINT"]:
            self.assertIn(needle, lines[0])
        self.assertLess(seconds, 5)
        self.assertFalse((self.root / "run").exists())


MALLOC = {"MALLOC_MMAP_THRESHOLD_": "131072", "MALLOC_TRIM_THRESHOLD_": "131072"}   # as tools/bench/memory_bench.py


def run(cmd):
    return subprocess.run(list(map(str, cmd)), capture_output=True, text=True, env=dict(os.environ, **MALLOC))


class Prediction(TempDirCase):
    """Calibrate once, then predict real runs' peak RSS per rank within 15%."""

    def test_predicted_peak_rss_is_within_15_percent_of_the_measured(self):
        cfg = self.root / "bench.json"
        cfg.write_text(json.dumps(BENCH))
        profile = self.root / "cpu-profile.json"
        p = run([TRAIN, "--calibrate-memory", profile, "--model-config", cfg, "--calibrate-lengths", "1024,4096"])
        self.assertEqual(p.returncode, 0, p.stderr[-2000:])
        errors = []
        for S in (2048, 8192):
            data = self.pack(S)
            for features in ([], ALL_FEATURES):
                for sp in (1, 2):
                    measured = self.peak(data, cfg, sp, features)
                    predicted = self.predict(cfg, profile, S, sp, features)
                    errors.append((S, "all" if features else "plain", sp, predicted / measured))
        report = "; ".join(f"S={s} {f} SP{sp}: {r:.3f}" for s, f, sp, r in errors)
        print("predicted/measured:", report)
        for s, f, sp, r in errors:
            self.assertLess(abs(r - 1), 0.15, report)

    def pack(self, S):
        rng = random.Random(S)
        src = self.root / f"docs-{S}.jsonl"
        src.write_text("".join(json.dumps({"input_ids": [rng.randrange(32000) for _ in range(S)]}) + "\n"
                               for _ in range(3)))
        out = self.root / f"data-{S}"
        subprocess.run(list(map(str, [PACK, "pack", src, "-o", out, "--seq-len", S, "--sp", 2, "--align", 1,
                                      "--vocab-size", 32000])), check=True, capture_output=True)
        return out

    def peak(self, data, cfg, sp, features):
        out = self.root / f"run-{sp}-{len(features)}-{data.name}"
        p = run([MPIEXEC, "-n", sp, TRAIN, "--data", data, "--model-config", cfg, "--output", out, "--sp", sp,
                 "--steps", 2, "--threads", max(1, 2 // sp), "--sharding", "no_shard", *features])
        self.assertEqual(p.returncode, 0, p.stderr[-2000:])
        metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
        return max(m["peak_rss_mib"] for m in metrics) * 2**20

    def predict(self, cfg, profile, S, sp, features):
        p = subprocess.run(list(map(str, [PLAN, "--model", cfg, "--device", "cpu", "--gpus-per-node", sp, "--sp", sp,
                                          "--seq-len", S, "--profile", profile, "--sharding", "no_shard", *features,
                                          "--json"])), capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        return json.loads(p.stdout)["memory_per_rank"]


if __name__ == "__main__":
    unittest.main()
