"""Mixtures of experts (Mixtral, Qwen2-MoE, Qwen3-MoE) trained end to end against transformers + torch AdamW.

One packed sequence of three documents (100, 80 and 50 tokens, then 26 of padding), 3 steps at lr 2e-3, fp32, weight
decay on the matrices, clipping at 1. The reference runs each document as its own forward and forms the
load-balancing loss with transformers' load_balancing_loss_func over every document's router logits together (the
padding is no document: it is excluded, as the trainer excludes it). The families:

  - Mixtral: 4 experts, top-2 renormalised, the router loss off (its aux_loss still reported);
  - Qwen2-MoE: top-3 of 6 unnormalised, a shared expert with its sigmoid gate, the router loss on (coef 0.05);
  - Qwen3-MoE: a dense first layer among sparse ones (mlp_only_layers), top-3 of 6 renormalised, the router loss on.

For each: the CE losses of every step at SP = 1 within 1e-4 of transformers' (relative), SP = 4 within 1e-5 of SP = 1,
and aux_loss within 1e-4 of load_balancing_loss_func. Then, on Qwen2-MoE: --router-aux-loss-coef 0 trains
transformers' CE alone; every memory feature on (sharded states, the optimizer and every layer input offloaded,
TiledMLP over the routed MLP, tiled logits, prefetch) at SP = 4, and SP = 2 × DP = 2 (against SP = 1 with grad-accum
2: the same forwards), give SP = 1's losses to 1e-5; the export after training computes the reference's logits, and
import → export is bit-exact. LoRA on the attention projections trains adapters there only, and MLP targets (whose
experts PEFT would adapt) are one line, exit 2; ulysses-ckpt inspect shows the active parameters and each run of
layers' MLP, dense or routed.

usage: test_moe.py ULYSSES_TRAIN ULYSSES_PACK ULYSSES_CKPT MPIEXEC
"""
import json
import pathlib
import subprocess
import sys
import unittest

import torch
import transformers
from safetensors.torch import load_file
from transformers.models.qwen3_moe.modeling_qwen3_moe import load_balancing_loss_func

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))   # tests/: the shared CLI checks
from cli_checks import THREE_DOCUMENTS, TINY_CONFIG  # noqa: E402
from against_transformers import CLIP, STEPS, TrainsAgainstTransformers, hf_folder, metrics, trainer_adamw  # noqa: E402

TRAIN, PACK, CKPT, MPIEXEC = sys.argv[1:5]
del sys.argv[1:5]
torch.set_num_threads(1)
transformers.logging.set_verbosity_error()
BASE = {k: v for k, v in json.loads(TINY_CONFIG.read_text()).items() if k not in ("mlp_bias", "attention_bias")}
MIXTRAL = dict(BASE, model_type="mixtral", architectures=["MixtralForCausalLM"], intermediate_size=48,
               num_local_experts=4, num_experts_per_tok=2, sliding_window=None)
QWEN2_MOE = dict(BASE, model_type="qwen2_moe", architectures=["Qwen2MoeForCausalLM"], use_sliding_window=False,
                 num_experts=6, num_experts_per_tok=3, moe_intermediate_size=32, shared_expert_intermediate_size=48,
                 norm_topk_prob=False, output_router_logits=True, router_aux_loss_coef=0.05)
QWEN3_MOE = dict(BASE, model_type="qwen3_moe", architectures=["Qwen3MoeForCausalLM"], use_sliding_window=False,
                 num_hidden_layers=3, mlp_only_layers=[0], num_experts=6, num_experts_per_tok=3,
                 moe_intermediate_size=32, norm_topk_prob=True, output_router_logits=True, router_aux_loss_coef=0.05)
DOCS = THREE_DOCUMENTS


