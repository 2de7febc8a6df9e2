"""ulysses-pack's tokenizer against the `tokenizers` package (the Rust library transformers' fast tokenizers are),
on the corpus of text_corpus.py (~3 MB of prose, code, CJK, emoji, combining marks, digit and whitespace
runs, special-token strings) with its three byte-level BPE files trained by `tokenizers` itself (Llama 3-style with
ignore_merges and a BOS template, Qwen2-style with NFC, GPT-2-style). For each: `ulysses-pack tokenize` (4 threads,
and 1 thread) gives, for every document, the ids of `Tokenizer.encode(text).ids` followed by the EOS; packing the
text (--tokenizer) gives the same shards (h5py) as packing those reference ids; bad inputs end with one line and
exit 2.

usage: test_tokenizer_vs_hf.py ULYSSES_PACK SAMPLE_JSONL_GZ
"""
import json
import pathlib
import struct
import subprocess
import sys
import tempfile
import unittest

import h5py
from tokenizers import Tokenizer, models

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from text_corpus import CorpusCase, prose, train  # noqa: E402

PACK, SAMPLE = sys.argv[1:3]
del sys.argv[1:3]

def run(*args, code=0):
    p = subprocess.run([PACK, *map(str, args)], capture_output=True, text=True, timeout=600)
    assert p.returncode == code, f"exit {p.returncode} (wanted {code}): {p.stderr[-3000:]}"
    return p


