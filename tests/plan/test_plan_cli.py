"""ulysses-plan and the trainer's refusal from the command line, and the planner's prediction against measured runs.

- An 8B config at 4 × 8 H100 and 1M tokens with slurm/train_1m.sbatch's flags fits; without sharding it does not:
  exit 2, one line naming the flag; both in ≤ 2 s and ≤ 200 MiB (the planner is torch-free).
- A run whose attention input would pass 2^31 elements (8B, 6M tokens, 8 GPUs) is one line naming the tensor and
  the flag; --attention-head-groups auto takes the least G that fits.
- ulysses-train refuses an 8B config at 8 CPU ranks before building anything (the same arithmetic), as pure Ulysses
  and with a ring: its torch-free front in ≤ 2 s and ≤ 200 MiB per rank, with the line the trainer itself
  (ulysses-train-core) prints.

The prediction against measured runs is the test plan_prediction (tools/bench/plan_bench.py --check 0.15).

usage: test_plan_cli.py ULYSSES_PLAN ULYSSES_TRAIN ULYSSES_PACK MPIEXEC
"""
import json
import os
import pathlib
import re
import shlex
import subprocess
import sys
import time
import unittest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))   # tests/: the shared CLI checks
from cli_checks import SAMPLE, TINY_CONFIG, TempDirCase, one_error_line  # noqa: E402

PLAN, TRAIN, PACK, MPIEXEC = sys.argv[1:5]
del sys.argv[1:5]

LLAMA_8B = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 128256, "hidden_size": 4096,
            "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
            "hidden_act": "silu", "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
            "tie_word_embeddings": False}
