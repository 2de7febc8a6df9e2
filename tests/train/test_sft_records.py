"""Fine-tuning data (tools/chat_ids.py → ulysses-pack → ulysses-train) against TRL's own preprocessing.

A word-level tokenizer made here, with a chat template in two forms: one marking assistant turns with
{% generation %} (what TRL's assistant_only_loss needs) and the same without the marks (chat_ids.py's prefix rule).
For conversations, conversational prompt-completion records and text prompt-completion records, the ids and the
loss mask chat_ids.py writes equal the ids SFTTrainer tokenizes and the tokens its collator leaves as labels
(labels != -100): assistant_only_loss=True for conversations, its default completion_only_loss for
prompt-completion; --loss-on all equals assistant_only_loss=False. Then the records packed into one sequence and one
fp32 step of ulysses-train from the same Hugging Face model: the step's loss is transformers' cross-entropy over
exactly the masked tokens of each record (1e-5), and the metrics count those tokens.

usage: test_sft_records.py ULYSSES_PACK ULYSSES_TRAIN MPIEXEC
"""
import json
import pathlib
import subprocess
import sys
import tempfile
import unittest

import torch

PACK, TRAIN, MPIEXEC = sys.argv[1:4]
del sys.argv[1:4]
ROOT = pathlib.Path(__file__).resolve().parents[2]
CHAT_IDS = ROOT / "tools/chat_ids.py"
TINY_CONFIG = ROOT / "datasets/sample/tiny-llama/config.json"
SPECIALS = ["<unk>", "<s>", "</s>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]
WORDS = ("what is the answer to a question about long context training with many tokens per gpu it depends on "
         "memory and sequence parallel degree you should try packing shorter records together yes no why because "
         "thanks hello").split()
TEMPLATE = ("{{ bos_token }}{% for m in messages %}{{ '<|' + m['role'] + '|>' }}"
            "{% if m['role'] == 'assistant' %}{% generation %}{{ m['content'] }}<|end|>{% endgeneration %}"
            "{% else %}{{ m['content'] }}<|end|>{% endif %}{% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>{% endif %}")
UNMARKED = TEMPLATE.replace("{% generation %}", "").replace("{% endgeneration %}", "")


def say(*words):   # no space at the start: transformers' assistant mask begins at the first character's token
    return " ".join(words)


CHATS = [
    {"messages": [{"role": "system", "content": say("you", "should", "try")},
                  {"role": "user", "content": say("what", "is", "the", "answer")},
                  {"role": "assistant", "content": say("it", "depends", "on", "memory")},
                  {"role": "user", "content": say("why")},
                  {"role": "assistant", "content": say("because", "sequence", "parallel", "degree")}]},
    {"messages": [{"role": "user", "content": say("hello")},
                  {"role": "assistant", "content": say("hello", "what", "is", "the", "question")}]},
]
CONVERSATIONAL = [
    {"prompt": [{"role": "user", "content": say("what", "is", "packing")}],
     "completion": [{"role": "assistant", "content": say("packing", "shorter", "records", "together")}]},
    {"prompt": [{"role": "system", "content": say("yes")}, {"role": "user", "content": say("many", "tokens", "why")}],
     "completion": [{"role": "assistant", "content": say("memory", "per", "gpu")}]},
]
TEXT = [{"prompt": "what is long context training", "completion": " " + say("training", "with", "many", "tokens")},
        {"prompt": "thanks", "completion": " " + say("no", "thanks") + "</s>"}]


def tokenizer_folder(path, template):
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast
    vocab = {t: i for i, t in enumerate(SPECIALS + WORDS)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                  pad_token="</s>", additional_special_tokens=SPECIALS[3:])
    fast.chat_template = template
    fast.save_pretrained(path)
    return path


def trl_targets(model, tokenizer, records, out, **config):
    """SFTTrainer's tokenized ids and the tokens its collator trains on (labels != -100), per record."""
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer
    args = SFTConfig(output_dir=str(out), report_to="none", max_length=None, bf16=False, **config)
    trainer = SFTTrainer(model=model, args=args, train_dataset=Dataset.from_list(records), processing_class=tokenizer)
    rows = []
    for row in trainer.train_dataset:
        labels = trainer.data_collator([row])["labels"][0]
        rows.append((list(row["input_ids"]), (labels != -100).int().tolist()))
    return rows


class SftRecords(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM
        cls.tmp = tempfile.TemporaryDirectory()
        cls.root = pathlib.Path(cls.tmp.name)
        cls.marked = tokenizer_folder(cls.root / "marked", TEMPLATE)
        cls.unmarked = tokenizer_folder(cls.root / "unmarked", UNMARKED)
        cls.tokenizer = AutoTokenizer.from_pretrained(cls.marked)
        torch.manual_seed(0)
        cls.model = LlamaForCausalLM(LlamaConfig.from_json_file(TINY_CONFIG)).float()
        cls.hf = cls.root / "hf"
        cls.model.save_pretrained(cls.hf, safe_serialization=True)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def chat_ids(self, folder, records, name, *flags):
        src, dst = self.root / f"{name}.jsonl", self.root / f"{name}-ids.jsonl"
        src.write_text("".join(json.dumps(r) + "\n" for r in records))
        with src.open() as stdin, dst.open("w") as stdout:
            p = subprocess.run([sys.executable, CHAT_IDS, folder, *flags], stdin=stdin, stdout=stdout,
                               stderr=subprocess.PIPE, text=True, timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr)
        return [(r["input_ids"], r["loss_mask"]) for r in map(json.loads, dst.read_text().splitlines())], dst

    def test_ids_and_masks_equal_trl(self):
        for name, records, config in (("chat", CHATS, {"assistant_only_loss": True}),
                                      ("conversational", CONVERSATIONAL, {}), ("text", TEXT, {})):
            want = trl_targets(self.model, self.tokenizer, records, self.root / f"trl-{name}", **config)
            self.assertTrue(all(0 < sum(m) < len(m) for _, m in want), want)   # a mask with both kinds
            got, _ = self.chat_ids(self.marked, records, name)
            self.assertEqual(got, want, name)
            got, _ = self.chat_ids(self.unmarked, records, f"{name}-by-prefix")   # the prefix rule, no marks
            self.assertEqual(got, want, name)
        everything = trl_targets(self.model, self.tokenizer, CHATS, self.root / "trl-all")
        self.assertEqual(self.chat_ids(self.marked, CHATS, "all", "--loss-on", "all")[0], everything)
        self.assertTrue(all(set(m) == {1} for _, m in everything))

    def test_a_template_that_rewrites_earlier_turns_is_refused(self):
        rewriting = tokenizer_folder(self.root / "rewriting", UNMARKED.replace(
            "{% for m in messages %}", "{% for m in messages %}{% if loop.last %}<|system|>{% endif %}"))
        src = self.root / "rewriting.jsonl"
        src.write_text(json.dumps(TEXT[0]) + "\n" + json.dumps(CHATS[0]) + "\n")   # the refused record second
        out = self.root / "rewriting-ids.jsonl"
        with src.open() as stdin:
            p = subprocess.run([sys.executable, CHAT_IDS, rewriting, "-o", out], stdin=stdin, capture_output=True,
                               text=True, timeout=300)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertEqual(p.stderr.count("\n"), 1, p.stderr)
        self.assertIn("stdin line 2: message 2 (assistant)", p.stderr)
        self.assertIn("{% generation %}", p.stderr)
        # nothing written, not the records before it (once a partial file that looked complete), no temporary left
        self.assertEqual([x.name for x in self.root.iterdir() if x.name.startswith((out.name, ".chat_ids-"))], [])
        # the system python without transformers: one line naming the venv, not a traceback
        bare = subprocess.run(["python3", "-I", "-S", CHAT_IDS, rewriting], input="", capture_output=True, text=True)
        self.assertEqual(bare.returncode, 2, bare.stderr)
        self.assertEqual(bare.stderr.count("\n"), 1, bare.stderr)
        self.assertIn("cannot import transformers — HINT: run it with the toolkit's venv", bare.stderr)

    def test_a_packed_sft_step_counts_the_answers_only(self):
        records, ids_file = self.chat_ids(self.marked, CHATS + CONVERSATIONAL + TEXT, "step")
        data, out = self.root / "step-packed", self.root / "step-run"
        p = subprocess.run(list(map(str, [PACK, "pack", ids_file, "--loss-mask-key", "loss_mask", "-o", data,
                                          "--seq-len", 512, "--long-docs", "truncate", "--model-config", TINY_CONFIG])),
                           capture_output=True, text=True, timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(json.loads((data / "manifest.json").read_text())["stats"]["sequences"], 1)
        p = subprocess.run(list(map(str, [MPIEXEC, "-n", 1, TRAIN, "--data", data, "--init-from", self.hf,
                                          "--output", out, "--threads", 1, "--steps", 1, "--precision", "fp32"])),
                           capture_output=True, text=True, timeout=600)
        self.assertEqual(p.returncode, 0, p.stderr[-3000:])
        step = json.loads((out / "metrics.jsonl").read_text().splitlines()[0])
        total, count = 0.0, 0
        with torch.no_grad():
            for ids, mask in records:
                logits = self.model(torch.tensor([ids])).logits[0, :-1].double()
                keep = torch.tensor(mask[1:]) == 1   # token j is a target, predicted from j - 1
                total += torch.nn.functional.cross_entropy(logits[keep], torch.tensor(ids[1:])[keep],
                                                           reduction="sum").item()
                count += int(keep.sum())
        self.assertEqual(step["tokens"], count)
        self.assertLess(abs(step["loss"] - total / count), 1e-5 * total / count, (step["loss"], total / count))


if __name__ == "__main__":
    unittest.main()
