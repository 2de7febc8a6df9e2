"""The trainer's optimizer path against the outside references, over 12 steps with gradients whose norm is
sometimes above the clip threshold and sometimes below (tests/train/optimizer_steps.cpp runs ours):

  - AdamW (no clipping) equals torch.optim.AdamW(foreach=True) bit for bit: parameters and both moments,
    with no weight decay on 1-d parameters (norm weights, biases), as the trainer sets it up.
  - The schedule equals transformers' get_cosine_with_min_lr_schedule_with_warmup, get_linear_schedule_with_
    warmup and get_constant_schedule_with_warmup at every step s (ours counts steps from 1). After warmup, step s
    uses their factor at s - 1, the one their scheduler applies to the s-th optimizer step, so without warmup the
    first step runs at the peak, as theirs; during warmup step s uses their factor at s, since their first step
    would run at factor(0) = 0. ≤ 1e-15.
  - Clipping + AdamW equal torch.nn.utils.clip_grad_norm_ + AdamW within 1e-6 relative (we sum the norms
    in float64, torch in float32: the coefficient may differ in its last bits), and the reported norms too.

usage: test_optimizer_vs_torch.py OPTIMIZER_STEPS
"""
import pathlib
import subprocess
import sys
import unittest

import torch
from safetensors.torch import load_file, save_file
from transformers import optimization as hf

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))   # tests/: the shared CLI checks
from cli_checks import TempDirCase  # noqa: E402

BINARY = sys.argv.pop(1)
STEPS, PEAK, BETAS, EPS, WD = 12, 3e-3, (0.9, 0.95), 1e-8, 0.1


def problem():
    """Parameters (a matrix, a norm weight, a bias) and 12 steps of gradients of varied size."""
    g = torch.Generator().manual_seed(0)
    params = {"layer.weight": torch.randn(16, 8, generator=g) * 0.05, "norm.weight": 1 + torch.randn(8, generator=g) * 0.1,
              "proj.bias": torch.randn(8, generator=g) * 0.01}
    scales = [0.05, 2.0, 0.1, 0.8, 3.0, 0.02, 0.5, 1.5, 0.01, 4.0, 0.3, 0.07]   # total norms on both sides of 1
    grads = {s: {n: torch.randn(p.shape, generator=g) * scales[s - 1] for n, p in params.items()}
             for s in range(1, STEPS + 1)}
    return params, grads


def ours(tmp, decay, warmup, min_ratio, clip):
    params, grads = problem()
    tensors = {f"param.{n}": p for n, p in params.items()}
    tensors.update({f"grad.{s}.{n}": t for s, gs in grads.items() for n, t in gs.items()})
    src, dst = tmp / "in.safetensors", tmp / f"out-{decay}-{warmup}-{min_ratio}-{clip}.safetensors"
    save_file(tensors, str(src))
    subprocess.run(list(map(str, [BINARY, src, dst, STEPS, PEAK, min_ratio, warmup, decay, clip, *BETAS, EPS, WD])),
                   check=True)
    return load_file(str(dst))


def torchs(lrs, clip):
    """torch's AdamW (+ clip_grad_norm_) run at the learning rates given, as HF Trainer sets it up."""
    params, grads = problem()
    ps = {n: p.clone().requires_grad_(True) for n, p in params.items()}
    decay = [p for p in ps.values() if p.dim() >= 2]
    no_decay = [p for p in ps.values() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=PEAK, betas=BETAS, eps=EPS, foreach=True)
    norms = []
    for s in range(1, STEPS + 1):
        for n, p in ps.items():
            p.grad = grads[s][n].clone()
        if clip > 0:
            norms.append(float(torch.nn.utils.clip_grad_norm_(list(ps.values()), clip, foreach=True)))
        for group in opt.param_groups:
            group["lr"] = float(lrs[s - 1])
        opt.step()
    state = {n: opt.state[p] for n, p in ps.items()}
    return ({n: p.detach() for n, p in ps.items()}, {n: s["exp_avg"] for n, s in state.items()},
            {n: s["exp_avg_sq"] for n, s in state.items()}, norms)


def hf_factors(decay, warmup, min_ratio):
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=PEAK)
    if decay == "cosine":
        sched = hf.get_cosine_with_min_lr_schedule_with_warmup(opt, warmup, STEPS, min_lr_rate=min_ratio)
    elif decay == "linear":
        sched = hf.get_linear_schedule_with_warmup(opt, warmup, STEPS)
    else:
        sched = hf.get_constant_schedule_with_warmup(opt, warmup)
    return [f(s if s <= warmup else s - 1) for s in range(1, STEPS + 1) for f in sched.lr_lambdas]


def rel(a, b):
    return float((a.double() - b.double()).norm() / b.double().norm())


class Optimizer(TempDirCase):
    def test_adamw_is_torchs_bit_for_bit(self):
        out = ours(self.root, "cosine", 3, 0.1, 0.0)
        params, m, v, _ = torchs(out["lr"], 0.0)
        for n in params:
            self.assertTrue(torch.equal(out[f"param.{n}"], params[n]), n)
            self.assertTrue(torch.equal(out[f"exp_avg.{n}"], m[n]), n)
            self.assertTrue(torch.equal(out[f"exp_avg_sq.{n}"], v[n]), n)
        self.assertFalse(torch.equal(out["param.layer.weight"], problem()[0]["layer.weight"]), "nothing moved")

    def test_schedules_are_transformers(self):
        for decay, warmup, min_ratio in (("cosine", 3, 0.1), ("cosine", 0, 0.0), ("linear", 2, 0.0), ("constant", 4, 0.0)):
            out = ours(self.root, decay, warmup, min_ratio, 0.0)
            want = [PEAK * f for f in hf_factors(decay, warmup, min_ratio)]
            self.assertEqual((len(out["lr"]), len(want)), (STEPS, STEPS))
            for s, (got, w) in enumerate(zip(out["lr"].tolist(), want), 1):
                self.assertLessEqual(abs(got - w), 1e-15 * PEAK, f"{decay} warmup {warmup} step {s}: {got} vs {w}")

    def test_clipping_and_adamw_match_torch(self):
        out = ours(self.root, "linear", 2, 0.0, 1.0)
        params, m, v, norms = torchs(out["lr"], 1.0)
        self.assertEqual((len(out["grad_norm"]), len(norms)), (STEPS, STEPS))
        clipped = sum(n > 1.0 for n in norms)
        self.assertTrue(0 < clipped < STEPS, f"the clip must act on some steps only: norms {norms}")
        for s, (got, want) in enumerate(zip(out["grad_norm"].tolist(), norms), 1):
            self.assertLessEqual(abs(got - want), 1e-6 * want, f"step {s} grad norm")
        for n in params:
            for what, got, want in (("param", out[f"param.{n}"], params[n]), ("exp_avg", out[f"exp_avg.{n}"], m[n]),
                                    ("exp_avg_sq", out[f"exp_avg_sq.{n}"], v[n])):
                self.assertLessEqual(rel(got, want), 1e-6, f"{what} {n}")


if __name__ == "__main__":
    unittest.main(verbosity=2)
