"""Seed corpora for the fuzz targets, from the test fixtures: one folder of valid inputs per target, each in the
layout its harness reads (a selector byte first where the harness has one). libFuzzer mutates from these.

usage: make_seeds.py TARGET OUT_DIR ULYSSES_PACK
"""
import gzip
import json
import pathlib
import shutil
import struct
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "datasets/sample/licenses.jsonl.gz"
CONFIG = ROOT / "datasets/sample/tiny-llama/config.json"
sys.path.insert(0, str(ROOT / "tests/pack/cli"))


def safetensors():
    h = json.dumps({"__metadata__": {"format": "pt"},
                    "a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
                    "b": {"dtype": "BF16", "shape": [3], "data_offsets": [16, 22]},
                    "c": {"dtype": "F16", "shape": [0], "data_offsets": [22, 22]}}).encode()
    h += b" " * (-len(h) % 8)
    return {"valid": struct.pack("<Q", len(h)) + h + bytes(range(22))}


def checkpoint_manifest():
    m = {"format": "ulysses-checkpoint", "format_version": 1, "step": 20, "layout": {"world": 4, "sp": 2, "dp": 2},
         "architecture": "LlamaForCausalLM", "optimizer_layout": "replicated", "consolidated": False,
         "files": [{"file": "model.safetensors", "bytes": 10, "xxh3": "0123456789abcdef"}]}
    return {"replicated": json.dumps(m).encode()}


def packed(pack, tmp):
    out = tmp / "packed"
    lines = gzip.open(SAMPLE, "rt").read().splitlines()[:40]
    (tmp / "in.jsonl").write_text("\n".join(lines) + "\n")
    subprocess.run(list(map(str, [pack, "pack", tmp / "in.jsonl", "-o", out, "--seq-len", 256,
                                  "--valid-fraction", 0.1])), check=True, capture_output=True)
    return out


def dataset_manifest(pack, tmp):
    return {"sample": (packed(pack, tmp) / "manifest.json").read_bytes()}


def shard(pack, tmp):
    return {s.name: s.read_bytes() for s in sorted(packed(pack, tmp).glob("*.h5"))}


def hf_config():
    return {"tiny-llama": CONFIG.read_bytes()}


def jsonl():
    lines = gzip.open(SAMPLE, "rb").read().splitlines()[:20]
    plain = b"\n".join(lines) + b"\n"
    masked = b"".join(json.dumps({"input_ids": [1, 2, 3], "loss_mask": [0, 1, 1]}).encode() + b"\n" for _ in range(3))
    seeds = {"plain": b"\x00" + plain, "gzip": b"\x01" + gzip.compress(plain), "masked": b"\x04" + masked}
    zstd = shutil.which("zstd")   # the zstd command, where installed
    if zstd:
        seeds["zstd"] = b"\x02" + subprocess.run([zstd, "-q", "-c"], input=plain, capture_output=True, check=True).stdout
    return seeds


def megatron(tmp):
    from reference_writers import MegatronBuilder
    b = MegatronBuilder(tmp / "m.bin")
    b.add_document([5, 6, 7, 8, 9], [2, 3])
    b.add_item([1, 2])
    b.end_document()
    b.finalize(tmp / "m.idx")
    idx, bin_ = (tmp / "m.idx").read_bytes(), (tmp / "m.bin").read_bytes()
    return {"two-documents": struct.pack("<H", len(idx)) + idx + bin_}


def llmc(tmp):
    from reference_writers import write_datafile
    out = {}
    for desc in ("gpt-2", "llama-3"):
        write_datafile(str(tmp / desc), [50256, 1, 2, 3, 50256, 4, 5], desc)
        out[desc] = (tmp / desc).read_bytes()
    return out


def flat():
    tokens = [1, 2, 3, 0, 4, 5, 0, 6]
    return {"u16-eos0": b"\x02" + struct.pack(f"<{len(tokens)}H", *tokens),
            "u32-eos0": b"\x03" + struct.pack(f"<{len(tokens)}I", *tokens)}


