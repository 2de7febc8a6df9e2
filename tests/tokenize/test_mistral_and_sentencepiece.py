"""ulysses-pack's SentencePiece path (tokenizer.model) against the `sentencepiece` package, and its Tekken path
(tekken.json) against mistral-common's Tekkenizer, on text_corpus.py's
corpus (~3 MB of prose, code, CJK, emoji, combining marks, digit and whitespace runs, special-token
strings), for: a unigram model with byte fallback (Llama 2's kind) and a BPE model, both trained here by
sentencepiece's own trainer (spm_train's code), and the Mistral v1 and v3 tokenizer.model files shipped inside the
mistral-common package. For each, `ulysses-pack tokenize` gives, for every document, [BOS] + encode(text) + [EOS]
(tokenizer_config.json: add_bos_token true, eos_token "</s>"), at 4 threads; with add_bos_token false, no BOS.
Mistral's two tekken.json files: Tekkenizer.encode(text, bos=True, eos=False) + </s>, from the file alone.

usage: test_mistral_and_sentencepiece.py ULYSSES_PACK SAMPLE_JSONL_GZ
"""
import importlib.util
import json
import pathlib
import shutil
import subprocess
import sys
import unittest

import h5py
import sentencepiece as spm

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from text_corpus import CorpusCase  # noqa: E402

PACK, SAMPLE = sys.argv[1:3]
del sys.argv[1:3]
CHAT_IDS = pathlib.Path(__file__).resolve().parents[2] / "tools/chat_ids.py"
MISTRAL_DATA = pathlib.Path(importlib.util.find_spec("mistral_common").submodule_search_locations[0]) / "data"


