"""ulysses-pack's tokenizer against the `tokenizers` package (the Rust library transformers' fast tokenizers are),
on a corpus of more than 10 MB: English prose (the sample's license texts), this repository's own source code,
and generated text full of what tokenizers get wrong — CJK, emoji and ZWJ sequences, combining marks, digit runs,
whitespace runs (tabs, CR LF, NBSP, ideographic space, U+2028), contractions in any case, special-token strings
inside the text. Three byte-level BPE tokenizer.json files are trained here by `tokenizers` itself:

  llama3  Split(Llama 3's regex, isolated) + ByteLevel, ignore_merges, <|begin_of_text|> by the template,
          EOS <|end_of_text|> from tokenizer_config.json
  qwen2   NFC normalizer + Split(Qwen2's regex) + ByteLevel, ByteLevel post-processor, EOS from
          generation_config.json
  gpt2    ByteLevel with its own regex only

For each: `ulysses-pack tokenize` (4 threads, and 1 thread) gives, for every document, the ids of
`Tokenizer.encode(text).ids` followed by the EOS; packing the text (--tokenizer) gives the same shards (h5py) as
packing those reference ids; bad inputs end with one line and exit 2.

usage: test_tokenizer_vs_hf.py ULYSSES_PACK SAMPLE_JSONL_GZ
"""
import gzip
import json
import pathlib
import random
import subprocess
import sys
import tempfile
import unittest

import h5py
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

PACK, SAMPLE = sys.argv[1:3]
del sys.argv[1:3]
ROOT = pathlib.Path(__file__).resolve().parents[2]

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
          r"|\s+(?!\S)|\s+")
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)"
         r"|\s+")
SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|im_start|>", "<|im_end|>"]


def prose():
    docs = []
    with gzip.open(SAMPLE, "rt") as f:
        for line in f:
            ids = json.loads(line)["input_ids"]
            docs.append(bytes(i for i in ids if i < 256).decode("utf-8"))
    return docs


def code():
    files = sorted(p for p in (ROOT / "src").rglob("*") if p.suffix in (".cpp", ".hpp"))
    files += sorted((ROOT / "tests").rglob("*.py")) + sorted((ROOT / "slurm").glob("*")) + sorted((ROOT / "docs").glob("*.md"))
    return [p.read_text(encoding="utf-8") for p in files]


def generated(rng, n):
    cjk = [chr(c) for c in range(0x4E00, 0x4E00 + 3000)] + [chr(c) for c in range(0x3041, 0x3097)] + \
          [chr(c) for c in range(0xAC00, 0xAC00 + 500)]
    emoji = ["😀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "❤️", "🇫🇷", "🧑🏿‍💻", "✨"]
    marks = ["e\u0301", "a\u0308", "n\u0303", "\u1100\u1161", "o\u0302\u0323", "\u0915\u094d\u0937", "A\u030a"]
    spaces = [" ", "  ", "\t", "\n", "\r\n", "\n\n\n", "\u00a0", "\u3000", "\u2028", " \t ", "      "]
    words = ["the", "The", "THE", "it's", "IT'S", "we'll", "They'RE", "don't", "naïve", "café", "straße", "İstanbul",
             "Ελληνικά", "русский", "עברית", "العربية", "हिन्दी", "ไทย", "x86_64", "foo_bar", "CamelCase"]
    numbers = ["0", "7", "42", "1234567", "3.14159", "1,000,000", "٣٤٥", "２０２６", "½", "Ⅻ"]
    code_bits = ["{", "}", "->", "::", "==", "!=", "/*", "*/", "#include", "std::vector<int>", "$x", "@@", "...", "'''"]
    pools = [cjk, emoji, marks, words, numbers, code_bits, SPECIALS]
    docs = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(5, 400)):
            pool = rng.choice(pools)
            parts.append("".join(rng.choice(pool) for _ in range(rng.randint(1, 6 if pool is cjk else 2))))
            parts.append(rng.choice(spaces) if rng.random() < 0.7 else "")
        docs.append("".join(parts))
    return docs


