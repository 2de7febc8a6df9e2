"""RoPE kinds and context extension (--rope-scaling, --rope-theta) trained end to end against transformers + torch AdamW.

One packed sequence of three documents of 100, 80 and 50 tokens, longer than the original context (64) of the scaled
models, so that the scaling matters (and, for longrope, the 50-token document takes the short factors and the others
the long ones). 3 steps at lr 2e-3, fp32, weight decay on the matrices, clipping at 1; the reference runs each document
as its own forward (what the packed sequence's attention and positions reproduce):

  - a Qwen3 whose config.json holds YaRN ×4 over 64, and a Llama with longrope over a top-level original context of
    64: the losses of every step at SP = 1 and SP = 4 within 1e-4 of transformers' (relative), SP = 4 within 1e-5 of
    SP = 1;
  - the default-RoPE Llama trained with --rope-scaling (YaRN, DeepSeek's mscale) and --rope-theta: equal to
    transformers loading the same checkpoint with that rope_scaling and rope_theta; its checkpoint's config.json and
    its export's carry them, and transformers on the export computes the reference's logits after the steps (1e-4);
    --resume keeps them (no flags repeated), and other flags on resume are one line, exit 2;
  - every memory feature on (two head groups, checkpointing, tiled MLP and logits, sharded states with the parameters
    and every layer input offloaded, prefetch) at SP = 2 (4 heads make no 2 groups at SP 4), and the ring (SP 4 = Ulysses 2 × ring 2), with the scaled RoPE: SP = 1's losses to 1e-5.

usage: test_rope.py ULYSSES_TRAIN ULYSSES_PACK ULYSSES_CKPT MPIEXEC
"""
import json
import pathlib
import subprocess
import sys
import unittest

import torch
import transformers

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))   # tests/: the shared CLI checks
from cli_checks import THREE_DOCUMENTS, TINY_CONFIG  # noqa: E402
from against_transformers import CLIP, STEPS, TrainsAgainstTransformers, hf_folder, metrics, trainer_adamw  # noqa: E402

TRAIN, PACK, CKPT, MPIEXEC = sys.argv[1:5]
del sys.argv[1:5]
torch.set_num_threads(1)
transformers.logging.set_verbosity_error()
BASE = dict(json.loads(TINY_CONFIG.read_text()), max_position_embeddings=256)
QWEN3_YARN = dict(BASE, model_type="qwen3", architectures=["Qwen3ForCausalLM"], use_sliding_window=False,
                  rope_theta=1e6, rope_scaling={"rope_type": "yarn", "factor": 4.0,
                                                "original_max_position_embeddings": 64})
LLAMA_LONGROPE = dict(BASE, original_max_position_embeddings=64,
                      rope_scaling={"rope_type": "longrope", "short_factor": [1.0 + i / 8 for i in range(8)],
                                    "long_factor": [1.0 + i for i in range(8)]})
EXTENSION = {"rope_type": "yarn", "factor": 8.0, "mscale": 0.707, "mscale_all_dim": 1.0,
             "original_max_position_embeddings": 32}
EXTENSION_THETA = 40000.0
DOCS = THREE_DOCUMENTS   # one sequence of 256


def documents_loss(model):
    """The mean next-token loss over DOCS, each document its own forward."""
    total, count = 0.0, 0
    for doc in DOCS:
        ids = torch.tensor([doc])
        total = total + torch.nn.functional.cross_entropy(model(input_ids=ids).logits[0, :-1], ids[0, 1:],
                                                          reduction="sum")
        count += len(doc) - 1
    return total / count


def reference(folder, steps=STEPS, **config_changes):
    """transformers' model from `folder` (its config changed by `config_changes`), trained STEPS steps by AdamW as the
    trainer sets it up: (losses, the trained model)."""
    config = transformers.AutoConfig.from_pretrained(folder, **config_changes)
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, config=config, torch_dtype=torch.float32,
                                                              attn_implementation="eager")
    opt = trainer_adamw(model)
    losses = []
    for _ in range(steps):
        loss = documents_loss(model)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(model.parameters()), CLIP)
        opt.step()
        losses.append(loss.item())
    return losses, model