class VsMistralAndSentencePiece(CorpusCase):
    SAMPLE = SAMPLE

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.train_lines = cls.root / "train.txt"
        cls.train_lines.write_text("\n".join(line for t in cls.texts[:3000] for line in t.splitlines() if line.strip()),
                                   encoding="utf-8")

    def folder(self, name, model, **config):
        d = self.root / name
        d.mkdir()
        shutil.copy(model, d / "tokenizer.model")
        (d / "tokenizer_config.json").write_text(json.dumps({"eos_token": "</s>", **config}))
        return d

    def trained(self, name, model_type, **options):
        prefix = self.root / f"spm-{name}"
        spm.SentencePieceTrainer.train(input=str(self.train_lines), model_prefix=str(prefix), vocab_size=4000,
                                       model_type=model_type, input_sentence_size=200000, shuffle_input_sentence=True,
                                       character_coverage=0.9995, minloglevel=2, **options)
        return pathlib.Path(f"{prefix}.model")

    def check(self, d, bos=True):
        sp = spm.SentencePieceProcessor(model_file=str(d / "tokenizer.model"))
        out = d / "ids.jsonl"
        p = subprocess.run([PACK, "tokenize", self.text_file, "-o", out, "--tokenizer", d, "--threads", "4"],
                           capture_output=True, text=True, timeout=900)
        self.assertEqual(p.returncode, 0, p.stderr[-3000:])
        got = [json.loads(line)["input_ids"] for line in out.read_text().splitlines()]
        self.assertEqual(len(got), len(self.texts))
        eos = sp.eos_id()
        bad = []
        for i, (text, ids) in enumerate(zip(self.texts, got)):
            want = ([sp.bos_id()] if bos else []) + sp.encode(text)
            if not want or want[-1] != eos:
                want.append(eos)
            if ids != want:
                bad.append(i)
        self.assertEqual(bad, [], f"{len(bad)} documents differ, the first {self.texts[bad[0]][:200]!r}" if bad else "")

    def test_unigram_with_byte_fallback(self):
        self.check(self.folder("unigram", self.trained("unigram", "unigram", byte_fallback=True)))

    def test_bpe(self):
        self.check(self.folder("bpe", self.trained("bpe", "bpe")))

    def test_bpe_without_bos(self):
        self.check(self.folder("bpe-nobos", self.trained("bpe2", "bpe"), add_bos_token=False), bos=False)

    def test_mistral_v1(self):
        self.check(self.folder("mistral-v1", MISTRAL_DATA / "tokenizer.model.v1"))

    def test_mistral_v3(self):
        self.check(self.folder("mistral-v3", MISTRAL_DATA / "mistral_instruct_tokenizer_240323.model.v3"))

    def test_a_refused_tokenizer_json_gives_way_to_tokenizer_model(self):
        """A folder whose tokenizer.json this reader refuses (a WordPiece here; Llama 2's byte-fallback BPE in the
        wild) is read through its tokenizer.model."""
        from tokenizers import Tokenizer, models
        d = self.folder("fallback", MISTRAL_DATA / "tokenizer.model.v1")
        Tokenizer(models.WordPiece({"[UNK]": 0, "a": 1}, unk_token="[UNK]")).save(str(d / "tokenizer.json"))
        small = d / "small.jsonl"
        small.write_text("".join(json.dumps({"text": t}) + "\n" for t in self.texts[:50]))
        p = subprocess.run([PACK, "tokenize", small, "-o", d / "ids.jsonl", "--tokenizer", d], capture_output=True,
                           text=True, timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn(f"tokenizer {d}/tokenizer.model: SentencePiece", p.stderr)
        sp = spm.SentencePieceProcessor(model_file=str(d / "tokenizer.model"))
        got = [json.loads(line)["input_ids"] for line in (d / "ids.jsonl").read_text().splitlines()]
        self.assertEqual(got, [[sp.bos_id()] + sp.encode(t) + [sp.eos_id()] for t in self.texts[:50]])

    def test_no_add_special_tokens(self):
        """--no-add-special-tokens drops the BOS, as sentencepiece's encode(text) and Tekkenizer's bos=False do."""
        from mistral_common.tokens.tokenizers.tekken import Tekkenizer
        d = self.folder("plain-v1", MISTRAL_DATA / "tokenizer.model.v1")
        (d / "tekken").mkdir()
        shutil.copy(MISTRAL_DATA / "tekken_240911.json", d / "tekken/tekken.json")
        small = d / "small.jsonl"
        small.write_text("".join(json.dumps({"text": t}) + "\n" for t in self.texts[:50]))
        sp = spm.SentencePieceProcessor(model_file=str(d / "tokenizer.model"))
        tekken = Tekkenizer.from_file(d / "tekken/tekken.json")
        for folder, want in ((d, [sp.encode(t) + [sp.eos_id()] for t in self.texts[:50]]),
                             (d / "tekken", [tekken.encode(t, bos=False, eos=True) for t in self.texts[:50]])):
            p = subprocess.run([PACK, "tokenize", small, "-o", folder / "ids.jsonl", "--tokenizer", folder,
                                "--no-add-special-tokens"], capture_output=True, text=True, timeout=300)
            self.assertEqual(p.returncode, 0, p.stderr)
            got = [json.loads(line)["input_ids"] for line in (folder / "ids.jsonl").read_text().splitlines()]
            self.assertEqual(got, want, folder)

    def packed_documents(self, ids_file, name):
        """ulysses-pack pack of a JSONL of ids, its documents read back from the shards (h5py), sorted."""
        out = self.root / name
        p = subprocess.run([PACK, "pack", ids_file, "-o", out, "--seq-len", "1024", "--valid-fraction", "0"],
                           capture_output=True, text=True, timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr)
        docs = []
        for shard in json.loads((out / "manifest.json").read_text())["shards"]:
            with h5py.File(out / shard["file"]) as f:
                ids, offsets, starts, lengths = (f[k][()] for k in ("input_ids", "doc_offsets", "doc_starts",
                                                                    "seq_lengths"))
            for row in range(len(lengths)):
                edges = [*starts[offsets[row]:offsets[row + 1]], lengths[row]]
                docs += [ids[row, a:b].tolist() for a, b in zip(edges, edges[1:])]
        return sorted(docs)

    def test_chat_recipe_gives_the_tokenizers_own_ids(self):
        """The documented chat recipe (user guide): tools/chat_ids.py encodes each conversation in Python —
        transformers' apply_chat_template(tokenize=True) for a SentencePiece folder whose template markers are special
        tokens, mistral_common's encode_chat_completion for a Tekken file — and ulysses-pack packs those ids: the
        shards hold exactly those documents. Rendering the template to text and tokenizing that here instead encodes
        <s>, [INST] and </s> as plain text (the way every SentencePiece and Tekken reader does), other ids."""
        from mistral_common.protocol.instruct.request import ChatCompletionRequest
        from mistral_common.protocol.instruct.validator import ValidationMode
        from mistral_common.tokens.tokenizers.mistral import MistralTokenizer
        from transformers import LlamaTokenizer
        chats = [[{"role": "user", "content": self.texts[i][:300]},
                  {"role": "assistant", "content": self.texts[i + 1][:300]}] for i in range(0, 100, 2)]
        chats_file = self.root / "chats.jsonl"
        chats_file.write_text("".join(json.dumps({"messages": c}) + "\n" for c in chats), encoding="utf-8")
        hf = LlamaTokenizer(vocab_file=str(MISTRAL_DATA / "mistral_instruct_tokenizer_240323.model.v3"), legacy=False,
                            additional_special_tokens=["[INST]", "[/INST]"])
        hf.chat_template = ("{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}"
                            "[INST] {{ m['content'] }}[/INST]{% else %}{{ m['content'] }}{{ eos_token }}{% endif %}"
                            "{% endfor %}")
        folder = self.root / "chat-sp"
        hf.save_pretrained(folder)
        tekken = MISTRAL_DATA / "tekken_240911.json"
        mistral = MistralTokenizer.from_file(str(tekken), mode=ValidationMode.finetuning)
        sp_want = [list(hf.apply_chat_template(c, tokenize=True)) for c in chats]
        self.assertEqual(sp_want[0][:2], [1, 3])   # <s> [INST] as ids
        for name, args, want in (
                ("sp", [folder], sp_want),
                ("tekken", [tekken, "--mistral-common"],
                 [mistral.encode_chat_completion(ChatCompletionRequest(messages=c)).tokens for c in chats])):
            ids_file = self.root / f"chat-{name}.jsonl"
            with chats_file.open() as stdin, ids_file.open("w") as stdout:
                p = subprocess.run([sys.executable, CHAT_IDS, *map(str, args)], stdin=stdin, stdout=stdout,
                                   stderr=subprocess.PIPE, text=True, timeout=300)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertEqual([json.loads(line)["input_ids"] for line in ids_file.read_text().splitlines()], want)
            self.assertEqual(self.packed_documents(ids_file, f"chat-{name}-packed"), sorted(want))
        rendered = self.root / "rendered.jsonl"   # the text path, which a tokenizer.json reads right
        rendered.write_text("".join(json.dumps({"text": hf.apply_chat_template(c, tokenize=False)}) + "\n"
                                    for c in chats), encoding="utf-8")
        p = subprocess.run([PACK, "tokenize", rendered, "-o", self.root / "rendered-ids.jsonl", "--tokenizer", folder,
                            "--no-add-special-tokens", "--no-append-eos"], capture_output=True, text=True, timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr)
        as_text = [json.loads(line)["input_ids"]
                   for line in (self.root / "rendered-ids.jsonl").read_text().splitlines()]
        self.assertTrue(all(t != w and 3 not in t for t, w in zip(as_text, sp_want)))   # [INST] never an id there

    def check_tekken(self, name):
        from mistral_common.tokens.tokenizers.tekken import Tekkenizer
        d = self.root / name
        d.mkdir()
        shutil.copy(MISTRAL_DATA / name, d / "tekken.json")
        tekken = Tekkenizer.from_file(d / "tekken.json")
        out = d / "ids.jsonl"
        p = subprocess.run([PACK, "tokenize", self.text_file, "-o", out, "--tokenizer", d, "--threads", "4"],
                           capture_output=True, text=True, timeout=900)
        self.assertEqual(p.returncode, 0, p.stderr[-3000:])
        got = [json.loads(line)["input_ids"] for line in out.read_text().splitlines()]
        want = [tekken.encode(text, bos=True, eos=True) for text in self.texts]
        bad = [i for i, (g, w) in enumerate(zip(got, want)) if g != w]
        self.assertEqual(len(got), len(want))
        self.assertEqual(bad, [], f"{len(bad)} documents differ, the first {self.texts[bad[0]][:200]!r}: "
                                  f"{got[bad[0]][:30]} vs {want[bad[0]][:30]}" if bad else "")

    def test_tekken_240718(self):
        self.check_tekken("tekken_240718.json")

    def test_tekken_240911(self):
        self.check_tekken("tekken_240911.json")


if __name__ == "__main__":
    unittest.main(verbosity=2)
