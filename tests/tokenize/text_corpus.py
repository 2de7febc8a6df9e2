"""Text for the tokenizer's tests and benchmark (tests/tokenize, tools/bench/tokenize_bench.py), and byte-level BPE
tokenizer.json files trained on it by the `tokenizers` package itself:

  corpus(sample, min_bytes)  English prose (the sample's license texts, decoded from their byte ids), this
                             repository's own source code and docs, and generated text full of what tokenizers
                             get wrong: CJK, emoji and ZWJ sequences, combining marks, digit runs, whitespace runs
                             (tabs, CR LF, NBSP, ideographic space, U+2028), contractions in any case, special-token
                             strings; seeded, at least min_bytes of UTF-8
  train(kind, texts, folder) "llama3": Split(Llama 3's regex) + ByteLevel, ignore_merges, <|begin_of_text|> by the
                             template, EOS <|end_of_text|> in tokenizer_config.json; "qwen2": NFC + Split(Qwen2's
                             regex) + ByteLevel, ByteLevel post-processor, EOS <|im_end|> in generation_config.json;
                             "gpt2": ByteLevel with its own regex. Returns (the Tokenizer as saved, the EOS id).
  CorpusCase                 a TestCase whose class holds root (a temporary folder), texts (the corpus) and
                             text_file (root/text.jsonl, {"text": …} per line, JSON-escaped and raw UTF-8 alike)
"""
import gzip
import json
import pathlib
import random
import tempfile
import unittest

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

ROOT = pathlib.Path(__file__).resolve().parents[2]
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
          r"|\s+(?!\S)|\s+")
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)"
         r"|\s+")
SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|im_start|>", "<|im_end|>"]


def prose(sample):
    docs = []
    with gzip.open(sample, "rt") as f:
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


def corpus(sample, min_bytes):
    rng = random.Random(1234)
    english = prose(sample)
    docs = english + code()
    size = sum(len(d.encode()) for d in docs)
    while size < min_bytes:
        more = generated(rng, 500) + [d.upper() if rng.random() < 0.5 else d[::-1] for d in english[:50]]
        docs += more
        size += sum(len(d.encode()) for d in more)
    docs += ["", " ", "\n", "<|end_of_text|>", "a<|begin_of_text|>b", "<|im_start|>user\nhi<|im_end|>"]
    return docs


def train(kind, texts, folder, vocab_size=6000):
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
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS, show_progress=False,
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


class CorpusCase(unittest.TestCase):
    SAMPLE = None   # the sample's licenses.jsonl.gz, set by the test
    # The tests' fixed sample of what tokenizers get wrong: the sample's prose, this repository's code and docs, and
    # one seeded round of generated text (500 documents and 50 upper-cased or reversed ones: every pool above), ~3 MB;
    # bulk text (10 MB and more) is tools/bench/tokenize_bench.py's
    MIN_BYTES = 3_000_000

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.root = pathlib.Path(cls.tmp.name)
        cls.texts = corpus(cls.SAMPLE, cls.MIN_BYTES)
        cls.text_file = cls.root / "text.jsonl"
        with open(cls.text_file, "w", encoding="utf-8") as f:
            for t in cls.texts:
                f.write(json.dumps({"text": t}, ensure_ascii=bool(len(t) % 2)) + "\n")
        print(f"corpus: {len(cls.texts)} documents, {cls.text_file.stat().st_size / 1e6:.1f} MB", flush=True)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()
