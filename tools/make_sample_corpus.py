#!/usr/bin/env python3
"""Builds datasets/sample/: real English text (the license texts Debian ships in
/usr/share/common-licenses), tokenized offline with a byte-level tokenizer:

  token id = UTF-8 byte (0..255), 256 = <bos>, 257 = <eos>, 258 = <pad>;  vocab_size 320 (tiny-llama.json)

One document per paragraph (blank-line separated) of at least 40 bytes, each <bos> bytes <eos>. Written as
JSONL ({"input_ids": [...]}) compressed with gzip at a fixed mtime, so re-running gives identical bytes.
"""
import gzip
import io
import json
import pathlib
import sys

BOS, EOS = 256, 257
LICENSES = ["GPL-3", "LGPL-3", "Apache-2.0", "MPL-2.0", "Artistic"]


def paragraphs(text):
    for block in text.split("\n\n"):
        block = " ".join(block.split())
        if len(block) >= 40:
            yield block


def main(out_dir):
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    docs = []
    for name in LICENSES:
        text = pathlib.Path("/usr/share/common-licenses", name).read_text(encoding="utf-8", errors="replace")
        docs += [[BOS] + list(p.encode("utf-8")) + [EOS] for p in paragraphs(text)]
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0, filename="") as gz:
        for ids in docs:
            gz.write((json.dumps({"input_ids": ids}, separators=(",", ":")) + "\n").encode())
    (out / "licenses.jsonl.gz").write_bytes(buf.getvalue())
    lengths = sorted(len(d) for d in docs)
    print(f"{len(docs)} documents, {sum(lengths)} tokens, lengths {lengths[0]}..{lengths[-1]} "
          f"(median {lengths[len(lengths) // 2]})")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "datasets/sample")
