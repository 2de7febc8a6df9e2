"""LoRA (--lora-rank) against PEFT: ulysses-train over a frozen base against transformers + peft.get_peft_model with
the same rank, alpha and targets, its adapters loaded with ours before the first step, trained by torch's AdamW with
clip_grad_norm_ (as HF Trainer sets them up), fp32.

One packed sequence of three documents (so every step sees it: attention stays inside each document, positions
restart), 5 steps at lr 2e-3, on a Llama with grouped KV heads (q/v adapters, PEFT's Llama default) at SP = 1 and SP =
4 (replicated, and sharded with the parameters and every layer input offloaded, prefetch on: the frozen base's groups
held in the compute dtype only),
and a Qwen3 with tied embeddings and q/k norms (all-linear, rsLoRA; checkpointing, tiled MLP, tiled logits and two
head groups) at SP = 1 and SP = 2 (replicated and full_shard): the losses of every step within 1e-5 relative, the
adapters after the steps within 1e-5 (absolute: they are about 0.1). Both sides compute in fp32, and the adapters'
AdamW amplifies its rounding: against a float64 PEFT run, ours and PEFT's own fp32 run both differ by ~5e-6 in Qwen3's
q_proj A (behind the q norm), where the other adapters agree to ~1e-7. The Qwen3 case runs again under --precision
bf16 (the base in bf16, sharded): as close to the fp32 truth as PEFT over transformers' bf16 model (HF Trainer's bf16
LoRA). SP 2 × DP 2 with hybrid_shard is one rank accumulating the same two sequences a step (1e-6). The checkpoint
holds the adapters and their AdamW state only (the base is not a trained state). A LoRA
checkpoint resumes only over its own base: another --init-from, or none, is
one line, exit 2 (and resumed over its own, it continues as one run, bit for bit).

Exports (ulysses-ckpt): export-peft's directory, loaded by PeftModel.from_pretrained over the base, is the PEFT model
with our adapters (logits bit for bit) and its loss over the documents is ours (the next step's loss of an equal run,
1e-5 relative); export-hf --merge-lora equals merge_and_unload() (1e-6) and loads in transformers with PeftModel's
logits. export-hf of a LoRA checkpoint without --merge-lora, export-peft and --merge-lora of a full one: one line,
exit 2.

usage: test_lora.py ULYSSES_TRAIN ULYSSES_PACK ULYSSES_CKPT MPIEXEC
"""
import json
import os
import pathlib
import subprocess
import sys
import unittest

import torch
import transformers
from peft import LoraConfig, PeftModel, get_peft_model, set_peft_model_state_dict
from safetensors.torch import load_file

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))   # tests/: the shared CLI checks
from cli_checks import PackedDocuments, THREE_DOCUMENTS, TINY_CONFIG  # noqa: E402

TRAIN, PACK, CKPT, MPIEXEC = sys.argv[1:5]
del sys.argv[1:5]
torch.set_num_threads(1)
transformers.logging.set_verbosity_error()
BASE = json.loads(TINY_CONFIG.read_text())
QWEN3 = dict(BASE, model_type="qwen3", architectures=["Qwen3ForCausalLM"], use_sliding_window=False,
             tie_word_embeddings=True)
DOCS = THREE_DOCUMENTS   # one sequence of 256
STEPS, LR, WD, CLIP = 5, 2e-3, 0.1, 1.0   # lr 10× a usual LoRA one


def hf_folder(root, config, seed=7):
    """A transformers model of `config`, seeded, saved in fp32 (the base both sides start from)."""
    folder = root / f"hf-{config['model_type']}-{seed}"
    if not folder.exists():
        torch.manual_seed(seed)
        model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**config))
        model.float().save_pretrained(folder, safe_serialization=True)
        (folder / "tokenizer_config.json").write_text('{"model_max_length": 256}\n')   # the merge copies it along
    return folder


