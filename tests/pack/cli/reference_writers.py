"""Input fixtures written the way their own projects write them, so the readers are tested against the
producers, not against our reading of the formats:

- MegatronBuilder follows Megatron-LM's megatron/core/datasets/indexed_dataset.py: IndexedDatasetBuilder
  (add_item / add_document / end_document / finalize) and _IndexWriter (header "MMIDIDX\\x00\\x00", version
  1, dtype code, sequence count, document count, int32 sequence lengths, int64 byte pointers, int64
  document indices starting at 0), with its DType codes.
- write_datafile follows llm.c's dev/data/data_common.py: a 256-int32 header (magic, version, token count)
  then the tokens, uint16 for "gpt-2" (20240520, v1) and uint32 for "llama-3" (20240801, v7); its
  tokenizer scripts (fineweb.py) put the end-of-text token *before* each document.
"""
import struct

import numpy as np

# Megatron's DType enum: code -> numpy type
MEGATRON_DTYPE_CODES = {np.uint8: 1, np.int8: 2, np.int16: 3, np.int32: 4, np.int64: 5, np.float64: 6,
                        np.float32: 7, np.uint16: 8}


class MegatronBuilder:
    def __init__(self, bin_path, dtype=np.int32):
        self.data_file = open(bin_path, "wb")
        self.dtype = dtype
        self.sequence_lengths = []
        self.document_indices = [0]

    def add_item(self, tokens):
        """One sequence (e.g. a sentence) of the current document."""
        arr = np.array(tokens, dtype=self.dtype)
        self.data_file.write(arr.tobytes(order="C"))
        self.sequence_lengths.append(arr.size)

    def add_document(self, tokens, lengths):
        """A whole document, written as sequences of the given lengths."""
        arr = np.array(tokens, dtype=self.dtype)
        self.data_file.write(arr.tobytes(order="C"))
        self.sequence_lengths.extend(lengths)
        self.document_indices.append(len(self.sequence_lengths))

    def end_document(self):
        self.document_indices.append(len(self.sequence_lengths))

    def finalize(self, idx_path):
        self.data_file.close()
        itemsize = np.dtype(self.dtype).itemsize
        pointers, ptr = [], 0
        for length in self.sequence_lengths:
            pointers.append(ptr)
            ptr += length * itemsize
        with open(idx_path, "wb") as f:
            f.write(b"MMIDIDX\x00\x00")
            f.write(struct.pack("<Q", 1))
            f.write(struct.pack("<B", MEGATRON_DTYPE_CODES[self.dtype]))
            f.write(struct.pack("<Q", len(self.sequence_lengths)))
            f.write(struct.pack("<Q", len(self.document_indices)))
            f.write(np.array(self.sequence_lengths, dtype=np.int32).tobytes(order="C"))
            f.write(np.array(pointers, dtype=np.int64).tobytes(order="C"))
            f.write(np.array(self.document_indices, dtype=np.int64).tobytes(order="C"))


LLMC_HEADERS = {"gpt-2": (20240520, 1, np.uint16), "llama-3": (20240801, 7, np.uint32)}


def write_datafile(filename, toks, model_desc="gpt-2"):
    magic, version, dtype = LLMC_HEADERS[model_desc]
    assert len(toks) < 2**31
    header = np.zeros(256, dtype=np.int32)
    header[0], header[1], header[2] = magic, version, len(toks)
    with open(filename, "wb") as f:
        f.write(header.tobytes())
        f.write(np.array(toks, dtype=dtype).tobytes())
