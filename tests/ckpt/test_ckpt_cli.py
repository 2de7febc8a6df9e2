"""ulysses-ckpt end to end, against outside references.

- Export: tiny checkpoints of every architecture (llama with llama3 RoPE scaling, llama tied, mistral with a
  sliding window, qwen2, qwen3), trained by the real trainer under mpiexec, are exported; transformers'
  from_pretrained gives the logits of OUR model on the same ids (ckpt_logits, the trainer's own code):
  <= 1e-4 for fp32, bf16 within bf16 rounding; bf16/fp16 bytes equal torch's casts bit for bit.
- The official safetensors library opens every file we write; save_pretrained output (sharded, tied)
  imports; round trips import -> export and merge are bit-exact.
- Resume on another layout: SP=2 x DP=2 for 10 steps, then SP=4 x DP=1 and SP=1 x DP=4 (same sequences per
  step) continue with the losses of the run that never changed layout (<= 1e-5).
- Every bad input exits 2 with one "error:" line naming the file, and leaves no output behind.

usage: test_ckpt_cli.py ULYSSES_CKPT ULYSSES_TRAIN ULYSSES_PACK CKPT_LOGITS MPIEXEC REPO_ROOT
"""
import json
import math
import os
import pathlib
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest

CKPT, TRAIN, PACK, LOGITS, MPIEXEC, ROOT = sys.argv[1:7]
del sys.argv[1:7]
ROOT = pathlib.Path(ROOT)
SAMPLE = ROOT / "datasets/sample/licenses.jsonl.gz"
BASE = json.loads((ROOT / "datasets/sample/tiny-llama/config.json").read_text())

import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from safetensors import safe_open  # noqa: E402
from safetensors.numpy import load_file as np_load, save_file as np_save  # noqa: E402
from safetensors.torch import load_file as pt_load  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))   # tests/: the shared CLI checks
from cli_checks import BadInputCase, kill_mid_write, one_error_line, small_tmpfs  # noqa: E402

torch.set_num_threads(1)
transformers.logging.set_verbosity_error()

ARCHS = {
    "llama3": dict(rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                 "high_freq_factor": 4.0, "original_max_position_embeddings": 64}),
    "llama_tied": dict(tie_word_embeddings=True),
    "mistral": dict(model_type="mistral", architectures=["MistralForCausalLM"], sliding_window=48),
    "qwen2": dict(model_type="qwen2", architectures=["Qwen2ForCausalLM"], use_sliding_window=False),
    "qwen3": dict(model_type="qwen3", architectures=["Qwen3ForCausalLM"], use_sliding_window=False, head_dim=16),
}
IDS = [(i * 37 + 11) % 256 for i in range(80)]   # 80 > the mistral window and the llama3 original context


def run(*args, code=0):
    p = subprocess.run(list(map(str, args)), capture_output=True, text=True, timeout=600)
    assert p.returncode == code, f"{args}: exit {p.returncode}, expected {code}\n{p.stderr[-3000:]}"
    return p


def ckpt(*args, code=0):
    return run(CKPT, *args, code=code)


def train(n, data, cfg, out, *extra):
    return run(MPIEXEC, "-n", n, TRAIN, "--data", data, "--model-config", cfg, "--output", out, "--threads", 1,
               "--lr", "3e-3", "--warmup", 2, *extra)


def tensors(path):
    """name -> raw bytes of every tensor of a safetensors file, read by the official library."""
    out = {}
    with safe_open(str(path), framework="pt") as f:
        for k in f.keys():
            t = f.get_tensor(k)
            out[k] = (str(t.dtype), tuple(t.shape), t.contiguous().view(torch.uint8).numpy().tobytes())
    return out


def hf_tensors(d):
    d = pathlib.Path(d)
    out = {}
    for f in sorted(d.glob("*.safetensors")):
        out.update(tensors(f))
    return out


def losses(out):
    return [json.loads(l)["loss"] for l in (out / "metrics.jsonl").read_text().splitlines()]