def base_model(folder, dtype=torch.float32):
    return transformers.AutoModelForCausalLM.from_pretrained(folder, torch_dtype=dtype)


def peft_model(folder, adapters, rank, alpha, targets, rslora, dtype=torch.float32):
    """get_peft_model over the base with these options, its adapters set to ours (names as our checkpoint holds them).
    A bf16 base keeps fp32 adapters (PEFT's autocast_adapter_dtype), as an HF Trainer bf16 LoRA run has them."""
    peft = get_peft_model(base_model(folder, dtype), LoraConfig(r=rank, lora_alpha=alpha, target_modules=targets,
                                                         lora_dropout=0.0, use_rslora=rslora))
    result = set_peft_model_state_dict(peft, {f"base_model.model.{k}": v for k, v in adapters.items()})
    assert not result.unexpected_keys, result.unexpected_keys
    return peft


def document_loss(model):
    """The mean next-token loss over DOCS, each document alone (as the packed sequence's attention sees it)."""
    with torch.no_grad():
        total = sum(torch.nn.functional.cross_entropy(model(input_ids=torch.tensor([d])).logits[0, :-1],
                                                      torch.tensor(d[1:]), reduction="sum").item() for d in DOCS)
    return total / sum(len(d) - 1 for d in DOCS)


def reference(folder, adapters, rank, alpha, targets, rslora, dtype=torch.float32):
    """PEFT's model over the same base, ours initial adapters loaded, trained STEPS steps: (losses, adapters)."""
    peft = peft_model(folder, adapters, rank, alpha, targets, rslora, dtype)
    trained = {n: p for n, p in peft.named_parameters() if p.requires_grad}
    assert len(trained) == len(adapters), (len(trained), len(adapters))
    opt = torch.optim.AdamW(trained.values(), lr=LR, betas=(0.9, 0.95), eps=1e-8, weight_decay=WD)
    losses = []
    for _ in range(STEPS):
        total, count = 0.0, 0
        for doc in DOCS:
            ids = torch.tensor([doc])
            logits = peft(input_ids=ids).logits[0, :-1]
            total = total + torch.nn.functional.cross_entropy(logits, ids[0, 1:], reduction="sum")
            count += len(doc) - 1
        loss = total / count
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(trained.values()), CLIP)
        opt.step()
        losses.append(loss.item())
    state = {n.replace("base_model.model.", "").replace(".default", ""): p.detach().clone()
             for n, p in trained.items()}
    return losses, state