class Rope(TrainsAgainstTransformers):
    PACK, TRAIN, MPIEXEC = PACK, TRAIN, MPIEXEC

    def check_kind(self, name, config):
        folder = hf_folder(self.shared, name, config)
        want, _ = reference(folder)
        plain = self.root / f"{name}-1"
        self.train(1, folder, plain)
        self.assert_close(metrics(plain), want, 1e-4, f"{name} SP 1 against transformers")
        self.train(4, folder, self.root / f"{name}-4")
        self.assert_close(metrics(self.root / f"{name}-4"), metrics(plain), 1e-5, f"{name} SP 4 against SP 1")

    def test_qwen3_with_yarn(self):
        self.check_kind("qwen3-yarn", QWEN3_YARN)

    def test_llama_with_longrope(self):
        self.check_kind("llama-longrope", LLAMA_LONGROPE)

    def test_context_extension_flags(self):
        folder = hf_folder(self.shared, "llama", BASE)
        flags = ["--rope-scaling", json.dumps(EXTENSION), "--rope-theta", EXTENSION_THETA]
        want, trained = reference(folder, rope_scaling=EXTENSION, rope_theta=EXTENSION_THETA)
        out = self.root / "extended"
        self.train(1, folder, out, *flags)
        self.assert_close(metrics(out), want, 1e-4, "--rope-scaling yarn against transformers with it")
        final = out / f"checkpoints/step-{STEPS:07d}"
        stored = json.loads((final / "config.json").read_text())
        self.assertEqual((stored["rope_scaling"], stored["rope_theta"]), (EXTENSION, EXTENSION_THETA))
        export = self.root / "export"
        subprocess.run([CKPT, "export-hf", str(final), "-o", str(export), "--dtype", "fp32"], check=True,
                       capture_output=True)
        exported = json.loads((export / "config.json").read_text())
        self.assertEqual((exported["rope_scaling"], exported["rope_theta"]), (EXTENSION, EXTENSION_THETA))
        loaded = transformers.AutoModelForCausalLM.from_pretrained(export, torch_dtype=torch.float32,
                                                                   attn_implementation="eager")
        with torch.no_grad():
            ids = torch.tensor([DOCS[0]])
            ours, theirs = loaded(input_ids=ids).logits, trained(input_ids=ids).logits
        self.assertLess(((ours - theirs).norm() / theirs.norm()).item(), 1e-4)

        # --resume keeps the checkpoint's RoPE without the flags: its next step is the reference's fourth
        want4, _ = reference(folder, steps=STEPS + 1, rope_scaling=EXTENSION, rope_theta=EXTENSION_THETA)
        self.train(1, folder, out, "--resume", "auto", steps=STEPS + 1)
        self.assert_close(metrics(out)[-1:], want4[-1:], 1e-4, "the resumed step against transformers")
        resumed = json.loads((out / f"checkpoints/step-{STEPS + 1:07d}/config.json").read_text())
        self.assertEqual((resumed["rope_scaling"], resumed["rope_theta"]), (EXTENSION, EXTENSION_THETA))
        other = self.train(1, folder, out, "--resume", "auto", "--rope-theta", 10000.0, steps=STEPS + 2, code=2)
        lines = [line for line in other.stderr.splitlines() if "error" in line]
        self.assertEqual(len(lines), 1, other.stderr)
        self.assertIn("--rope-theta 10000", lines[0])
        self.assertIn("trained with rope_theta 40000", lines[0])

    def test_memory_features_and_ring_with_scaled_rope(self):
        folder = hf_folder(self.shared, "qwen3-yarn", QWEN3_YARN)
        plain = self.root / "plain"
        self.train(1, folder, plain)
        features = ["--attention-head-groups", 2, "--activation-checkpointing", "--mlp-tile-tokens", 48,
                    "--logits-chunk-tokens", 40, "--sharding", "full_shard", "--offload-params",
                    "--offload-checkpoints", -1, "--prefetch", "on"]
        for what, ranks, extra in (("every memory feature", 2, features), ("ring", 4, ["--sp-ring", 2])):
            with self.subTest(what):
                out = self.root / what.replace(" ", "-")
                self.train(ranks, folder, out, *extra)
                self.assert_close(metrics(out), metrics(plain), 1e-5, f"{what} against SP 1")


if __name__ == "__main__":
    unittest.main()