class Env:
    """Trained once for the whole file: a packed dataset and one short run per architecture."""
    root = None

    @classmethod
    def get(cls):
        if cls.root is None:
            cls.tmp = tempfile.TemporaryDirectory()
            cls.root = pathlib.Path(cls.tmp.name)
            cls.data = cls.root / "data"
            run(PACK, "pack", SAMPLE, "-o", cls.data, "--seq-len", 256, "--sp", 4, "--pad-id", 258,
                "--vocab-size", 320)
            cls.runs = {}
            for name, extra in ARCHS.items():
                cfg = cls.root / f"{name}.json"
                cfg.write_text(json.dumps({**BASE, **extra}))
                out = cls.root / f"run-{name}"
                train(2, cls.data, cfg, out, "--sp", 2, "--steps", 3)
                cls.runs[name] = out
        return cls


def step_dir(run_dir):
    c = run_dir / "checkpoints"
    return c / (c / "latest").read_text().strip()


def checkpoint_tensors(step, stem="model"):
    """name -> torch tensor of a checkpoint's weights (stem "model") or AdamW state ("optimizer"), whole: read by
    the official safetensors library from model.safetensors, or from a sharded checkpoint's per-rank files put
    together here from the manifest's layout (an outside reading of our sharded format)."""
    if (step / f"{stem}.safetensors").exists():
        return pt_load(str(step / f"{stem}.safetensors"))
    layout = json.loads((step / "manifest.json").read_text())["shards"]
    world = layout["world"]
    files = [safe_open(str(step / f"{stem}-{r:05d}-of-{world:05d}.safetensors"), framework="pt") for r in range(world)]
    out = {}
    for prefix in [""] if stem == "model" else ["exp_avg.", "exp_avg_sq."]:
        for g in layout["groups"]:
            flat = torch.cat([f.get_tensor(prefix + g["name"]) for f in files])   # [world * shard_numel], padded
            for p in g["parameters"]:
                n = math.prod(p["shape"])
                out[prefix + p["name"]] = flat[p["offset"]:p["offset"] + n].reshape(p["shape"]).clone()
    return out


def as_bytes(named):
    return {k: (str(t.dtype), tuple(t.shape), t.contiguous().view(torch.uint8).numpy().tobytes())
            for k, t in named.items()}


def whole_weights(step):
    return as_bytes(checkpoint_tensors(step))