def tokenizer(tmp):
    """Tokenizer files trained by `tokenizers` on the sample (mode 0), texts (mode 1), a cut Tekken file (mode 2)."""
    import importlib.util
    MISTRAL_DATA = pathlib.Path(importlib.util.find_spec("mistral_common").submodule_search_locations[0]) / "data"
    sys.path.insert(0, str(ROOT / "tests/tokenize"))
    from text_corpus import prose, train
    texts = prose(SAMPLE)[:40]
    seeds = {}
    for kind in ("llama3", "qwen2", "gpt2"):
        train(kind, texts, tmp / kind, vocab_size=400)
        seeds[kind] = b"\x00" + (tmp / kind / "tokenizer.json").read_bytes()
    tekken = json.loads((MISTRAL_DATA / "tekken_240718.json").read_text())   # 600 tokens of Mistral's own file
    tekken["vocab"] = tekken["vocab"][:600]
    tekken["config"].update(default_vocab_size=1600, default_num_special_tokens=1000)
    seeds["tekken"] = b"\x02" + json.dumps(tekken).encode()
    seeds["text"] = b"\x01" + "Hello <|end|> it's 12345 café 日本語 👍🏽 e\u0301  \t\r\n".encode()
    seeds["prose"] = b"\x01" + texts[0].encode()
    return seeds


def parquet(tmp):
    """Files written by pyarrow: ids as list<int32> with a mask (mode 1), large_list<int64> and fixed-size lists over
    several row groups and codecs (mode 0), a text column with a null (mode 4)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    def written(table, **options):
        pq.write_table(table, tmp / "seed.parquet", **options)
        return (tmp / "seed.parquet").read_bytes()

    docs = [json.loads(line)["input_ids"][:64] for line in gzip.open(SAMPLE, "rt") if line.strip()][:30]
    masks = [[i % 2 for i in range(len(d))] for d in docs]
    return {
        "masked": b"\x01" + written(pa.table({"input_ids": pa.array(docs, pa.list_(pa.int32())),
                                              "loss_mask": pa.array(masks, pa.list_(pa.int8()))}), row_group_size=10),
        "large-zstd": b"\x00" + written(pa.table({"input_ids": pa.array(docs, pa.large_list(pa.int64()))}),
                                        compression="zstd", row_group_size=7),
        "fixed-plain": b"\x00" + written(pa.table({"input_ids": pa.array([d[:8] for d in docs], pa.list_(pa.uint16(), 8))}),
                                         compression="none", use_dictionary=False),
        "text": b"\x04" + written(pa.table({"text": ["hello", None, "caf\u00e9 \u65e5\u672c", ""] * 5}),
                                  row_group_size=6),
    }


def toml_config():
    return {"train": b'steps = 20\nlr = 3e-4\noutput = "runs/x"\noverwrite = true\nlengths = [1, 2]\n',
            "synonym": b"learning_rate = 1e-3\n"}


def main():
    target, out, pack = sys.argv[1], pathlib.Path(sys.argv[2]), sys.argv[3]
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as t:
        tmp = pathlib.Path(t)
        makers = {"safetensors": safetensors, "checkpoint_manifest": checkpoint_manifest,
                  "dataset_manifest": lambda: dataset_manifest(pack, tmp), "shard": lambda: shard(pack, tmp),
                  "hf_config": hf_config, "jsonl": jsonl, "megatron": lambda: megatron(tmp),
                  "llmc": lambda: llmc(tmp), "flat": flat, "toml_config": toml_config,
                  "tokenizer": lambda: tokenizer(tmp), "parquet": lambda: parquet(tmp)}
        for name, data in makers[target]().items():
            (out / f"seed-{name}").write_bytes(data)


if __name__ == "__main__":
    main()