def documents_losses(model):
    """(the mean next-token loss over DOCS, each document its own forward; load_balancing_loss_func over all of them)."""
    total, count, logits = 0.0, 0, []
    for doc in DOCS:
        ids = torch.tensor([doc])
        out = model(input_ids=ids, output_router_logits=True)
        total = total + torch.nn.functional.cross_entropy(out.logits[0, :-1], ids[0, 1:], reduction="sum")
        count += len(doc) - 1
        logits.append(out.router_logits)   # per sparse layer: [tokens, E]
    layers = tuple(torch.cat([doc[layer] for doc in logits]) for layer in range(len(logits[0])))
    c = model.config
    experts = getattr(c, "num_local_experts", None) or c.num_experts
    return total / count, load_balancing_loss_func(layers, experts, c.num_experts_per_tok)


def reference(folder, coef):
    """transformers' model from `folder` trained STEPS steps by AdamW as the trainer sets it up, on CE + coef · aux:
    (CE losses, aux losses, the trained model). An expert no token picked gets a zero gradient, as the trainer's."""
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, torch_dtype=torch.float32,
                                                              attn_implementation="eager")
    opt = trainer_adamw(model)
    losses, auxes = [], []
    for _ in range(STEPS):
        loss, aux = documents_losses(model)
        opt.zero_grad()
        (loss + coef * aux).backward()
        for p in model.parameters():
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        torch.nn.utils.clip_grad_norm_(list(model.parameters()), CLIP)
        opt.step()
        losses.append(loss.item())
        auxes.append(aux.item())
    return losses, auxes, model


