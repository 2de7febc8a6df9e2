"""Writes a copy of src/arch/architectures.cpp with one more row: "fakellama" / FakeLlamaForCausalLM, the
llama row under another name. The test programs built from that copy show that a row in that one file is
all a new architecture needs (docs/architecture.md, "Adding an architecture").

usage: add_fake_architecture.py ARCHITECTURES_CPP OUT_CPP
"""
import re
import sys

src, out = sys.argv[1:3]
text = open(src).read()
rows = re.findall(r'^ *\{"llama", *"LlamaForCausalLM",.*\},\n', text, flags=re.M)
if len(rows) != 1:
    sys.exit(f"{src}: expected one llama row, found {len(rows)}: the table's layout changed, update this script")
fake = rows[0].replace('"llama",', '"fakellama",').replace('"LlamaForCausalLM",', '"FakeLlamaForCausalLM",')
open(out, "w").write(text.replace(rows[0], rows[0] + fake))