SBATCH_FLAGS = ["--precision", "bf16", "--offload-optimizer", "--offload-checkpoints", "-1", "--tiled-mlp",
                "--tiled-logits"]


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
        self.assertIn(f"ulysses-pack pack CORPUS -o DATA --seq-len 1048576 --sp 8 --model-config {self.llama}", p.stdout)
        self.assertIn(f"DATA=DATA MODEL_CONFIG={self.llama} PRECISION=", p.stdout)   # the model: run as printed
        self.assertIn("bash slurm/train_1m.sbatch", p.stdout)
        self.assertLess(seconds, 2)
        self.assertLess(mib, 200)
        p, seconds, mib = timed(base + ["--precision", "bf16", "--sharding", "no_shard", "--activation-checkpointing",
                                        "--offload-checkpoints", "-1", "--tiled-mlp", "--tiled-logits"])
        one_error_line(self, p.stderr, ["--seq-len 1048576 does not fit", "GPU memory", "--sharding full_shard"],
                       self.root / "nothing")
        self.assertEqual(p.returncode, 2)
        # no memory flag at all: the flags that fit together, before any hardware (issue: "add 4 nodes" misled)
        p = subprocess.run(list(map(str, base + ["--precision", "bf16"])), capture_output=True, text=True)
        self.assertEqual(p.returncode, 2)
        one_error_line(self, p.stderr, ["HINT: add --offload-optimizer --tiled-mlp --tiled-logits"],
                       self.root / "nothing")
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
        # DATA's manifest gives the length (a dataset of 2048-token sequences plans 2048), and a SEQ_LEN it
        # disagrees with is refused
        data = self.root / "packed-2k"
        data.mkdir()
        (data / "manifest.json").write_text(json.dumps({"format": "ulysses-packed", "seq_len": 2048}, indent=2))
        p = subprocess.run(["bash", str(root / "slurm/train_1m.sbatch")], env=dict(env, DATA=str(data)),
                           capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("--seq-len 2048 ", p.stdout)
        p = subprocess.run(["bash", str(root / "slurm/train_1m.sbatch")],
                           env=dict(env, DATA=str(data), SEQ_LEN="1048576"), capture_output=True, text=True)
        self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
        self.assertIn("SEQ_LEN=1048576 but DATA=", p.stderr)
        for args in ("--sharding no_shard", ""):   # empty is a choice (every flag at its default), not "unset"
            p = subprocess.run(["bash", str(root / "slurm/train_1m.sbatch")], env=dict(env, MEMORY_ARGS=args),
                               capture_output=True, text=True)
            self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
            self.assertIn("the memory plan does not fit (exit 2): nothing submitted", p.stdout)
            self.assertIn("does not fit", p.stderr)
        # a model that is not there is said as such, not as a plan that does not fit (it once was)
        p = subprocess.run(["bash", str(root / "slurm/train_1m.sbatch")],
                           env=dict({k: v for k, v in env.items() if k != "MODEL_CONFIG"}, INIT_FROM="/nonexistent/m"),
                           capture_output=True, text=True)
        self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
        self.assertIn("cannot read the model config /nonexistent/m/config.json", p.stderr)
        self.assertNotIn("does not fit", p.stdout + p.stderr)

    def test_choose_names_a_layout_that_reaches_the_target(self):
        """4M needs SP 16 here: across 2 nodes, pure Ulysses only with the trainer's own opt-in (the planner, the
        sbatch and the trainer agree on the islands), else Ulysses 8 inside each node × a ring across them (the
        ring's buffers need a third node); an explicit --sp 16 without a ring or the opt-in is refused as the trainer
        would, its hint the ring."""
        choose = [PLAN, "--model", self.llama, "--nodes", 8, "--sp", "choose", "--seq-len", "4M", *SBATCH_FLAGS]
        p = subprocess.run(list(map(str, choose)), capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        sp, ring = map(int, re.search(r"chosen: .* with SP (\d+) \(Ulysses 8 × ring (\d+)\)", p.stdout).groups())
        self.assertEqual(sp, 8 * ring)
        self.assertIn(f"--sp {sp} --sp-ring {ring}", p.stdout)        # the pack line
        self.assertIn(f"SP={sp} SP_RING={ring}", p.stdout)             # the sbatch line
        self.assertNotIn("--allow-sp-across-islands", p.stdout)
        p = subprocess.run(list(map(str, [PLAN, "--model", self.llama, "--nodes", 2, "--sp", 16, "--seq-len", "1M",
                                          *SBATCH_FLAGS])), capture_output=True, text=True)
        self.assertEqual(p.returncode, 2)
        one_error_line(self, p.stderr, ["--sp 16 spans NVLink islands of 8 ranks", "use --sp 1, 2, 4, 8",
                                        "or --sp 16 --sp-ring 2"],
                       self.root / "nothing")
        p = subprocess.run(list(map(str, choose + ["--allow-sp-across-islands"])), capture_output=True, text=True)
        self.assertIn('EXTRA_ARGS="--allow-sp-across-islands" bash slurm/train_1m.sbatch', p.stdout)   # the opt-in
        p = subprocess.run(list(map(str, choose + ["--allow-sp-across-islands", "--json"])), capture_output=True,
                           text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        plan = json.loads(p.stdout)
        self.assertTrue(plan["fits"])
        self.assertGreaterEqual(plan["longest"], 4 << 20)
        self.assertLessEqual(plan["nodes"], 8)

    def test_a_tensor_past_2_31_elements_is_refused_and_auto_head_groups_keep_under(self):
        """8B at 6M tokens on 8 GPUs: q of all a rank's heads after the all-to-all is 6M × 4 × 128 = 3.2e9 elements;
        one line naming it and the flag, exit 2, where the memory would fit (GPUs of 1 TiB; where it does not, the
        memory's line comes first). With --attention-head-groups auto the plan takes G = 2 at 4.5M on 80 GiB H100s
        (where G = 1's tensors are under the limit but its memory is not), its groups in turn (the next one issued ahead
        does not fit there; at 3M it does), and G = 1 at 1M; the model's bytes, no headroom."""
        base = [PLAN, "--model", self.llama, "--gpus-per-node", 8, "--sp", 8, *SBATCH_FLAGS, "--headroom", 0]
        p = subprocess.run(list(map(str, base + ["--seq-len", "6M", "--gpu-memory", "1TiB", "--host-memory", "4TiB"])),
                           capture_output=True, text=True)
        base += ["--host-memory", "1.9TiB"]
        self.assertEqual(p.returncode, 2, p.stderr)
        one_error_line(self, p.stderr, ["q of one head group after the all-to-all", "3221225472 elements",
                                        "2^31 - 1", "--attention-head-groups"], self.root / "nothing")
        for length, ahead in (("4608K", False), ("3M", True)):
            cmd = base + ["--attention-head-groups", "auto", "--seq-len", length, "--json"]
            p = subprocess.run(list(map(str, cmd)), capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stderr)
            plan = json.loads(p.stdout)
            self.assertTrue(plan["fits"], length)
            self.assertEqual(plan["attention_head_groups"], 2, length)
            self.assertEqual(plan["heads_ahead"], ahead, length)
        p = subprocess.run(list(map(str, base + ["--attention-head-groups", "auto", "--seq-len", "1M"])),
                           capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertNotIn("head groups", p.stdout)   # G = 1 fits at 1M: auto takes the least
        self.assertIn("--attention-head-groups auto", p.stdout)   # the printed MEMORY_ARGS settle at the data's length

    def test_chosen_memory_flags_fit_and_are_printed_for_the_sbatch(self):
        base = [PLAN, "--model", self.llama, "--gpus-per-node", 8, "--sp", 8, "--precision", "bf16",
                "--choose-memory-flags"]
        p = subprocess.run(list(map(str, base + ["--seq-len", "1M"])), capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn('MEMORY_ARGS="--offload-optimizer --tiled-mlp --tiled-logits"', p.stdout)
        p = subprocess.run(list(map(str, base + ["--seq-len", "8M"])), capture_output=True, text=True)
        self.assertEqual(p.returncode, 2)
        one_error_line(self, p.stderr, ["--choose-memory-flags", "8388608"], self.root / "nothing")
        # with --sp choose: each layout is tried with the flags chosen for it (once refused, its hint listing the
        # very flags it was asked to choose); 4M on 4 nodes needs more than one node's SP, and memory flags
        choose = [PLAN, "--model", self.llama, "--nodes", 4, "--gpus-per-node", 8, "--sp", "choose", "--precision",
                  "bf16", "--seq-len", "4M"]
        p = subprocess.run(list(map(str, choose)), capture_output=True, text=True)
        self.assertEqual(p.returncode, 2, p.stdout)   # no layout fits without memory flags
        p = subprocess.run(list(map(str, choose + ["--choose-memory-flags"])), capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        line = next(x for x in p.stdout.splitlines() if "bash slurm/train_1m.sbatch" in x)
        self.assertRegex(line, r'SP=[0-9]+ .* MEMORY_ARGS="--[^"]+"')

    def test_the_trainers_names_are_accepted(self):
        """One vocabulary: ulysses-train's --model-config / --init-from and --memory-profile name the same as
        ulysses-plan's --model and --profile."""
        common = ["--gpus-per-node", 8, "--sp", 8, "--seq-len", "1M", *SBATCH_FLAGS, "--json"]
        outs = [subprocess.run(list(map(str, [PLAN, model, self.llama, profile, "h100", *common])), capture_output=True,
                               text=True)
                for model, profile in (("--model", "--profile"), ("--model-config", "--memory-profile"),
                                       ("--init-from", "--profile"))]
        for p in outs:
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertEqual(p.stdout, outs[0].stdout)

    def test_one_precision_default_and_a_stated_headroom(self):
        """--precision's default is the sbatch's: bf16 on GPUs, fp32 on a CPU. A counted profile (h100) keeps 5% of
        the usable memory free in what the plan recommends (its longest length uses at most 95% of 92% of 80 GiB, and
        close to it); a measured one (cpu) and --headroom 0 keep none; a bad --headroom is one line."""
        def plan(*extra):
            p = subprocess.run(list(map(str, [PLAN, "--model", self.llama, "--gpus-per-node", 8, "--sp", 8, "--json",
                                              *extra])), capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stderr)
            return json.loads(p.stdout)
        self.assertEqual(plan(), plan("--precision", "bf16"))
        self.assertNotEqual(plan(), plan("--precision", "fp32"))
        cpu = ["--device", "cpu", "--host-memory", "1TiB"]
        self.assertEqual(plan(*cpu), plan(*cpu, "--precision", "fp32"))
        self.assertEqual(plan(*cpu)["headroom"], 0)
        kept, full = plan(*SBATCH_FLAGS), plan(*SBATCH_FLAGS, "--headroom", 0)   # lengths where the GPU's memory binds
        self.assertEqual((kept["headroom"], full["headroom"]), (0.05, 0))
        self.assertLess(kept["longest"], full["longest"])
        usable = 0.92 * 80 * 2**30
        self.assertLessEqual(kept["device_per_rank"], 0.95 * usable)
        self.assertGreater(kept["device_per_rank"], 0.93 * usable)   # the margin is 5%, not more
        self.assertGreater(full["device_per_rank"], 0.97 * usable)
        p = subprocess.run(list(map(str, [PLAN, "--model", self.llama, "--headroom", 80])), capture_output=True,
                           text=True)
        self.assertEqual(p.returncode, 2)
        one_error_line(self, p.stderr, ['--headroom "80" is not a percent from 0 to 50'], self.root / "nothing")

    def test_every_layout_the_plan_recommends_the_trainer_accepts(self):
        """The planner and the trainer agree: for a table of clusters (2 nodes × 2 ranks, emulated per rank through
        SLURMD_NODENAME / SLURM_NODEID / SLURM_LOCALID; host memory chosen so that S = 64K needs SP 2, or SP 4 across
        the nodes), each layout ulysses-plan recommends — the sbatch line of --sp choose (SP 4 across the nodes as
        pure Ulysses with the opt-in, else as Ulysses 2 × a ring of 2), the layout its refusal's hint names — is one
        the trainer's --dry-run accepts on those nodes with the line's model and flags (MODEL_CONFIG, SP, SP_RING,
        ISLAND_SIZE, MEMORY_ARGS, EXTRA_ARGS); and the across-island opt-in the plan prints is one the trainer needs."""
        config = self.root / "tiny-64k.json"
        config.write_text(json.dumps(dict(json.loads(TINY_CONFIG.read_text()), max_position_embeddings=1 << 20)))
        data = self.root / "packed-64k"
        subprocess.run(list(map(str, [PACK, "pack", SAMPLE, "-o", data, "--seq-len", 65536, "--sp", 4, "--pad-id", 258,
                                      "--model-config", config])), check=True, capture_output=True)
        base = [PLAN, "--model", config, "--device", "cpu", "--nodes", 2, "--gpus-per-node", 2, "--seq-len", "64K",
                "--precision", "fp32"]

        def plan(*extra, code=0):
            p = subprocess.run(list(map(str, base + list(extra))), capture_output=True, text=True)
            self.assertEqual(p.returncode, code, p.stdout + p.stderr)
            return p

        def dry_run(line, hint_flags=(), nodes=None):
            """The trainer's --dry-run on the line's nodes × GPUS_PER_NODE emulated ranks with its flags."""
            v = dict(w.split("=", 1) for w in shlex.split(line.split(" bash ")[0]))
            flags = ["--sp", v["SP"], "--sp-ring", v.get("SP_RING", 1), "--precision", v["PRECISION"],
                     "--island-size", v.get("ISLAND_SIZE", 0),
                     *shlex.split(v["MEMORY_ARGS"]), *shlex.split(v.get("EXTRA_ARGS", "")), *hint_flags]
            per_node, cmd = int(v["GPUS_PER_NODE"]), [MPIEXEC]
            for g in range(int(nodes or v["NODES"]) * per_node):
                n, local = divmod(g, per_node)
                cmd += [":"] * (g > 0) + ["-n", 1, "-env", "SLURMD_NODENAME", f"n{n}", "-env", "SLURM_NODEID", n,
                                          "-env", "SLURM_LOCALID", local, TRAIN, "--data", data, "--model-config",
                                          v["MODEL_CONFIG"], "--output", self.root / "dry", "--threads", 1, "--dry-run",
                                          *flags]
            return subprocess.run(list(map(str, cmd)), capture_output=True, text=True, timeout=300)

        def sbatch_line(p):
            return next(line.strip() for line in p.stdout.splitlines() if "bash slurm/train_1m.sbatch" in line)

        accepted = 0
        for host, extra, ring in (("3GiB", [], None), ("2.2GiB", ["--allow-sp-across-islands"], None),
                                  ("2.2GiB", ["--island-size", 4], None), ("2.2GiB", [], "SP=4 SP_RING=2")):
            line = sbatch_line(plan("--host-memory", host, "--sp", "choose", *extra))
            if ring:   # SP 4 across the nodes without the opt-in: Ulysses 2 inside each node × a ring of 2
                self.assertIn(ring, line)
            p = dry_run(line)
            self.assertEqual(p.returncode, 0, f"{line}\n{p.stderr[-3000:]}")
            self.assertIn("dry run: nothing was written", p.stderr + p.stdout)
            accepted += 1
            if "EXTRA_ARGS" in line:   # the opt-in the plan prints is one the trainer needs
                p = dry_run(line.replace('EXTRA_ARGS="--allow-sp-across-islands"', ""))
                self.assertEqual(p.returncode, 2, p.stderr[-3000:])
                self.assertIn("spans NVLink islands", p.stderr)
        # a refusal's hint: the layout (or the flags) it names, run as the trainer would be
        p = plan("--host-memory", "3GiB", "--sp", 1, code=2)
        hint = p.stderr.split("HINT: ")[1].strip()
        line = f"NODES=2 GPUS_PER_NODE=2 SP=1 MODEL_CONFIG={config} PRECISION=fp32 MEMORY_ARGS=\"\" bash slurm/train_1m.sbatch"
        if hint.startswith("use --sp "):
            line = line.replace("SP=1", f"SP={hint.split()[2]}")
            p = dry_run(line)
        else:
            self.assertTrue(hint.startswith("add --"), hint)
            p = dry_run(line, shlex.split(hint[len("add "):]))
        self.assertEqual(p.returncode, 0, f"{hint}\n{p.stderr[-3000:]}")
        self.assertEqual(accepted, 4)

    def test_the_parameters_are_transformers_count(self):
        """--json's "parameters" is what transformers builds for the config (on the meta device: no memory); the text
        plan prints it with three significant digits (the tiny model was "0.00B"). "active_parameters": the same less,
        in each sparse layer of an MoE, the share (E - k) / E of its experts' parameters (a token runs k of them)."""
        import torch
        import transformers
        tied = self.root / "tied.json"
        tied.write_text(json.dumps(dict(LLAMA_8B, tie_word_embeddings=True)))
        moe = self.root / "qwen2-moe.json"   # a dense layer among sparse ones, a shared expert
        moe.write_text(json.dumps(dict(LLAMA_8B, model_type="qwen2_moe", architectures=["Qwen2MoeForCausalLM"],
                                       num_hidden_layers=4, mlp_only_layers=[1], num_experts=16,
                                       num_experts_per_tok=4, moe_intermediate_size=1408,
                                       shared_expert_intermediate_size=5632)))
        counts = {}
        for config in (TINY_CONFIG, self.llama, tied, moe):
            with torch.device("meta"):
                model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.from_pretrained(config))
            want = counts[config] = sum(p.numel() for p in model.parameters())
            idle = 0
            for layer in model.model.layers:
                experts = getattr(layer.mlp, "experts", None)
                if experts is not None:
                    unpicked = len(experts) - model.config.num_experts_per_tok
                    idle += sum(p.numel() for p in experts.parameters()) * unpicked // len(experts)
            p = subprocess.run(list(map(str, [PLAN, "--model", config, "--gpus-per-node", 4, "--sp", 4, "--json"])),
                               capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stderr)
            got = json.loads(p.stdout)
            self.assertEqual((got["parameters"], got["active_parameters"]), (want, want - idle), config)
        self.assertGreater(idle, 0)
        text = subprocess.run(list(map(str, [PLAN, "--model", moe, "--gpus-per-node", 4, "--sp", 4])),
                              capture_output=True, text=True).stdout
        self.assertIn(f"{counts[moe] / 1e9:.2f}B parameters ({(counts[moe] - idle) / 1e9:.2f}B active: 4 of 16 experts)",
                      text)
        text = subprocess.run(list(map(str, [PLAN, "--model", TINY_CONFIG, "--device", "cpu"])), capture_output=True,
                              text=True).stdout
        self.assertIn(f"{counts[TINY_CONFIG] / 1e3:.0f}K parameters", text)   # 133K
        self.assertIn(f"{counts[self.llama] / 1e9:.2f}B parameters", subprocess.run(
            list(map(str, [PLAN, "--model", self.llama, "--gpus-per-node", 8, "--sp", 8])), capture_output=True,
            text=True).stdout)

    def test_bad_flags_are_one_line(self):
        for extra, needle in ((["--sp", 3], "--sp 3"), (["--seq-len", "lots"], "--seq-len"),
                              (["--gpu-memory", "huge"], "--gpu-memory"), (["--profile", "nowhere.json"], "nowhere.json"),
                              (["--sp", "choose"], "--sp choose needs a target"),
                              (["--attention-head-groups", "some"], "--attention-head-groups"),
                              (["--choose-memory-flags"], "--seq-len")):
            p = subprocess.run(list(map(str, [PLAN, "--model", self.llama, *extra])), capture_output=True, text=True)
            self.assertEqual(p.returncode, 2, (extra, p.stderr))
            one_error_line(self, p.stderr, [needle], self.root / "nothing")

    def test_the_trainer_refuses_what_the_plan_says_cannot_fit(self):
        data = self.root / "data"
        src = self.root / "docs.jsonl"
        src.write_text("".join(json.dumps({"input_ids": list(range(1, 600))}) + "\n" for _ in range(4)))
        subprocess.run([PACK, "pack", src, "-o", data, "--seq-len", "512", "--sp", "8", "--vocab-size", "128256"],
                       check=True, capture_output=True)
        args = ["--data", data, "--model-config", self.llama, "--output", self.root / "run", "--sp", 8, "--threads", 1]
        said = {}
        for dry in (["--sp-ring", 2], [], ["--dry-run"]):   # as Ulysses 4 × a ring of 2 too
            p, seconds, mib = timed([MPIEXEC, "-n", 8, TRAIN, *args, *dry])
            self.assertEqual(p.returncode, 2, p.stderr)
            lines = p.stderr.strip().splitlines()
            self.assertEqual(len(lines), 1, p.stderr)
            for needle in ["[rank 0] error: the memory plan at S = 512 needs", "on this node (8 ranks", "HINT"]:
                self.assertIn(needle, lines[0])
            self.assertLess(seconds, 2)
            self.assertLess(mib, 200)   # the largest process: mpiexec's or one rank's
            self.assertFalse((self.root / "run").exists())
            said[tuple(dry)] = lines[0]
        core = pathlib.Path(TRAIN).with_name("ulysses-train-core")   # the trainer, refusing on its own
        for extra in ((), ("--sp-ring", 2)):
            p = subprocess.run(list(map(str, [MPIEXEC, "-n", 8, core, *args, *extra])), capture_output=True, text=True)
            self.assertEqual((p.returncode, p.stderr), (2, said[extra] + "\n"))
        # --ignore-memory-plan: the front passes the run on and the trainer's first rank of the node warns with the
        # same line; the (dry) run goes on
        p = subprocess.run(list(map(str, [MPIEXEC, "-n", 8, TRAIN, *args, "--dry-run", "--ignore-memory-plan"])),
                           capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        warning = [l for l in (p.stdout + p.stderr).splitlines() if "--ignore-memory-plan" in l]
        self.assertEqual(len(warning), 1, p.stdout + p.stderr)
        self.assertIn("warning: running anyway (--ignore-memory-plan): the memory plan at S = 512 needs", warning[0])
        self.assertIn("dry run: nothing was written", p.stdout + p.stderr)

    def test_what_fits_or_is_not_certain_is_the_trainers_to_run(self):
        """The front passes to the trainer what fits, and every 8B run it cannot be sure of or whose earlier checks
        fail: the trainer's own line follows (from ulysses-train-core: LibTorch loaded, ~480 MiB)."""
        tiny = self.root / "tiny.json"
        tiny.write_text(json.dumps(dict(LLAMA_8B, vocab_size=256, hidden_size=64, intermediate_size=128,
                                        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)))
        data = self.pack("data", "256", range(1, 130))
        run = ["--output", self.root / "run", "--threads", 1, "--dry-run"]
        p = self.train([MPIEXEC, "-n", 2, TRAIN, "--data", data, "--model-config", tiny, *run])
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("memory plan at S = 128", p.stdout + p.stderr)
        big = self.pack("big-vocab", "200000", range(150000, 150129))   # ids past the 8B model's 128256
        for env, cmd, needle in (
                ({}, [TRAIN, "--data", data, "--resume", self.root / "nowhere"], "is not a checkpoint"),
                ({"SLURM_NTASKS": "4"}, [TRAIN, "--data", data], "Slurm"),   # a singleton where 4 tasks were asked
                ({}, [TRAIN, "--data", big], "outside the model's vocabulary")):
            p, _, mib = timed(["env", *[f"{k}={v}" for k, v in env.items()], *cmd, "--model-config", self.llama, *run])
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertRegex(p.stderr, r"^\[rank 0\] error: [^\n]+ — HINT: [^\n]+\n$")
            self.assertIn(needle, p.stderr)
            self.assertGreater(mib, 200)   # the trainer said it, not the front

    def test_ranks_that_disagree_end_instead_of_hanging(self):
        """The front's ranks decide alone: should they disagree (here made to, by giving rank 0 a 70B config, refused
        on any host below ~1 TiB, and rank 1 a tiny one), rank 0 refuses before joining MPI and rank 1's trainer
        would wait for it in MPI_Init for ever under Hydra. ULYSSES_INIT_TIMEOUT bounds that wait: rank 1 ends with
        one line saying so."""
        tiny, big = self.root / "tiny2.json", self.root / "llama70b.json"
        tiny.write_text(json.dumps(dict(LLAMA_8B, vocab_size=256, hidden_size=64, intermediate_size=128,
                                        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)))
        big.write_text(json.dumps(dict(LLAMA_8B, hidden_size=8192, intermediate_size=28672, num_hidden_layers=80,
                                       num_attention_heads=64, num_key_value_heads=8)))
        data = self.pack("agree", "256", range(1, 130))
        run = ["--data", data, "--output", self.root / "run", "--threads", 1, "--dry-run"]
        cmd = [MPIEXEC, "-n", 1, TRAIN, "--model-config", big, *run, ":", "-n", 1, TRAIN, "--model-config", tiny, *run]
        started = time.monotonic()
        p = subprocess.run(list(map(str, cmd)), capture_output=True, text=True, timeout=120,
                           env=dict(os.environ, ULYSSES_INIT_TIMEOUT="4"))
        self.assertNotEqual(p.returncode, 0, p.stderr)
        self.assertLess(time.monotonic() - started, 60)
        self.assertIn("[rank 0] error: the memory plan at S = 128 needs", p.stderr)
        self.assertIn("[rank 1] error: MPI_Init did not finish within 4 s", p.stderr)

    def pack(self, name, vocab, ids):
        src = self.root / f"{name}.jsonl"
        src.write_text("".join(json.dumps({"input_ids": list(ids)}) + "\n" for _ in range(4)))
        subprocess.run([PACK, "pack", src, "-o", self.root / name, "--seq-len", "128", "--vocab-size", vocab],
                       check=True, capture_output=True)
        return self.root / name

    @staticmethod
    def train(cmd):
        return subprocess.run(list(map(str, cmd)), capture_output=True, text=True)


if __name__ == "__main__":
    unittest.main()