class Export(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.env = Env.get()
        cls.root = cls.env.root / "export"
        cls.root.mkdir(exist_ok=True)
        # our logits, from each (sharded, 2-rank) checkpoint consolidated by merge, in one process
        args = [",".join(map(str, IDS))]
        for name, r in cls.env.runs.items():
            merged = cls.root / f"merged-{name}"
            ckpt("merge", step_dir(r), "-o", merged)
            args += [merged, cls.root / f"ours-{name}.safetensors"]
        run(LOGITS, *args)
        cls.ours = {n: pt_load(str(cls.root / f"ours-{n}.safetensors"))["logits"] for n in ARCHS}

    def hf_logits(self, d):
        m = transformers.AutoModelForCausalLM.from_pretrained(str(d), dtype=torch.float32,
                                                              attn_implementation="eager")
        m.eval()
        with torch.no_grad():
            return m(torch.tensor([IDS])).logits, m

    def test_fp32_and_bf16_exports_match_our_logits(self):
        for name, r in self.env.runs.items():
            with self.subTest(arch=name):
                fp32, bf16 = self.root / f"{name}-fp32", self.root / f"{name}-bf16"
                ckpt("export-hf", r, "-o", fp32, "--dtype", "fp32")
                ckpt("export-hf", r, "-o", bf16)
                cfg = json.loads((fp32 / "config.json").read_text())
                self.assertEqual(cfg["torch_dtype"], "float32")
                self.assertEqual(json.loads((bf16 / "config.json").read_text())["torch_dtype"], "bfloat16")
                gen = json.loads((fp32 / "generation_config.json").read_text())
                self.assertEqual((gen["bos_token_id"], gen["eos_token_id"], gen["pad_token_id"]), (256, 257, 258))
                ours = self.ours[name]
                theirs, model = self.hf_logits(fp32)
                d32 = (theirs - ours).abs().max().item()
                self.assertLessEqual(d32, 1e-4, f"{name} fp32 logits differ by {d32}")
                theirs16, _ = self.hf_logits(bf16)
                dbf = (theirs16 - ours).abs().max().item()
                scale = ours.abs().max().item()
                self.assertLessEqual(dbf, 0.02 * max(1.0, scale), f"{name} bf16 logits differ by {dbf}")
                print(f"  {name}: max |logits| {scale:.3f}, transformers vs ours: fp32 {d32:.2e}, bf16 {dbf:.2e}",
                      file=sys.stderr)
                tied = name == "llama_tied"
                self.assertEqual(model.config.tie_word_embeddings, tied)
                if tied:
                    self.assertEqual(model.lm_head.weight.data_ptr(), model.model.embed_tokens.weight.data_ptr())
                    self.assertNotIn("lm_head.weight", hf_tensors(fp32))
                # the bf16 file holds torch's round-to-nearest-even cast of the fp32 weights, bit for bit
                w32 = checkpoint_tensors(step_dir(r))
                wbf = pt_load(str(bf16 / "model.safetensors"))
                self.assertEqual(sorted(w32), sorted(wbf))
                for k, v in w32.items():
                    self.assertEqual(wbf[k].dtype, torch.bfloat16)
                    self.assertTrue(torch.equal(v.to(torch.bfloat16).view(torch.int16), wbf[k].view(torch.int16)), k)

    def test_sharded_export_loads_and_fp16_is_torchs_cast(self):
        r = self.env.runs["qwen2"]
        out = self.root / "qwen2-sharded"
        ckpt("export-hf", r, "-o", out, "--dtype", "fp16", "--max-shard-size", "100KB")
        index = json.loads((out / "model.safetensors.index.json").read_text())
        shards = sorted(set(index["weight_map"].values()))
        self.assertGreater(len(shards), 1)
        self.assertEqual(shards[0], f"model-00001-of-{len(shards):05d}.safetensors")
        got = hf_tensors(out)
        self.assertEqual(index["metadata"]["total_size"], sum(len(b) for _, _, b in got.values()))
        w32 = checkpoint_tensors(step_dir(r))
        for k, v in w32.items():
            self.assertEqual(got[k][2], v.to(torch.float16).view(torch.uint8).numpy().tobytes(), k)
        theirs, _ = self.hf_logits(out)
        self.assertLessEqual((theirs - self.ours["qwen2"]).abs().max().item(), 0.05 * max(1.0, theirs.abs().max().item()))

    def test_special_values_cast_like_torch(self):
        """Ties, subnormals, overflow, inf and NaN through import-hf -> export-hf, against torch's casts."""
        src = self.root / "specials-hf"
        ckpt("export-hf", self.env.runs["llama_tied"], "-o", src, "--dtype", "fp32")
        w = np_load(str(src / "model.safetensors"))
        emb = w["model.embed_tokens.weight"]
        rng = np.random.default_rng(0)
        bits = rng.integers(0, 2**32, size=emb.size, dtype=np.uint64).astype(np.uint32)
        special = np.array([0x3f808000, 0x3f818000, 0x477ff000, 0x477fefff, 0x7f800000, 0xff800000, 0x7fc00001,
                            0x33000000, 0x33000001, 0x387fc000, 0x38800000, 0x00000001, 0x80000000, 0x7f7fffff],
                           dtype=np.uint32)
        bits[:special.size] = special
        w["model.embed_tokens.weight"] = bits.view(np.float32).reshape(emb.shape)
        np_save(w, str(src / "model.safetensors"), metadata={"format": "pt"})
        ckpt("import-hf", src, "-o", self.root / "specials-ckpt")
        ref = torch.from_numpy(bits.view(np.float32).copy())
        for flag, dt in [("bf16", torch.bfloat16), ("fp16", torch.float16)]:
            out = self.root / f"specials-{flag}"
            # NaN and inf are refused unless asked for (a diverged run's weights), naming the tensor; nothing written
            p = ckpt("export-hf", self.root / "specials-ckpt", "-o", out, "--dtype", flag, code=2)
            self.assertIn("tensor 'model.embed_tokens.weight'", p.stderr)
            self.assertIn("--allow-nonfinite", p.stderr)
            self.assertFalse(out.exists())
            ckpt("export-hf", self.root / "specials-ckpt", "-o", out, "--dtype", flag, "--allow-nonfinite")
            got = pt_load(str(out / "model.safetensors"))["model.embed_tokens.weight"].flatten().view(torch.int16)
            want = ref.to(dt).view(torch.int16)
            nan = torch.isnan(ref)
            self.assertTrue(torch.equal(got[~nan], want[~nan]), flag)
            self.assertTrue(torch.isnan(got.view(dt)[nan]).all(), flag)

    def test_save_pretrained_imports_and_round_trips_are_bit_exact(self):
        for name in ["llama3", "llama_tied"]:
            with self.subTest(arch=name):
                r = self.env.runs[name]
                fp32 = self.root / f"{name}-rt-fp32"
                ckpt("export-hf", r, "-o", fp32, "--dtype", "fp32")
                # transformers writes it back, sharded; our import reads it; the weights are unchanged
                m = transformers.AutoModelForCausalLM.from_pretrained(str(fp32), dtype=torch.float32)
                saved = self.root / f"{name}-saved"
                m.save_pretrained(str(saved), max_shard_size="100KB", safe_serialization=True)
                self.assertTrue((saved / "model.safetensors.index.json").exists())
                imported = self.root / f"{name}-imported"
                ckpt("import-hf", saved, "-o", imported)
                ckpt("diff", step_dir(r), imported)
                # import -> export at the same dtype gives back the same bytes per tensor (fp32 and bf16)
                again = self.root / f"{name}-again"
                ckpt("export-hf", imported, "-o", again, "--dtype", "fp32")
                self.assertEqual(hf_tensors(fp32), hf_tensors(again))
                bf = self.root / f"{name}-bf"
                ckpt("export-hf", r, "-o", bf)
                ckpt("import-hf", bf, "-o", self.root / f"{name}-bf-imported")
                bf2 = self.root / f"{name}-bf2"
                ckpt("export-hf", self.root / f"{name}-bf-imported", "-o", bf2, "--dtype", "bf16")
                self.assertEqual(hf_tensors(bf), hf_tensors(bf2))
                # the imported checkpoint is one the trainer starts from
                st = json.loads((imported / "trainer_state.json").read_text())
                self.assertEqual((st["step"], st["cursor"]), (0, 0))
                for f in ["model.safetensors", "optimizer.safetensors"]:
                    tensors(imported / f)   # the official library opens it
                with safe_open(str(imported / "optimizer.safetensors"), framework="pt") as f:
                    self.assertEqual(f.metadata()["steps"], "0")
                    self.assertTrue(all(not f.get_tensor(k).any() for k in f.keys()))

    def test_merge_is_bit_exact_and_inspect_diff_report(self):
        r = self.env.runs["qwen3"]
        merged = self.root / "qwen3-merged"
        for command, source in (("merge", r), ("export-hf", r)):   # --dry-run says so, and writes nothing
            p = ckpt(command, source, "-o", merged, "--dry-run")
            self.assertEqual(p.stderr.strip().splitlines()[-1].split("] ", 1)[-1], "dry run: nothing was written")
            self.assertFalse(merged.exists())
        ckpt("merge", r, "-o", merged)
        src = step_dir(r)   # sharded (2 ranks): merge gathers it, bit for bit
        for stem in ["model", "optimizer"]:
            self.assertEqual(as_bytes(checkpoint_tensors(src, stem)), tensors(merged / f"{stem}.safetensors"), stem)
        self.assertEqual(json.loads((src / "manifest.json").read_text())["optimizer_layout"], "sharded")
        with safe_open(str(merged / "optimizer.safetensors"), framework="pt") as f:
            self.assertEqual(f.metadata()["steps"], "3")
        m = json.loads((merged / "manifest.json").read_text())
        self.assertTrue(m["consolidated"])
        self.assertEqual(m["optimizer_layout"], "replicated")
        self.assertNotIn("shards", m)
        self.assertEqual((m["step"], m["layout"]), (3, {"world": 2, "sp": 2, "dp": 1}))
        ckpt("diff", r, merged, "--optimizer")
        p = ckpt("inspect", merged)
        for needle in ["step 3", "sp 2 x dp 1", "consolidated", "Qwen3ForCausalLM", "q_norm", "ok"]:
            self.assertIn(needle, p.stdout)
        # the layers as their description has them (arch/layer_spec.hpp), and the parameters the tensors hold
        self.assertRegex(p.stdout, r"layers 0-\d+: attention \d+ heads \(\d+ kv\) x \d+, qk norm, RoPE default")
        count = sum(math.prod(shape) for _, shape, _ in tensors(merged / "model.safetensors").values())
        unit, name = next((u, n) for u, n in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K"), (1, "")) if count >= u)
        v = count / unit   # three significant digits, as the tools print counts (core/log.hpp's human_count)
        self.assertIn(f"{v:.{0 if v >= 100 or not name else 1 if v >= 10 else 2}f}{name} parameters", p.stdout)
        hf = self.root / "qwen3-inspect-hf"
        ckpt("export-hf", merged, "-o", hf, "--tokenizer", self.tokenizer_dir())
        self.assertTrue((hf / "tokenizer_config.json").exists())
        p = ckpt("inspect", hf)
        self.assertIn("BF16", p.stdout)
        self.assertIn("xxh3", p.stdout)
        # diff: bf16 export vs the checkpoint differs (exit 1 at tolerance 0), passes at bf16 tolerance
        p = ckpt("diff", merged, hf, code=1)
        self.assertIn("ABOVE TOLERANCE", p.stdout)
        ckpt("diff", merged, hf, "--tolerance", "0.01")
        # missing / extra tensors
        other = self.root / "llama-for-diff"
        ckpt("export-hf", self.env.runs["llama_tied"], "-o", other, "--dtype", "fp32")
        p = ckpt("diff", merged, other, code=1)
        self.assertIn("only in A", p.stdout)

    def tokenizer_dir(self):
        d = self.root / "tok"
        d.mkdir(exist_ok=True)
        (d / "tokenizer_config.json").write_text('{"model_max_length": 256}')
        (d / "tokenizer.json").write_text("{}")
        return d


class StartFromHuggingFace(unittest.TestCase):
    """A Hugging Face directory (our fp32 export of a trained run) as the start of training, two ways:
    `ulysses-train --init-from HF` and `ulysses-ckpt import-hf HF -o CKPT` then `--resume CKPT`."""

    def start(self, out, how, lr):
        env = Env.get()
        run(MPIEXEC, "-n", 2, TRAIN, "--data", env.data, "--output", out, "--threads", 1, "--sp", 2, "--steps", 3,
            "--lr", lr, "--weight-decay", 0, "--warmup", 0, *how)
        return out / "checkpoints/step-0000003"

    def test_init_from_and_import_then_resume_start_from_the_weights(self):
        env = Env.get()
        root = env.root / "from-hf"
        hf, imported = root / "hf", root / "imported"
        trained = step_dir(env.runs["qwen2"])
        ckpt("export-hf", env.runs["qwen2"], "-o", hf, "--dtype", "fp32")
        ckpt("import-hf", hf, "-o", imported)
        # at lr 0 both runs end with exactly the weights they started from: the trained run's
        init = self.start(root / "init0", ["--init-from", hf], 0)
        resumed = self.start(root / "resume0", ["--resume", imported, "--model-config", imported / "config.json"], 0)
        want = whole_weights(trained)
        self.assertEqual(whole_weights(init), want)
        self.assertEqual(whole_weights(resumed), want)
        # training from there: both routes take the same steps, bit for bit (zero AdamW state, step 0, cursor 0)
        a = self.start(root / "init", ["--init-from", hf], 3e-3)
        b = self.start(root / "resume", ["--resume", imported, "--model-config", imported / "config.json"], 3e-3)
        self.assertEqual(losses(root / "init"), losses(root / "resume"))
        self.assertEqual(len(losses(root / "init")), 3)
        self.assertEqual(whole_weights(a), whole_weights(b))
        self.assertNotEqual(whole_weights(a), want)


class CrashSafety(unittest.TestCase):
    """kill -9 while a checkpoint (the trainer) or an export (export-hf) is being written: the previous one
    stays complete and usable, and nothing under a final name looks complete. A model of ~45M parameters
    makes each write long enough to be caught in the middle."""

    def test_killed_save_and_export_leave_the_previous_ones(self):
        env = Env.get()
        root = env.root / "crash"
        root.mkdir()
        cfg = root / "big.json"
        cfg.write_text(json.dumps({**BASE, "hidden_size": 1024, "intermediate_size": 2816, "num_hidden_layers": 4,
                                   "num_attention_heads": 16, "num_key_value_heads": 4, "head_dim": 64}))
        out = root / "run"
        cmd = [MPIEXEC, "-n", 1, TRAIN, "--data", env.data, "--model-config", cfg, "--output", out, "--threads", 2,
               "--save-every", 1, "--resume", "auto"]
        run(*cmd, "--steps", 1)
        ckpts = out / "checkpoints"
        self.assertTrue(kill_mid_write([*cmd, "--steps", 2], ckpts / ".step-0000002.tmp-*" / "*.safetensors"),
                        "the save finished before it could be killed")
        subprocess.run(["pkill", "-9", "-f", f"^{TRAIN} .*{out}"])   # a rank outside the launcher's session
        self.assertEqual((ckpts / "latest").read_text().strip(), "step-0000001")
        self.assertEqual(sorted(p.name for p in ckpts.glob("step-*")), ["step-0000001"])
        self.assertIn("step 1", ckpt("inspect", out).stdout)   # complete: manifest, sizes and checksums agree
        p = run(*cmd, "--steps", 2)
        self.assertIn("resumed from", p.stderr)
        self.assertEqual((ckpts / "latest").read_text().strip(), "step-0000002")

        hf = root / "hf"
        ckpt("export-hf", out, "-o", hf)   # bf16
        before = tensors(hf / "model.safetensors")
        self.assertTrue(kill_mid_write([CKPT, "export-hf", out, "-o", hf, "--dtype", "fp32", "--overwrite"],
                                       root / ".hf.tmp-*" / "*.safetensors"), "the export finished first")
        self.assertEqual(json.loads((hf / "config.json").read_text())["torch_dtype"], "bfloat16")
        self.assertEqual(tensors(hf / "model.safetensors"), before)
        ckpt("inspect", hf)
        self.assertEqual(sorted(x.name for x in root.iterdir() if not x.name.startswith(".")), ["big.json", "hf", "run"])


class ResumeOnAnotherLayout(unittest.TestCase):
    def test_sp2dp2_to_sp4dp1_and_sp1dp4(self):
        env = Env.get()
        root = env.root / "layouts"
        cfg = ROOT / "datasets/sample/tiny-llama/config.json"
        # 4 sequences per step at every layout: dp x micro-batch = 2 x 2 = 1 x 4 = 4 x 1
        ref = root / "ref"
        train(4, env.data, cfg, ref, "--sp", 2, "--micro-batch", 2, "--steps", 12, "--save-every", 10)
        base = losses(ref)
        self.assertEqual(len(base), 12)
        step10 = ref / "checkpoints/step-0000010"
        merged = root / "merged10"
        ckpt("merge", step10, "-o", merged)
        for sp, micro, src in [(4, 4, step10), (1, 1, merged)]:
            out = root / f"sp{sp}"
            train(4, env.data, cfg, out, "--sp", sp, "--micro-batch", micro, "--steps", 12, "--resume", src)
            got = losses(out)
            self.assertEqual(len(got), 2)
            print(f"  resumed at sp {sp} x dp {4 // sp}: {got} vs {base[10:]}", file=sys.stderr)
            for step, (x, y) in enumerate(zip(base[10:], got), 11):
                self.assertLessEqual(abs(x - y), 1e-5 * max(1.0, abs(x)), f"sp {sp} step {step}: {x} vs {y}")


class BadInput(BadInputCase):
    @classmethod
    def setUpClass(cls):
        cls.env = Env.get()
        cls.good = cls.env.root / "bad-good-hf"
        ckpt("export-hf", cls.env.runs["llama3"], "-o", cls.good, "--dtype", "fp32")

    def expect_bad(self, args, *needles):
        p = ckpt(*args, code=2)
        line = one_error_line(self, p.stderr, needles, self.out)
        self.assertIn("HINT", line)
        return line

    def hf_with(self, blob=None, config=None):
        """A copy of a good HF directory whose model.safetensors is `blob` and/or config.json `config`."""
        d = self.root / "hf"
        shutil.copytree(self.good, d)
        if blob is not None:
            (d / "model.safetensors").write_bytes(blob)
        if config is not None:
            (d / "config.json").write_text(json.dumps(config))
        return d

    @staticmethod
    def blob(header, data=b""):
        h = header if isinstance(header, bytes) else json.dumps(header).encode()
        return struct.pack("<Q", len(h)) + h + data

    def test_truncated_safetensors(self):
        full = (self.good / "model.safetensors").read_bytes()
        d = self.hf_with(blob=full[: len(full) - 1000])
        self.expect_bad(["import-hf", d, "-o", self.out], "model.safetensors", "truncated")

    def test_a_fifo_is_refused_not_waited_on(self):
        d = self.hf_with()
        (d / "model.safetensors").unlink()
        os.mkfifo(d / "model.safetensors")
        self.expect_bad(["import-hf", d, "-o", self.out], "model.safetensors", "not a regular file")

    def test_numbers_no_double_holds(self):
        """1e999 in a safetensors header or a config.json is one error line, not a library exception (exit 1)."""
        d = self.hf_with(blob=self.blob(b'{"__metadata__": {"x": "y"}, "w": {"dtype": "F32", "shape": [1e999], '
                                        b'"data_offsets": [0, 4]}}', b"\0" * 4))
        self.expect_bad(["import-hf", d, "-o", self.out], "model.safetensors", "out of range")
        shutil.rmtree(d)
        d = self.hf_with()
        (d / "config.json").write_text((d / "config.json").read_text().replace('"vocab_size": ', '"vocab_size": 1e999, "x": '))
        self.expect_bad(["import-hf", d, "-o", self.out], "config.json", "out of range")

    def test_json_nested_200000_deep(self):
        """A safetensors header or config.json nested 200,000 deep is one error line, not a stack overflow."""
        deep = b"[" * 200000 + b"]" * 200000
        d = self.hf_with(blob=self.blob(b'{"__metadata__": {"x": ' + deep + b'}}'))
        self.expect_bad(["import-hf", d, "-o", self.out], "model.safetensors", "nested deeper than 64 levels")
        shutil.rmtree(d)
        d = self.hf_with()
        (d / "config.json").write_text((d / "config.json").read_text().replace('"vocab_size": ',
                                                                              '"x": ' + deep.decode() + ', "vocab_size": '))
        self.expect_bad(["import-hf", d, "-o", self.out], "config.json", "nested deeper than 64 levels")

    def test_header_not_json(self):
        d = self.hf_with(blob=self.blob(b"{not json at all", b"\0" * 8))
        self.expect_bad(["import-hf", d, "-o", self.out], "model.safetensors", "not valid JSON")

    def test_header_length_beyond_file(self):
        d = self.hf_with(blob=struct.pack("<Q", 5000) + b"{}")
        self.expect_bad(["import-hf", d, "-o", self.out], "model.safetensors", "5000", "past the end")

    def test_overlapping_and_out_of_range_offsets(self):
        t = {"dtype": "F32", "shape": [2]}
        d = self.hf_with(blob=self.blob({"a": {**t, "data_offsets": [0, 8]}, "b": {**t, "data_offsets": [4, 12]}},
                                        b"\0" * 12))
        self.expect_bad(["import-hf", d, "-o", self.out], "model.safetensors", "overlap")
        shutil.rmtree(d)
        d = self.hf_with(blob=self.blob({"a": {**t, "data_offsets": [8, 16]}}, b"\0" * 8))
        self.expect_bad(["import-hf", d, "-o", self.out], "model.safetensors", "[8, 16]", "8 bytes")

    def test_unknown_dtype(self):
        d = self.hf_with(blob=self.blob({"a": {"dtype": "F7", "shape": [1], "data_offsets": [0, 1]}}, b"\0"))
        self.expect_bad(["import-hf", d, "-o", self.out], "model.safetensors", "F7")
        p = ckpt("inspect", d / "model.safetensors", code=2)
        self.assertIn("unknown dtype", p.stderr)

    def test_missing_shard_named_in_index(self):
        d = self.root / "sharded"
        ckpt("export-hf", self.env.runs["llama3"], "-o", d, "--max-shard-size", "100KB")
        shards = sorted(d.glob("model-*-of-*.safetensors"))
        self.assertGreater(len(shards), 1)
        shards[1].unlink()
        self.expect_bad(["import-hf", d, "-o", self.out], shards[1].name, "missing")

    def test_config_without_required_fields(self):
        cfg = json.loads((self.good / "config.json").read_text())
        del cfg["hidden_size"]
        d = self.hf_with(config=cfg)
        self.expect_bad(["import-hf", d, "-o", self.out], "config.json", "hidden_size")

    def test_weights_that_do_not_match_the_config(self):
        cfg = json.loads((self.good / "config.json").read_text())
        cfg["intermediate_size"] = 128
        d = self.hf_with(config=cfg)
        self.expect_bad(["import-hf", d, "-o", self.out], "mlp.gate_proj.weight", "[176, 64]", "[128, 64]")

    def test_damaged_checkpoint(self):
        c = self.root / "ckpt"
        shutil.copytree(step_dir(self.env.runs["llama3"]), c)
        shard = "model-00001-of-00002.safetensors"   # rank 1's file of the (sharded, 2-rank) checkpoint
        with open(c / shard, "r+b") as f:
            f.seek(-3, 2)
            f.write(b"\x01\x02\x03")
        self.expect_bad(["merge", c, "-o", self.out], shard, "xxh3")
        (c / shard).write_bytes(b"short")
        self.expect_bad(["export-hf", c, "-o", self.out], shard, "5 bytes")
        (c / shard).unlink()
        self.expect_bad(["export-hf", c, "-o", self.out], shard, "missing")
        self.expect_bad(["merge", self.root, "-o", self.out], "not a checkpoint")

    def test_inconsistent_shard_layout(self):
        """A sharded checkpoint's layout is checked against itself and its files before anything is read."""
        for what, edit, needles in [
                ("shard_numel", lambda g: g.update(shard_numel=g["shard_numel"] + 1), ["shard_numel", "ceil"]),
                ("offset", lambda g: g["parameters"][-1].update(offset=1), ["offset"]),
                ("name", lambda g: g.update(name="no.such.group"), ["no.such.group", "missing"])]:
            c = self.root / f"ckpt-shards-{what}"
            shutil.copytree(step_dir(self.env.runs["llama3"]), c)
            m = json.loads((c / "manifest.json").read_text())
            edit(m["shards"]["groups"][1])
            (c / "manifest.json").write_text(json.dumps(m))
            self.expect_bad(["merge", c, "-o", self.out], "manifest.json" if what != "name" else "model-0000", *needles)

    def test_a_file_outside_the_checkpoint_is_refused(self):
        """A manifest's file names stay in the checkpoint's folder: an absolute path or ".." is refused, by
        inspect and merge alike, before anything is opened."""
        for name in ("/etc/passwd", "../../etc/passwd"):
            c = self.root / f"ckpt-escape-{len(name)}"
            shutil.copytree(step_dir(self.env.runs["llama3"]), c)
            m = json.loads((c / "manifest.json").read_text())
            m["files"][0]["file"] = name
            (c / "manifest.json").write_text(json.dumps(m))
            self.expect_bad(["merge", c, "-o", self.out], "manifest.json", name, "not a plain name")
            p = ckpt("inspect", c, code=2)
            self.assertIn("not a plain name", p.stderr)

    def test_unknown_optimizer_layout(self):
        """A layout a later trainer may write (sharded optimizer state) is refused, not misread."""
        c = self.root / "ckpt-layout"
        shutil.copytree(step_dir(self.env.runs["llama3"]), c)
        m = json.loads((c / "manifest.json").read_text())
        m["optimizer_layout"] = "sharded-zero1"
        (c / "manifest.json").write_text(json.dumps(m))
        self.expect_bad(["merge", c, "-o", self.out], "optimizer_layout", "sharded-zero1")

    def test_existing_output_needs_overwrite(self):
        self.out.mkdir()
        p = ckpt("export-hf", self.env.runs["llama3"], "-o", self.out, code=2)
        self.assertIn("--overwrite", p.stderr)
        self.assertEqual(list(self.out.iterdir()), [])
        ckpt("export-hf", self.env.runs["llama3"], "-o", self.out, "--overwrite")
        self.assertTrue((self.out / "model.safetensors").exists())

    def test_bad_flags(self):
        self.expect_bad(["export-hf", self.env.runs["llama3"], "-o", self.out, "--max-shard-size", "5XB"], "5XB")
        self.expect_bad(["export-hf", self.env.runs["llama3"], "-o", self.out, "--tokenizer", self.root],
                        str(self.root), "tokenizer")

    def test_full_output_filesystem(self):
        with small_tmpfs(self, self.root / "small") as small:
            self.out = small / "out"
            self.expect_bad(["export-hf", self.env.runs["llama3"], "-o", self.out, "--dtype", "fp32"], "full",
                            str(small))
            self.expect_bad(["merge", self.env.runs["llama3"], "-o", self.out], "full", str(small))


if __name__ == "__main__":
    unittest.main(verbosity=2)