def corpus():
    rng = random.Random(1234)
    docs = prose() + code()
    while sum(len(d.encode()) for d in docs) < 10_500_000:
        docs += generated(rng, 500)
        docs += [d.upper() if rng.random() < 0.5 else d[::-1] for d in prose()[:50]]
    docs += ["", " ", "\n", "<|end_of_text|>", "a<|begin_of_text|>b", "<|im_start|>user\nhi<|im_end|>"]
    return docs


def train(kind, texts, folder):
    folder.mkdir()
    tok = Tokenizer(models.BPE(ignore_merges=kind == "llama3"))
    if kind == "qwen2":
        tok.normalizer = normalizers.NFC()
    if kind == "gpt2":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    else:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3 if kind == "llama3" else QWEN2), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=6000, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts[:3000], trainer)
    if kind == "llama3":
        tok.post_processor = processors.TemplateProcessing(
            single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>", tok.token_to_id("<|begin_of_text|>"))])
        (folder / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|end_of_text|>"}))
        eos = tok.token_to_id("<|end_of_text|>")
    elif kind == "qwen2":
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
        eos = tok.token_to_id("<|im_end|>")
        (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": [eos, 0]}))
    else:
        (folder / "tokenizer_config.json").write_text(json.dumps({"eos_token": {"content": "<|end_of_text|>"}}))
        eos = tok.token_to_id("<|end_of_text|>")
    tok.save(str(folder / "tokenizer.json"))
    return Tokenizer.from_file(str(folder / "tokenizer.json")), eos


def run(*args, code=0):
    p = subprocess.run([PACK, *map(str, args)], capture_output=True, text=True, timeout=600)
    assert p.returncode == code, f"exit {p.returncode} (wanted {code}): {p.stderr[-3000:]}"
    return p


class VsTokenizers(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.root = pathlib.Path(cls.tmp.name)
        cls.texts = corpus()
        cls.text_file = cls.root / "text.jsonl"
        with open(cls.text_file, "w", encoding="utf-8") as f:
            for t in cls.texts:
                f.write(json.dumps({"text": t}, ensure_ascii=bool(len(t) % 2)) + "\n")   # escaped and raw UTF-8
        print(f"corpus: {len(cls.texts)} documents, {cls.text_file.stat().st_size / 1e6:.1f} MB", flush=True)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def reference(self, tok, eos):
        out = []
        for enc in tok.encode_batch(self.texts):
            ids = list(enc.ids)
            out.append(ids if ids and ids[-1] == eos else ids + [eos])
        return out

    def check_kind(self, kind):
        tok, eos = train(kind, self.texts, self.root / kind)
        want = self.reference(tok, eos)
        self.assertGreater(sum(map(len, want)), 1_000_000)
        for threads in (4, 1):
            out = self.root / f"{kind}-{threads}.jsonl"
            run("tokenize", self.text_file, "-o", out, "--tokenizer", self.root / kind, "--threads", threads)
            got = [json.loads(line)["input_ids"] for line in out.read_text().splitlines()]
            self.assertEqual(len(got), len(want))
            bad = [i for i, (g, w) in enumerate(zip(got, want)) if g != w]
            self.assertEqual(bad, [], f"{kind}, {threads} threads: {len(bad)} documents differ, the first "
                                      f"{self.texts[bad[0]][:200]!r}: ours {got[bad[0]][:40]} vs {want[bad[0]][:40]}"
                             if bad else "")
        return want

    def test_llama3_style(self):
        want = self.check_kind("llama3")
        self.check_pack_equals_ids("llama3", want)

    def test_qwen2_style_nfc(self):
        self.check_kind("qwen2")

    def test_gpt2_style(self):
        self.check_kind("gpt2")

    def check_pack_equals_ids(self, kind, want):
        """Packing the text with --tokenizer writes the shards that packing the reference ids writes."""
        ids_file = self.root / f"{kind}-ids.jsonl"
        ids_file.write_text("".join(json.dumps({"input_ids": ids}) + "\n" for ids in want))
        common = ["--seq-len", 4096, "--sp", 4, "--vocab-size", 6000, "--valid-fraction", 0.01, "--threads", 2]
        run("pack", self.text_file, "-o", self.root / "from-text", "--tokenizer", self.root / kind, *common)
        run("pack", ids_file, "-o", self.root / "from-ids", *common)
        text_manifest = json.loads((self.root / "from-text/manifest.json").read_text())
        ids_manifest = json.loads((self.root / "from-ids/manifest.json").read_text())
        self.assertEqual(text_manifest["tokenizer"]["eos_id"], want[0][-1])
        self.assertEqual(len(text_manifest["tokenizer"]["xxh3"]), 16)
        self.assertEqual(text_manifest["stats"], ids_manifest["stats"])
        self.assertEqual([s["file"] for s in text_manifest["shards"]], [s["file"] for s in ids_manifest["shards"]])
        for shard in text_manifest["shards"]:
            with h5py.File(self.root / "from-text" / shard["file"]) as a, h5py.File(self.root / "from-ids" / shard["file"]) as b:
                self.assertEqual(sorted(a.keys()), sorted(b.keys()))
                for key in a.keys():
                    self.assertTrue((a[key][()] == b[key][()]).all(), f"{shard['file']}: {key} differs")


class BadInputs(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.root = pathlib.Path(cls.tmp.name)
        cls.tok, _ = train("llama3", ["hello world"] * 50 + prose()[:200], cls.root / "tok")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def one_line(self, args, text):
        """Exit 2 with one error line (beside the log's plain lines) holding text and a hint."""
        p = run(*args, code=2)
        errors = [line for line in p.stderr.splitlines() if line.startswith("error:")]
        self.assertEqual(len(errors), 1, p.stderr)
        self.assertIn(text, errors[0])
        self.assertIn("HINT", errors[0])
        return errors[0]

    def test_invalid_utf8_names_line_and_byte(self):
        f = self.root / "bad-utf8.jsonl"
        f.write_bytes(b'{"text": "fine"}\n{"text": "caf\xc3"}\n')
        out = self.root / "never.jsonl"
        self.one_line(["tokenize", f, "-o", out, "--tokenizer", self.root / "tok"], f"{f}:2:14: byte 14 (0xC3) is not valid UTF-8")
        self.assertFalse(out.exists())
        self.assertFalse(pathlib.Path(str(out) + ".tmp").exists())
        self.one_line(["pack", f, "-o", self.root / "p", "--seq-len", 1024, "--tokenizer", self.root / "tok"],
                      "is not valid UTF-8")
        self.assertFalse((self.root / "p").exists())

    def test_missing_text_key(self):
        f = self.root / "no-text.jsonl"
        f.write_text('{"content": "x"}\n')
        self.one_line(["tokenize", f, "-o", self.root / "o.jsonl", "--tokenizer", self.root / "tok"],
                      f'{f}:1: no text (a JSON string) under "text" (--text-key)')

    def test_vocabulary_larger_than_the_model(self):
        f = self.root / "ok.jsonl"
        f.write_text('{"text": "hello"}\n')
        self.one_line(["pack", f, "-o", self.root / "p2", "--seq-len", 1024, "--tokenizer", self.root / "tok",
                       "--vocab-size", 100], "but the model's vocab_size is 100")

    def test_unsupported_tokenizers(self):
        f = self.root / "ok2.jsonl"
        f.write_text('{"text": "hello"}\n')
        wordpiece = self.root / "wordpiece"
        wordpiece.mkdir()
        Tokenizer(models.WordPiece({"[UNK]": 0, "a": 1}, unk_token="[UNK]")).save(str(wordpiece / "tokenizer.json"))
        self.one_line(["tokenize", f, "-o", self.root / "o2.jsonl", "--tokenizer", wordpiece],
                      'model "WordPiece" is not supported')
        sp = self.root / "sentencepiece"
        sp.mkdir()
        (sp / "tokenizer.model").write_bytes(b"\x00")
        self.one_line(["tokenize", f, "-o", self.root / "o3.jsonl", "--tokenizer", sp],
                      "only a SentencePiece tokenizer.model, which is not supported yet")

    def test_binary_inputs_are_not_text(self):
        self.one_line(["pack", SAMPLE, "-o", self.root / "p3", "--seq-len", 1024, "--tokenizer", self.root / "tok",
                       "--format", "flat", "--flat-dtype", "uint16"], "but --tokenizer reads JSONL text")


if __name__ == "__main__":
    unittest.main(verbosity=2)
