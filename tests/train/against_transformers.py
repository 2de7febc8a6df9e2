"""What the tests that train against transformers + torch AdamW share (test_moe.py, test_rope.py): the seeded model
folder both sides start from, the AdamW the trainer sets up, and a test case running the trainer on the packed
THREE_DOCUMENTS with the reference's optimizer settings and comparing losses step by step.

  class Kind(TrainsAgainstTransformers):
      PACK, TRAIN, MPIEXEC = pack, train, mpiexec
      def test_x(self):
          folder = hf_folder(self.shared, "x", config)
          self.train(4, folder, self.root / "x")                       # mpiexec -n 4 ulysses-train --sp 4 …
          self.assert_close(got, want, 1e-5, "SP 4 against SP 1")
"""
import json
import subprocess

import torch
import transformers

from cli_checks import PackedDocuments

STEPS, LR, WD, CLIP = 3, 2e-3, 0.1, 1.0   # what both sides train with: no warm-up, a constant lr


def hf_folder(root, name, config, seed=7):
    """A transformers model of `config`, seeded, saved in fp32 (what both sides start from)."""
    folder = root / name
    if not folder.exists():
        torch.manual_seed(seed)
        model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**config))
        model.float().save_pretrained(folder, safe_serialization=True)
    return folder


def trainer_adamw(model):
    """torch AdamW as the trainer sets it up: weight decay on parameters of two or more dimensions that are not
    biases, betas (0.9, 0.95), eps 1e-8."""
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and not n.endswith(".bias")]
    rest = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and not n.endswith(".bias"))]
    return torch.optim.AdamW([{"params": decay, "weight_decay": WD}, {"params": rest, "weight_decay": 0.0}], lr=LR,
                             betas=(0.9, 0.95), eps=1e-8)


def metrics(out, key="loss"):
    """Each step's `key` in OUT/metrics.jsonl."""
    return [json.loads(line)[key] for line in (out / "metrics.jsonl").read_text().splitlines()]


class TrainsAgainstTransformers(PackedDocuments):
    TRAIN = MPIEXEC = None

    def train(self, ranks, folder, out, *flags, code=0, sp=None, steps=STEPS):
        """ulysses-train from the HF folder on the packed documents (SP = ranks unless given); its exit must be code."""
        cmd = [self.MPIEXEC, "-n", ranks, self.TRAIN, "--data", self.data, "--init-from", folder, "--output", out,
               "--threads", 1, "--sp", sp or ranks, "--warmup", 0, "--lr-decay", "constant", "--weight-decay", WD,
               "--clip", CLIP, "--lr", LR, "--steps", steps, *flags]
        p = subprocess.run(list(map(str, cmd)), capture_output=True, text=True, timeout=600)
        self.assertEqual(p.returncode, code, p.stderr[-3000:])
        return p

    def assert_close(self, got, want, tolerance, what):
        """got and want step by step within `tolerance`, relative."""
        self.assertEqual(len(got), len(want), what)
        for step, (g, w) in enumerate(zip(got, want), 1):
            self.assertLess(abs(g - w), tolerance * abs(w), f"{what}, step {step}: {g} vs {w}")