class Lora(PackedDocuments):
    PACK = PACK

    def train(self, ranks, folder, out, *flags, code=0, precision="fp32", sp=None, data=None):
        cmd = [MPIEXEC, "-n", ranks, TRAIN, "--data", data or self.data, "--init-from", folder, "--output", out,
               "--threads", 1, "--sp", sp or ranks, "--warmup", 0, "--lr-decay", "constant", "--weight-decay", WD, "--clip", CLIP,
               "--precision", precision, *flags]
        env = dict(os.environ, ONEDNN_MAX_CPU_ISA="AVX512_CORE_BF16")   # bf16 kernels where the CPU has them, AMX off
        p = subprocess.run(list(map(str, cmd)), capture_output=True, text=True, timeout=600, env=env)
        self.assertEqual(p.returncode, code, p.stderr[-3000:])
        return p

    def check_against_peft(self, config, rank, alpha, targets, *flags, rslora=False, runs=((1, ()), (4, ())),
                           bf16=False):
        """runs: (ranks, extra flags) each; a sharded run's checkpoint is consolidated (ulysses-ckpt merge) to read."""
        folder = hf_folder(self.shared, config)
        lora = ["--lora-rank", rank, "--lora-alpha", alpha, "--lora-targets", ",".join(targets),
                *(["--lora-rslora"] if rslora else []), *flags]
        # the adapters both sides start from: ours after one step at lr 0 (AdamW then leaves every value as it was)
        self.train(1, folder, self.root / "init", "--steps", 1, "--lr", 0, *lora)
        initial = load_file(str(self.root / "init/checkpoints/step-0000001/model.safetensors"))
        want_losses, want = reference(folder, initial, rank, alpha, targets, rslora)
        replicated = {}   # ranks -> the adapters of the plain run: a sharded run at those ranks is the same run
        for ranks, extra in runs:
            with self.subTest(ranks=ranks, extra=extra):
                out = self.root / f"run-{ranks}-{len(extra)}"
                self.train(ranks, folder, out, "--steps", STEPS, "--lr", LR, *lora, *extra)
                losses = [json.loads(line)["loss"] for line in (out / "metrics.jsonl").read_text().splitlines()]
                for step, (got, expected) in enumerate(zip(losses, want_losses, strict=True), 1):
                    self.assertLess(abs(got - expected), 1e-5 * abs(expected), f"step {step}: {got} vs {expected}")
                final = out / f"checkpoints/step-{STEPS:07d}"
                if extra:
                    self.ckpt("merge", final, "-o", out / "merged")
                    final = out / "merged"
                got = load_file(str(final / "model.safetensors"))
                self.assertEqual(sorted(got), sorted(want))   # the adapters only: the base is not trained
                for name, tensor in want.items():   # values of about 0.1: 1e-5 is ~1e-4 of them, ~1e-3 of 5 steps
                    self.assertLess((got[name] - tensor).abs().max().item(), 1e-5, name)
                if not extra:
                    replicated[ranks] = got
                elif ranks in replicated:
                    # measured: 0 at 2 ranks; 5e-8 at 4, whose reduce-scatter sums the gradients in another order
                    apart = max((got[n] - replicated[ranks][n]).abs().max().item() for n in got)
                    self.assertLessEqual(apart, 1e-6, f"sharded against replicated at {ranks} ranks")
                moments = load_file(str(final / "optimizer.safetensors"))
                self.assertEqual(sorted(moments), sorted(f"{m}.{n}" for m in ("exp_avg", "exp_avg_sq") for n in want))
        self.check_exports(folder, final, peft_model(folder, got, rank, alpha, targets, rslora))
        if bf16:
            ranks, extra = runs[-1]
            self.check_bf16(folder, initial, want_losses, want, ranks, [*lora, *extra], (rank, alpha, targets, rslora))

    def check_bf16(self, folder, initial, truth_losses, truth, ranks, lora, options):
        """Our bf16 run (a bf16 base, the adapters' fp32 masters) is as close to the fp32 truth as PEFT over
        transformers' bf16 model: the adapters' distance from the truth, relative to the update the steps made, within
        1.25 × PEFT's (measured: 0.089 against 0.083), and both runs' losses within one bf16 rounding of the truth."""
        out = self.root / "bf16"
        self.train(ranks, folder, out, "--steps", STEPS, "--lr", LR, *lora, precision="bf16")
        losses = [json.loads(line)["loss"] for line in (out / "metrics.jsonl").read_text().splitlines()]
        final = out / f"checkpoints/step-{STEPS:07d}"
        if "--sharding" in lora:   # this rank's shards: consolidated to be read
            self.ckpt("merge", final, "-o", out / "merged")
            final = out / "merged"
        ours = load_file(str(final / "model.safetensors"))
        their_losses, theirs = reference(folder, initial, *options, dtype=torch.bfloat16)

        def distance(adapters):
            apart = sum(((adapters[k].double() - truth[k].double()) ** 2).sum() for k in truth) ** 0.5
            update = sum(((truth[k].double() - initial[k].double()) ** 2).sum() for k in truth) ** 0.5
            return (apart / update).item()

        mine, peft = distance(ours), distance(theirs)
        self.assertLessEqual(mine, 1.25 * peft, (mine, peft))
        self.assertGreater(mine, 1e-3, "the bf16 run gave the fp32 adapters: it did not run in bf16")
        for got, hf, want in zip(losses, their_losses, truth_losses, strict=True):
            self.assertLess(abs(got - want), want / 256, (got, want))
            self.assertLess(abs(hf - want), want / 256, (hf, want))

    def ckpt(self, *args, code=0):
        p = subprocess.run(list(map(str, [CKPT, *args])), capture_output=True, text=True, timeout=300)
        self.assertEqual(p.returncode, code, p.stderr[-3000:])
        if code == 2:
            self.assertEqual(p.stderr.count("\n"), 1, p.stderr)
        return p

    def check_exports(self, folder, checkpoint, want):
        """export-peft loads in PEFT as `want` (get_peft_model with our adapters set); --merge-lora is its merge."""
        adapter, merged = self.root / "adapter", self.root / "merged"
        self.ckpt("export-peft", checkpoint, "-o", adapter, "--overwrite")
        self.ckpt("export-hf", checkpoint, "-o", merged, "--merge-lora", "--dtype", "fp32", "--overwrite")
        config = json.loads((adapter / "adapter_config.json").read_text())
        self.assertEqual(config["base_model_name_or_path"], str(folder))
        # the merged model is the base's, tokenizer included (it was dropped unless --tokenizer named it)
        self.assertEqual((merged / "tokenizer_config.json").read_text(), (folder / "tokenizer_config.json").read_text())
        loaded = PeftModel.from_pretrained(base_model(folder), adapter)
        ids = torch.tensor([DOCS[0]])
        with torch.no_grad():
            expected = want(input_ids=ids).logits
            self.assertTrue(torch.equal(loaded(input_ids=ids).logits, expected))
            unloaded = want.merge_and_unload()
            reference_merge = unloaded.state_dict()   # a tied model's lm_head.weight is the embedding: not written
            tied = unloaded.config.tie_word_embeddings
            ours = load_file(str(merged / "model.safetensors"))
            self.assertEqual(sorted(ours), sorted(k for k in reference_merge if not (tied and k == "lm_head.weight")))
            base = base_model(folder).state_dict()
            for name, tensor in ours.items():   # the update each added: equal to 1e-5 of its size (0: bit for bit)
                update = (reference_merge[name] - base[name]).abs().max().item()
                self.assertLessEqual((tensor - reference_merge[name]).abs().max().item(), 1e-5 * update, name)
            got = base_model(merged)(input_ids=ids).logits
            self.assertLess((got - expected).abs().max().item(), 1e-5 * expected.abs().max().item())

    def test_llama_q_v_adapters_equal_peft(self):
        self.check_against_peft(BASE, 4, 8, ["q_proj", "v_proj"],
                                runs=((1, ()), (4, ()), (4, ("--sharding", "full_shard", "--offload-params",
                                                                "--offload-checkpoints", "-1", "--prefetch", "on"))))

    def test_qwen3_tied_all_linear_rslora_with_memory_features_equals_peft(self):
        self.check_against_peft(QWEN3, 8, 16, ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                               "down_proj"], "--activation-checkpointing", "--mlp-tile-tokens", 48,
                                "--logits-chunk-tokens", 40, "--attention-head-groups", 2, rslora=True,
                                runs=((1, ()), (2, ()), (2, ("--sharding", "full_shard"))), bf16=True)

    def test_sp_times_dp_hybrid_shard_is_one_rank_accumulating(self):
        """SP 2 × DP 2 with hybrid_shard (the frozen base split in each SP group) against one rank with --grad-accum 2
        over the same two sequences a step: the same run (1e-6)."""
        docs = self.root / "two.jsonl"   # two packed sequences: the documents, then the same ones reversed
        docs.write_text("".join(json.dumps({"input_ids": d}) + "\n" for d in DOCS + [d[::-1] for d in DOCS]))
        data = self.root / "two"
        subprocess.run(list(map(str, [PACK, "pack", docs, "-o", data, "--seq-len", 256, "--sp", 2, "--vocab-size",
                                      320])), check=True, capture_output=True)
        folder = hf_folder(self.shared, BASE)
        lora = ["--lora-rank", 4, "--lora-targets", "all-linear", "--steps", 3, "--lr", LR]
        one, four = self.root / "one", self.root / "four"
        self.train(1, folder, one, *lora, "--grad-accum", 2, data=data)
        self.train(4, folder, four, *lora, "--sharding", "hybrid_shard", sp=2, data=data)
        losses = [[json.loads(line)["loss"] for line in (d / "metrics.jsonl").read_text().splitlines()]
                  for d in (one, four)]
        for a, b in zip(*losses, strict=True):
            self.assertLess(abs(a - b), 1e-6 * abs(a), losses)
        self.ckpt("merge", four / "checkpoints/step-0000003", "-o", four / "merged")
        got = load_file(str(four / "merged/model.safetensors"))
        want = load_file(str(one / "checkpoints/step-0000003/model.safetensors"))
        self.assertEqual(sorted(got), sorted(want))
        self.assertLessEqual(max((got[n] - want[n]).abs().max().item() for n in want), 1e-6)

    def test_resume_needs_the_base_the_adapters_were_trained_on(self):
        folder = hf_folder(self.shared, BASE)
        out = self.root / "resumed"
        lora = ["--lora-rank", 4]
        self.train(1, folder, out, "--steps", 2, "--lr", LR, *lora)
        self.train(1, folder, out, "--steps", 3, "--lr", LR, "--resume", "auto", *lora)   # the same base: continues
        straight = self.root / "straight"   # as one run of 3 steps, bit for bit
        self.train(1, folder, straight, "--steps", 3, "--lr", LR, *lora)
        last = [load_file(str(d / "checkpoints/step-0000003/model.safetensors")) for d in (out, straight)]
        self.assertEqual(sorted(last[0]), sorted(last[1]))
        self.assertTrue(all(torch.equal(last[0][n], last[1][n]) for n in last[0]))
        other = hf_folder(self.shared, BASE, seed=8)
        for how, needle in (([other, "--lora-rank", 4], "init_from"), ([folder, "--lora-rank", 8], "lora_rank 4 → 8"),
                            ([folder], "lora_rank 4 → 0")):
            p = self.train(1, how[0], out, "--steps", 4, "--resume", "auto", *how[1:], code=2)
            self.assertEqual(p.stderr.count("error:"), 1, p.stderr)
            self.assertIn(needle, p.stderr)
            self.assertIn("resume with the checkpoint's --init-from", p.stderr)
        # export-peft of the step-2 adapters, in PEFT over the base: the loss our equal run saw at step 3
        self.ckpt("export-peft", out / "checkpoints/step-0000002", "-o", self.root / "adapter")
        ours = [json.loads(line)["loss"] for line in (straight / "metrics.jsonl").read_text().splitlines()][2]
        theirs = document_loss(PeftModel.from_pretrained(base_model(folder), self.root / "adapter"))
        self.assertLess(abs(theirs - ours), 1e-5 * ours, (theirs, ours))
        p = self.ckpt("export-hf", out, "-o", self.root / "hf-out", code=2)
        self.assertIn("holds LoRA adapters (8 tensors: rank 4, alpha 8 (scale 2), targets q_proj, v_proj) and no base "
                      "model", p.stderr)
        full = self.root / "full"
        self.train(1, folder, full, "--steps", 1)
        for args, needle in ((["export-peft", full, "-o", self.root / "x"], "full fine-tune's checkpoint; export-peft"),
                             (["export-hf", full, "-o", self.root / "x", "--merge-lora"], "--merge-lora: ")):
            self.assertIn(needle, self.ckpt(*args, code=2).stderr)
        self.assertFalse((self.root / "hf-out").exists() or (self.root / "x").exists())


if __name__ == "__main__":
    unittest.main()
