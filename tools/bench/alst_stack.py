"""ALST's own memory stack on transformers' Llama, for the benchmarks' side B (memory_bench.py on CPU and GPU):
TiledMLP and TiledFusedLogitsLoss from the deepspeed package (deepspeed.runtime.sequence_parallel.ulysses_sp), wired
as their docstrings show. Imported only by the torch workers (memory_bench_worker.py, gpu_bench_workers.py).

  patch_tiled_mlp(autocast)                every LlamaMLP runs over ceil(S / hidden) token tiles (ALST's default);
                                           call it before the model is built
  tiled_loss_sum(model, hidden, labels, chunk, autocast)
                                           the head + cross-entropy over ceil(S / chunk) token chunks, summed
                                           (labels already shifted; -100 ignored): never the whole [S, vocab] logits

autocast: None, or the dtype of the torch.autocast the step runs under (the GPU harness: bf16 over fp32 weights).
ALST's functions recompute in backward, which autograd runs outside the caller's autocast: given a dtype, the
recomputed functions enter it themselves, so that they compute in bf16 as under ALST's bf16 weights rather than in
fp32.
"""
import functools
import math

import torch


def within(autocast, fn):
    """fn run under torch.autocast(autocast) on its first tensor argument's device (autocast None: fn itself)."""
    if autocast is None:
        return fn

    def run(self, x, *rest):
        with torch.autocast(device_type=x.device.type, dtype=autocast):
            return fn(self, x, *rest)
    return run


def patch_tiled_mlp(autocast=None):
    from deepspeed.runtime.sequence_parallel.ulysses_sp import TiledMLP
    from transformers.models.llama import modeling_llama

    @functools.partial(within, autocast)
    def mlp_forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))

    def tiled_mlp_forward(self, x):   # x: [batch, S, hidden]
        shards = math.ceil(x.shape[-2] / x.shape[-1])
        return TiledMLP.apply(mlp_forward, self, x, shards,
                              [self.down_proj.weight, self.gate_proj.weight, self.up_proj.weight])

    modeling_llama.LlamaMLP.forward = tiled_mlp_forward


def tiled_loss_sum(model, hidden, labels, chunk, autocast=None):
    """hidden: [batch, S, hidden] from model.model; labels: [batch, S], shifted; chunk: tokens per shard."""
    from deepspeed.runtime.sequence_parallel.ulysses_sp import TiledFusedLogitsLoss

    vocab = model.config.vocab_size

    @functools.partial(within, autocast)
    def loss_fn(self, x, y):
        logits = self.lm_head(x).float()
        return torch.nn.functional.cross_entropy(logits.view(-1, vocab), y.view(-1), reduction="sum")

    shards = math.ceil(hidden.shape[-2] / chunk)
    return TiledFusedLogitsLoss.apply(loss_fn, model, hidden, labels, None, shards, [model.lm_head.weight], "sum")