class VsTokenizers(CorpusCase):
    SAMPLE = SAMPLE

    def reference(self, tok, eos):
        out = []
        for enc in tok.encode_batch(self.texts):
            ids = list(enc.ids)
            out.append(ids if ids and ids[-1] == eos else ids + [eos])
        return out

    def check_kind(self, kind):
        tok, eos = train(kind, self.texts, self.root / kind)
        want = self.reference(tok, eos)
        self.assertGreater(sum(map(len, want)), 500_000)   # the ~3 MB sample: ~0.9M ids
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

    def test_plain_text_files(self):
        """.txt inputs: one document per file, or per block of non-blank lines (joined with \\n) with
        --text-split blank-line; the ids are tokenizers' for each document's text."""
        tok, eos = train("gpt2", self.texts, self.root / "gpt2-text")
        files = []
        for i, text in enumerate(self.texts[:300:30]):
            files.append(self.root / f"doc-{i}.txt")
            files[-1].write_text(text, encoding="utf-8", newline="")
        (self.root / "empty.txt").write_bytes(b"")   # no document
        files.insert(3, self.root / "empty.txt")
        out = self.root / "per-file.jsonl"
        run("tokenize", *files, "-o", out, "--tokenizer", self.root / "gpt2-text")
        want = [tok.encode(f.read_bytes().decode("utf-8")).ids + [eos] for f in files if f.stat().st_size > 0]
        got = [json.loads(line)["input_ids"] for line in out.read_text().splitlines()]
        self.assertEqual(got, [w[:-1] if len(w) > 1 and w[-2] == eos else w for w in want])
        blocks_file = self.root / "blocks.txt"
        blocks_file.write_text("\n\n \t\n".join(self.texts[:400]), encoding="utf-8", newline="")
        blocks, current = [], []
        for line in blocks_file.read_bytes().decode("utf-8").split("\n"):
            if line.strip(" \t\r") == "":
                if current:
                    blocks.append("\n".join(current))
                current = []
            else:
                current.append(line)
        if current:
            blocks.append("\n".join(current))
        out = self.root / "per-block.jsonl"
        run("tokenize", blocks_file, "-o", out, "--tokenizer", self.root / "gpt2-text", "--text-split", "blank-line",
            "--no-append-eos", "--threads", 3)
        got = [json.loads(line)["input_ids"] for line in out.read_text().splitlines()]
        self.assertEqual(len(got), len(blocks))
        self.assertEqual(got, [e.ids for e in tok.encode_batch(blocks)])
        run("pack", blocks_file, "-o", self.root / "packed-blocks", "--tokenizer", self.root / "gpt2-text",
            "--text-split", "blank-line", "--seq-len", 1024)
        manifest = json.loads((self.root / "packed-blocks/manifest.json").read_text())
        self.assertEqual((manifest["inputs"][0]["format"], manifest["inputs"][0]["documents"]), ("text", len(blocks)))
        self.assertEqual(manifest["inputs"][0]["tokens"], sum(len(g) + 1 for g in got))   # each with its EOS

    def test_chat_template_rendered_text(self):
        """The documented path for chat data: transformers renders the model's chat template
        (apply_chat_template(tokenize=False)), ulysses-pack tokenizes the text with --no-add-special-tokens — the ids
        of apply_chat_template(tokenize=True), which encodes with add_special_tokens=False. Without the flag the
        template's BOS would come twice."""
        from transformers import PreTrainedTokenizerFast
        tok, eos = train("llama3", self.texts, self.root / "chat")
        template = ("{{ bos_token }}{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] | trim "
                    "+ '<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
        hf = PreTrainedTokenizerFast(tokenizer_file=str(self.root / "chat/tokenizer.json"), bos_token="<|begin_of_text|>",
                                     eos_token="<|end_of_text|>", chat_template=template)
        chats = [[{"role": "system", "content": "You are terse."}, {"role": "user", "content": self.texts[i]},
                  {"role": "assistant", "content": self.texts[i + 1]}] for i in range(0, min(2000, len(self.texts) - 1), 2)]
        rendered = self.root / "chats.jsonl"
        rendered.write_text("".join(json.dumps({"text": hf.apply_chat_template(c, tokenize=False)}) + "\n"
                                    for c in chats), encoding="utf-8")
        want = [list(hf.apply_chat_template(c, tokenize=True)) for c in chats]
        self.assertEqual(want[0][:2], [tok.token_to_id("<|begin_of_text|>"), tok.token_to_id("<|im_start|>")])
        out = self.root / "chats-ids.jsonl"
        run("tokenize", rendered, "-o", out, "--tokenizer", self.root / "chat", "--no-add-special-tokens",
            "--no-append-eos")
        got = [json.loads(line)["input_ids"] for line in out.read_text().splitlines()]
        self.assertEqual(got, want)
        run("tokenize", rendered, "-o", out, "--tokenizer", self.root / "chat", "--no-append-eos", "--overwrite")
        doubled = [json.loads(line)["input_ids"] for line in out.read_text().splitlines()]
        self.assertEqual(doubled, [[w[0]] + w for w in want])   # the tokenizer's own BOS, then the template's
        p = run("pack", rendered, "-o", self.root / "chat-packed", "--tokenizer", self.root / "chat",
                "--no-add-special-tokens", "--seq-len", 4096)
        self.assertIn("no special token added (--no-add-special-tokens)", p.stderr)   # the banner says what runs
        self.assertIn(" appended to each", p.stderr)
        manifest = json.loads((self.root / "chat-packed/manifest.json").read_text())
        self.assertEqual((manifest["tokenizer"]["add_special_tokens"], manifest["tokenizer"]["eos_id"]), (False, eos))
        self.assertEqual(manifest["inputs"][0]["tokens"], sum(len(w) + 1 for w in want))

    def test_qwen2_style_nfc(self):
        self.check_kind("qwen2")

    def test_gpt2_style(self):
        self.check_kind("gpt2")

    def check_pack_equals_ids(self, kind, want):
        """Packing the text with --tokenizer writes the shards that packing the reference ids writes, byte for byte
        (their XXH3) and array by array (h5py)."""
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
        self.assertEqual([(s["file"], s["xxh3"]) for s in text_manifest["shards"]],
                         [(s["file"], s["xxh3"]) for s in ids_manifest["shards"]])   # byte-identical files
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
        cls.tok, _ = train("llama3", ["hello world"] * 50 + prose(SAMPLE)[:200], cls.root / "tok")

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

    def test_no_partial_output_and_no_id_inputs(self):
        good = self.root / "good.jsonl"
        good.write_text('{"text": "hello"}\n')
        broken = self.root / "broken.jsonl.gz"
        broken.write_bytes(b"\x1f\x8b\x08\x00garbage")   # a gzip header, then nothing a gzip stream holds
        out = self.root / "partial.jsonl"
        p = run("tokenize", good, broken, "-o", out, "--tokenizer", self.root / "tok", code=2)
        self.assertIn(str(broken), p.stderr)
        self.assertFalse(out.exists())
        self.assertFalse(pathlib.Path(str(out) + ".tmp").exists())
        llmc = self.root / "tokens.bin"
        llmc.write_bytes(struct.pack("<256i", 20240520, 1, 0, *([0] * 253)))
        self.one_line(["tokenize", llmc, "-o", out, "--tokenizer", self.root / "tok"],
                      f"input {llmc} holds token ids, not text")

    def test_plain_text_needs_the_tokenizer(self):
        f = self.root / "notes.txt"
        f.write_text("some text\n")
        self.one_line(["pack", f, "-o", self.root / "p4", "--seq-len", 1024], f"{f} is plain text, which needs the model's tokenizer")

    def test_missing_text_key(self):
        f = self.root / "no-text.jsonl"
        f.write_text('{"content": "x"}\n')
        self.one_line(["tokenize", f, "-o", self.root / "o.jsonl", "--tokenizer", self.root / "tok"],
                      f'{f}:1: no text (a JSON string) under "text" (--text-key)')

    def test_a_conversation_under_the_text_key_points_to_the_chat_recipe(self):
        f = self.root / "chats.jsonl"
        f.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}]}) + "\n")
        self.one_line(["pack", f, "-o", self.root / "p5", "--seq-len", 1024, "--tokenizer", self.root / "tok",
                       "--text-key", "messages"], '"messages" holds a conversation')

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
                      f"{sp}/tokenizer.model: not a SentencePiece model")
        self.one_line(["tokenize", f, "-o", self.root / "o4.jsonl", "--tokenizer", self.root],
                      "none of tokenizer.json, tekken.json, tokenizer.model")

    def test_binary_inputs_are_not_text(self):
        self.one_line(["pack", SAMPLE, "-o", self.root / "p3", "--seq-len", 1024, "--tokenizer", self.root / "tok",
                       "--format", "flat", "--flat-dtype", "uint16"], "but --tokenizer reads text (JSONL, plain or parquet)")


if __name__ == "__main__":
    unittest.main(verbosity=2)
