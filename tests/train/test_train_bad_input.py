"""ulysses-train's bad inputs, each one line and exit 2 before anything is built: data that does not split over
--sp or holds ids past the vocabulary, a world --sp does not divide (the hint names the degrees the model allows),
head groups the heads refuse, a missing --data or weights, a step with no target token, mistyped flags, numbers out of
their flag's range (NaN, an overflowing count), and a --config file whose keys, sections or values are wrong
(file:line, the key, what its flag takes and what was found; an unclosed string or a bare word is not TOML).

usage: test_train_bad_input.py ULYSSES_TRAIN ULYSSES_PACK MPIEXEC
"""
import functools
import json
import os
import pathlib
import subprocess
import sys
import unittest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))   # tests/: the shared CLI checks
from cli_checks import SAMPLE, TINY_CONFIG as CONFIG, PackedSample, train_command  # noqa: E402

TRAIN, PACK, MPIEXEC = sys.argv[1:4]
del sys.argv[1:4]
train_cmd = functools.partial(train_command, TRAIN, MPIEXEC)


class BadInput(PackedSample):
    PACK = PACK

    def expect_bad(self, cmd, *needles, env=None):
        p = self.run_ok(cmd, code=2, env=env)
        for n in needles:
            self.assertIn(str(n), p.stderr)

    def test_bad_inputs(self):
        out = self.root / "bad"
        odd = self.root / "odd"
        subprocess.run(list(map(str, [PACK, "pack", SAMPLE, "-o", odd, "--seq-len", 130, "--align", 1,
                                      "--vocab-size", 300])), check=True, capture_output=True)
        self.expect_bad(train_cmd(4, odd, out, "--sp", 4, "--dry-run"), "130", "--sp 4")
        # the hint offers only the degrees the model's heads (4), the 4 ranks and S = 130 allow: 1 and 2
        self.expect_bad(train_cmd(4, odd, out, "--sp", 4, "--dry-run"), "use --sp 1, 2 (what the model's heads")
        vocab = self.root / "vocab"
        subprocess.run(list(map(str, [PACK, "pack", SAMPLE, "-o", vocab, "--seq-len", 256, "--vocab-size", 300])),
                       check=True, capture_output=True)
        self.run_ok(train_cmd(1, vocab, out, "--dry-run"))   # a tokenizer of 300 ids fits a model of 320
        small = self.root / "vocab200.json"
        small.write_text(json.dumps(dict(json.loads(pathlib.Path(CONFIG).read_text()), vocab_size=200, pad_token_id=0)))
        cmd = train_cmd(1, vocab, out, "--dry-run")
        cmd[cmd.index("--model-config") + 1] = small
        self.expect_bad(cmd, "is outside the model's vocabulary of 200")
        self.expect_bad(train_cmd(3, self.data, out, "--sp", 3, "--dry-run"), "(4)", "(3)")
        # 3 ranks and --sp 2: the degrees the model's 4 heads and 3 ranks allow, not the divisors of 3
        self.expect_bad(train_cmd(3, self.data, out, "--sp", 2, "--dry-run"),
                        "world size (3) is not divisible by --sp (2)",
                        "use --sp 1 (what the model's heads and 3 ranks allow)")
        self.expect_bad(train_cmd(2, self.data, out, "--sp", 2, "--world", 4, "--dry-run"), "2 ranks", "4")
        self.expect_bad(train_cmd(2, self.data, out, "--sp", 2, "--attention-head-groups", 3, "--dry-run"),
                        "--attention-head-groups 3", "use --attention-head-groups 1, 2 at --sp 2")
        # --profile is --memory-profile (ulysses-plan's name for it)
        self.expect_bad(train_cmd(1, self.data, out, "--profile", self.root / "nowhere.json", "--dry-run"),
                        "nowhere.json")
        self.expect_bad(train_cmd(1, self.data, out, "--fp32-residual", "--dry-run"), "--fp32-residual",
                        "--precision bf16")
        self.expect_bad(train_cmd(1, self.data, out, "--save-evry", 1), "--save-evry is not a flag of ulysses-train",
                        "did you mean --save-every?")
        env = dict(os.environ, SLURM_NTASKS="4")
        self.expect_bad(train_cmd(1, self.data, out, "--dry-run"), "SLURM_NTASKS=4", env=env)
        cmd = train_cmd(1, self.data, out, "--dry-run")
        cmd[cmd.index("--model-config") + 1] = self.root / "nope.json"
        self.expect_bad(cmd, "nope.json")
        # a step whose loss mask is 0 everywhere is refused, not stepped on: two sequences of one document each, one
        # masked out entirely, 2 steps of one sequence: one of them has no target token
        sft = self.root / "sft.jsonl"
        sft.write_text("".join(json.dumps({"input_ids": [(7 * i + j) % 300 for j in range(256)],
                                           "loss_mask": [i] * 256}) + "\n" for i in (0, 1)))
        subprocess.run(list(map(str, [PACK, "pack", sft, "--loss-mask-key", "loss_mask", "-o", self.root / "sft",
                                      "--seq-len", 256, "--vocab-size", 300])), check=True, capture_output=True)
        p = self.run_ok(train_cmd(1, self.root / "sft", self.root / "sft-run", "--steps", 2), code=2)
        self.assertRegex(p.stderr.strip().splitlines()[-1], r"step [12]: none of its 1 sequences .* holds a target")
        # --data must be a folder ulysses-pack wrote: one line that says so and how to make one
        (self.root / "empty").mkdir()
        for data, needle in ((self.root / "packed-nope", "does not exist"), (SAMPLE, "is a file, not a packed"),
                             (self.root / "empty", "manifest.json is missing")):
            self.expect_bad(train_cmd(1, data, out, "--dry-run"), needle, "ulysses-pack pack")
        # --init-from a folder of config.json alone (an 8B shape, far past this machine): the missing weights first,
        # from the torch-free front as from the trainer
        weightless = self.root / "weightless"
        weightless.mkdir()
        (weightless / "config.json").write_text(json.dumps(dict(json.loads(pathlib.Path(CONFIG).read_text()),
                                                                hidden_size=4096, intermediate_size=14336,
                                                                num_hidden_layers=32)))
        cmd = train_cmd(1, self.data, out, "--init-from", weightless, "--dry-run")
        del cmd[cmd.index("--model-config"):cmd.index("--model-config") + 2]
        self.expect_bad(cmd, "holds neither model.safetensors")
        broken = self.root / "broken"
        subprocess.run(["cp", "-r", self.data, broken], check=True)
        (broken / "shard-00000.h5").unlink()
        self.expect_bad(train_cmd(1, broken, out, "--dry-run"), "shard-00000.h5")
        self.expect_bad(train_cmd(2, self.data, out, "--device", "cpu", "--comm", "nccl", "--dry-run"),
                        "--comm nccl needs a CUDA device", "HINT")
        if not pathlib.Path("/dev/nvidiactl").exists():   # no GPU here: asking for one is a bad input
            self.expect_bad(train_cmd(1, self.data, out, "--device", "cuda", "--dry-run"), "--device cuda", "HINT")


    def test_config_keys_are_strict_and_underscores_are_dashes(self):
        """An unknown key or a [section] in --config is one error line (file:line, the key, the nearest known key);
        save_every = 5, as trainer_state.json writes it, is --save-every 5."""
        head = f'data = "{self.data}"\nmodel-config = "{CONFIG}"\noutput = "{self.root / "strict"}"\n'
        for body, needles in (("stpes = 5\n", [":4: unknown key \"stpes\"", "did you mean \"steps\""]),
                              ("learning_rate = 3e-4\n", [":4: unknown key \"learning_rate\"", "\"lr\""]),
                              ("[optimizer]\nlr = 3e-4\n", [":4: section [optimizer]", "keys are top-level"]),
                              ("dry-run = true\n", [":4: \"dry-run\" is a command-line flag only"])):
            path = self.root / "strict.toml"
            path.write_text(head + body)
            p = self.run_ok([TRAIN, "--config", path, "--print-config"], code=2)
            lines = p.stderr.strip().splitlines()
            self.assertEqual(len(lines), 1, p.stderr)
            for n in [str(path), *needles]:
                self.assertIn(n, lines[0])
        path.write_text(head + "save_every = 5\nsteps = 6\nthreads = 1\nlr = 3e-3\n")
        self.run_ok([TRAIN, "--config", path])
        self.assertTrue((self.root / "strict" / "checkpoints" / "step-0000005").is_dir())

    def test_config_values_of_the_wrong_type(self):
        """No TOML value is coerced: each wrong one is a line naming file:line, the key, what its flag takes and what
        was found; a value the flag's own check refuses keeps file:line too, and a key written twice is refused."""
        head = f'data = "{self.data}"\nmodel-config = "{CONFIG}"\noutput = "{self.root / "typed"}"\n'
        path = self.root / "typed.toml"
        for body, needle in (("steps = 10.5", ':4: key "steps" takes an integer (--steps), found the number 10.5'),
                             ("sp = 2.0", ':4: key "sp" takes an integer (--sp), found the number 2.0'),
                             ('steps = "10"', 'found the string "10" (write it without quotes)'),
                             ("save_every = [5]", ':4: key "save_every" takes an integer (--save-every), found the '
                                                  'array [5]'),
                             ('lr = "3e-4"', 'key "lr" takes a number (--lr), found the string "3e-4"'),
                             ("tiled_mlp = 1", 'key "tiled_mlp" takes a boolean (--tiled-mlp), found 1'),
                             ("sp = true", "found the boolean true"),
                             ('precision = "fp16"',
                              ':4: key "precision" = "fp16": fp16 not in {auto,fp32,bf16,amp-bf16}'),
                             ("save_every = -3", ':4: key "save_every" = -3: "-3" is not N ≥ 0 or -1'),
                             ("steps = 3\nsteps = 4", ':5: key "steps" sets --steps again (line 4 set it)'),
                             ('tensorboard = "events', ':4: key "tensorboard" (--tensorboard): found an unclosed '
                                                       'string "events'),
                             ("lr_decay = cosine", ':4: key "lr_decay" (--lr-decay): found the bare word cosine '
                                                   '(TOML strings are quoted: "cosine")'),
                             ("lr = nan", ':4: key "lr" = nan: "nan" is not a finite number ≥ 0'),
                             ("steps = -2", ':4: key "steps" = -2: "-2" is not a whole number from 1 to')):
            path.write_text(head + body + "\n")
            p = self.run_ok([TRAIN, "--config", path, "--print-config"], code=2)
            lines = p.stderr.strip().splitlines()
            self.assertEqual(len(lines), 1, p.stderr)
            self.assertIn(str(path) + needle if needle.startswith(":") else needle, lines[0])
        path.write_text(head + 'steps = 7\nlr = 3e-3\nclip = 1\nattention-head-groups = "auto"\ntiled-mlp = true\n'
                               'save_every = -1  # never\nlr_decay = \'linear\'\n')
        self.assertIn("steps=7", self.run_ok([TRAIN, "--config", path, "--print-config"]).stdout.replace(" ", ""))

    def test_print_config_reads_back_unchanged(self):
        """--print-config's file, given back to --config, is the same configuration: every flag whose value is auto
        (head groups, precision, sharding, prefetch, device, comm) and the RoPE override's JSON included. (It once wrote
        attention-head-groups auto as 0, which --config then refused.) lora-targets prints as "q_proj,v_proj" by
        default and as an array once read: the same list."""
        import tomllib

        def resolved(text):
            values = tomllib.loads(text)
            targets = values["lora-targets"]
            values["lora-targets"] = targets.split(",") if isinstance(targets, str) else targets
            return values

        first = self.run_ok([TRAIN, "--data", self.data, "--model-config", CONFIG, "--output", self.root / "cfg",
                             "--attention-head-groups", "auto", "--precision", "auto", "--sharding", "auto",
                             "--rope-scaling", '{"rope_type": "yarn", "factor": 4.0}', "--rope-theta", 1e6,
                             "--print-config"]).stdout
        self.assertIn('attention-head-groups="auto"', first.replace(" ", ""))
        path = self.root / "printed.toml"
        path.write_text(first)
        again = self.run_ok([TRAIN, "--config", path, "--print-config"]).stdout
        self.assertEqual(resolved(again), resolved(first))
        self.assertEqual(resolved(first)["rope-scaling"], '{"rope_type": "yarn", "factor": 4.0}')

    def test_lora_flags_without_a_rank_are_refused(self):
        """--lora-alpha, --lora-targets or --lora-rslora beside --lora-rank 0 once ran a full fine-tune, exit 0: one
        line naming them and what rank 0 means, exit 2, from the command line and from --config."""
        base = [TRAIN, "--data", self.data, "--model-config", CONFIG, "--output", self.root / "nolora", "--dry-run"]
        for extra in (["--lora-alpha", 16], ["--lora-targets", "q_proj,k_proj", "--lora-rslora"]):
            p = self.run_ok(base + extra, code=2)
            lines = p.stderr.strip().splitlines()
            self.assertEqual(len(lines), 1, p.stderr)
            self.assertIn(f"{extra[0]} ", lines[0])
            self.assertIn("given with --lora-rank 0, which means a full fine-tune", lines[0])
        path = self.root / "nolora.toml"
        path.write_text('lora-alpha = 32\n')
        p = self.run_ok(base + ["--config", path], code=2)
        self.assertIn("--lora-alpha 32 given with --lora-rank 0", p.stderr)

    def test_numbers_out_of_range_are_refused_before_anything_runs(self):
        """A count that would overflow, a NaN, an infinity or a number outside its flag's range: one line naming the
        flag and the value, exit 2 (CLI11 alone saturated --steps at INT64_MAX and let NaN through)."""
        for flag, value, needle in (("--steps", "99999999999999999999", "is not a whole number from 1 to"),
                                    ("--steps", "0", "is not a whole number from 1 to"),
                                    ("--lr", "inf", "is not a finite number ≥ 0"),
                                    ("--eps", "0", "is not a finite number > 0"),
                                    ("--lr", "-1", "is not a finite number ≥ 0"),
                                    ("--clip", "-1", "is not a finite number ≥ 0"),
                                    ("--micro-batch", "0", "is not a whole number from 1 to"),
                                    ("--beta2", "1", "is not a finite number from 0 to 1 (1 excluded)"),
                                    ("--min-lr-ratio", "nan", "is not a finite number from 0 to 1")):
            p = self.run_ok([TRAIN, flag, value, "--print-config"], code=2)
            lines = p.stderr.strip().splitlines()
            self.assertEqual(len(lines), 1, p.stderr)
            self.assertIn(flag, lines[0])
            self.assertIn(f'"{value}" {needle}', lines[0])


if __name__ == "__main__":
    unittest.main(verbosity=2)