class Moe(TrainsAgainstTransformers):
    PACK, TRAIN, MPIEXEC = PACK, TRAIN, MPIEXEC

    def check_family(self, name, config):
        folder = hf_folder(self.shared, name, config)
        coef = config["router_aux_loss_coef"] if config.get("output_router_logits") else 0.0
        want, want_aux, _ = reference(folder, coef)
        plain = self.root / f"{name}-1"
        p = self.train(1, folder, plain)
        self.assertIn("| aux ", p.stdout + p.stderr)
        self.assert_close(metrics(plain, "loss"), want, 1e-4, f"{name} SP 1 against transformers")
        self.assert_close(metrics(plain, "aux_loss"), want_aux, 1e-4, f"{name} aux_loss against transformers")
        self.train(4, folder, self.root / f"{name}-4")
        self.assert_close(metrics(self.root / f"{name}-4", "loss"), metrics(plain, "loss"), 1e-5,
                          f"{name} SP 4 against SP 1")
        self.assert_close(metrics(self.root / f"{name}-4", "aux_loss"), metrics(plain, "aux_loss"), 1e-5,
                          f"{name} SP 4 aux_loss against SP 1")

    def test_mixtral(self):
        self.check_family("mixtral", MIXTRAL)

    def test_qwen2_moe_shared_expert_and_router_loss(self):
        self.check_family("qwen2-moe", QWEN2_MOE)

    def test_qwen3_moe_dense_layer_among_sparse(self):
        self.check_family("qwen3-moe", QWEN3_MOE)

    def test_router_loss_flag_memory_features_and_export(self):
        folder = hf_folder(self.shared, "qwen2-moe", QWEN2_MOE)
        off = self.root / "off"
        self.train(1, folder, off, "--router-aux-loss-coef", 0)
        want_off, _, _ = reference(folder, 0.0)
        self.assert_close(metrics(off, "loss"), want_off, 1e-4, "--router-aux-loss-coef 0 against CE alone")

        plain = self.root / "plain"
        self.train(1, folder, plain)
        features = ["--activation-checkpointing", "--mlp-tile-tokens", 24, "--logits-chunk-tokens", 40,
                    "--sharding", "full_shard", "--offload-params", "--offload-optimizer", "--offload-checkpoints", -1,
                    "--prefetch", "on"]
        accumulated = self.root / "accumulated"
        self.train(1, folder, accumulated, "--grad-accum", 2)
        for what, ranks, sp, extra, against in (("every memory feature", 4, 4, features, plain),
                                                ("SP 2 x DP 2", 4, 2, [], accumulated)):
            with self.subTest(what):
                out = self.root / what.replace(" ", "-")
                self.train(ranks, folder, out, *extra, sp=sp)
                for key in ("loss", "aux_loss"):
                    self.assert_close(metrics(out, key), metrics(against, key), 1e-5, f"{what}: {key}")

        # the export computes what transformers' trained model computes; import -> export is bit-exact
        _, _, trained = reference(folder, QWEN2_MOE["router_aux_loss_coef"])
        final = plain / f"checkpoints/step-{STEPS:07d}"
        export = self.root / "export"
        subprocess.run([CKPT, "export-hf", str(final), "-o", str(export), "--dtype", "fp32"], check=True,
                       capture_output=True)
        loaded = transformers.AutoModelForCausalLM.from_pretrained(export, torch_dtype=torch.float32,
                                                                   attn_implementation="eager")
        with torch.no_grad():
            ids = torch.tensor([DOCS[0]])
            ours, theirs = loaded(input_ids=ids).logits, trained(input_ids=ids).logits
        self.assertLess(((ours - theirs).norm() / theirs.norm()).item(), 1e-4)
        imported, again = self.root / "imported", self.root / "again"
        subprocess.run([CKPT, "import-hf", str(folder), "-o", str(imported)], check=True, capture_output=True)
        subprocess.run([CKPT, "export-hf", str(imported), "-o", str(again), "--dtype", "fp32"], check=True,
                       capture_output=True)
        before, after = load_file(folder / "model.safetensors"), load_file(again / "model.safetensors")
        self.assertEqual(sorted(before), sorted(after))
        for key, tensor in before.items():
            self.assertTrue(torch.equal(tensor, after[key]), key)

    def test_lora_on_attention_only(self):
        """LoRA adapts an MoE's attention projections; MLP targets, whose experts PEFT would adapt, are one line, exit 2."""
        folder = hf_folder(self.shared, "qwen3-moe", QWEN3_MOE)
        for targets in ("all-linear", "q_proj,gate_proj"):
            p = self.train(1, folder, self.root / "refused", "--lora-rank", 4, "--lora-targets", targets, code=2)
            lines = [line for line in p.stderr.splitlines() if "error" in line]
            self.assertEqual(len(lines), 1, p.stderr)
            self.assertIn("mixture of experts", lines[0])
            self.assertFalse((self.root / "refused" / "checkpoints").exists())
        out = self.root / "lora"
        self.train(1, folder, out, "--lora-rank", 4, "--lora-targets", "q_proj,v_proj")
        final = out / f"checkpoints/step-{STEPS:07d}"
        shown = subprocess.run([CKPT, "inspect", str(final)], capture_output=True, text=True).stdout
        adapted = sorted({line.split()[0].rsplit(".lora_", 1)[0].split(".", 3)[3] for line in shown.splitlines()
                          if ".lora_A" in line})
        self.assertEqual(adapted, ["self_attn.q_proj", "self_attn.v_proj"], shown[-2000:])
        self.assertEqual(len(metrics(out)), STEPS)

    def test_inspect_shows_experts(self):
        """ulysses-ckpt inspect of an HF folder: the total and active parameters, each run of layers' MLP."""
        shown = {}
        for name, config in (("qwen2-moe", QWEN2_MOE), ("qwen3-moe", QWEN3_MOE)):
            p = subprocess.run([CKPT, "inspect", str(hf_folder(self.shared, name, config))], capture_output=True,
                               text=True)
            self.assertEqual(p.returncode, 0, p.stderr)
            shown[name] = p.stdout
        self.assertRegex(shown["qwen2-moe"], r"parameters \(\S+ active\)")
        self.assertIn("layers 0-1: ", shown["qwen2-moe"])
        self.assertIn("MLP routed, 6 experts of 32, top 3, shared expert 48 (sigmoid gate)", shown["qwen2-moe"])
        self.assertRegex(shown["qwen3-moe"], r"layer 0: .*MLP dense gated, intermediate 176")
        self.assertRegex(shown["qwen3-moe"], r"layers 1-2: .*MLP routed, 6 experts of 32, top 3 renormalised;")


if __name__ == "__main__":
    unittest.main()
