"""Reference outputs of Hugging Face transformers for the C++ model's parity test.

Usage: make_hf_reference.py OUT_DIR

For each tiny model (float32, hidden 64, 2 layers, vocab 256, 4 query heads sharing 2 kv heads):
  llama       Llama 3.1-style "llama3" rope scaling, untied
  llama_tied  tied embeddings, biases on q/k/v/o
  mistral     sliding window 6 (shorter than the sequence)
  qwen2       q/k/v biases, pad_token_id 3 (its embedding row gets no gradient)
  qwen3       q/k RMSNorm, head_dim 24 != hidden / heads
it writes OUT_DIR/<name>/ (save_pretrained: config.json + model.safetensors) and, beside them,
ref_plain.safetensors and ref_packed.safetensors holding the inputs in the C++ model's convention
(input_ids, position_ids, doc_ids, pre-shifted labels; all [B, S] int64), the reference logits [B, S, V],
loss [] (mean over valid labels) and grad.<parameter name> for every parameter. ref_plain_bf16.safetensors is the
plain case again from the same checkpoint loaded with dtype=torch.bfloat16 (transformers' own bf16 model): its
logits, loss and gradients, cast to float32. parameter_count.txt holds the number of parameters transformers built.

Every parameter, norms and biases included, is drawn at random (not transformers' init) so that a
misplaced norm or bias shows. "plain": one document per row, loss from transformers' own labels path.
"packed": several documents per row; the reference is transformers run on each document separately,
which is exactly what a block-diagonal causal mask with per-document positions must reproduce.
"""
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from transformers import LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config, AutoModelForCausalLM

B, S, VOCAB = 2, 16, 256
PACKED_DOC_LENGTHS = [[5, 7, 4], [3, 13]]   # per row, summing to S
COMMON = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-5)

MODELS = {
    "llama": LlamaConfig(**COMMON, rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                 "high_freq_factor": 4.0, "original_max_position_embeddings": 32}),
    "llama_tied": LlamaConfig(**COMMON, tie_word_embeddings=True, attention_bias=True, rope_theta=500000.0),
    "mistral": MistralConfig(**COMMON, sliding_window=6),
    "qwen2": Qwen2Config(**COMMON, pad_token_id=3),
    "qwen3": Qwen3Config(**COMMON, head_dim=24),
}


def randomize(model):
    g = torch.Generator().manual_seed(1234)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g) * 0.1
            p.copy_(1.0 + noise if name.endswith("norm.weight") else noise)


def shifted(labels):
    """HF labels (label[t] = token t) -> the C++ convention (label[t] = the token after t)."""
    out = torch.full_like(labels, -100)
    out[:, :-1] = labels[:, 1:]
    return out


def packed_inputs(ids):
    positions, docs, labels = (torch.empty_like(ids) for _ in range(3))
    for b, lengths in enumerate(PACKED_DOC_LENGTHS):
        start = 0
        for d, n in enumerate(lengths):
            positions[b, start:start + n] = torch.arange(n)
            docs[b, start:start + n] = d
            labels[b, start:start + n] = shifted(ids[b:b + 1, start:start + n])[0]
            start += n
    return positions, docs, labels


def grads(model):
    return {f"grad.{n}": p.grad.detach().clone() for n, p in model.named_parameters()}


def plain_reference(model, ids):
    hf_labels = ids.clone()
    hf_labels[0, :4] = -100                        # a masked prompt
    model.zero_grad()
    out = model(input_ids=ids, labels=hf_labels)   # transformers shifts the labels itself
    out.loss.backward()
    return dict(input_ids=ids, position_ids=torch.arange(S).repeat(B, 1), doc_ids=torch.zeros_like(ids),
                labels=shifted(hf_labels), logits=out.logits.detach(), loss=out.loss.detach(), **grads(model))


def packed_reference(model, ids):
    positions, docs, labels = packed_inputs(ids)
    model.zero_grad()
    rows = []
    for b, lengths in enumerate(PACKED_DOC_LENGTHS):
        pieces = ids[b].split(lengths)
        rows.append(torch.cat([model(input_ids=p[None]).logits[0] for p in pieces]))   # [S, V]
    logits = torch.stack(rows)                                                         # [B, S, V]
    loss = F.cross_entropy(logits.float().view(-1, VOCAB), labels.view(-1), ignore_index=-100, reduction="sum")
    loss = loss / (labels != -100).sum()
    loss.backward()
    return dict(input_ids=ids, position_ids=positions, doc_ids=docs, labels=labels, logits=logits.detach(),
                loss=loss.detach(), **grads(model))


def main(out_dir):
    torch.manual_seed(0)
    ids = torch.randint(0, VOCAB, (B, S))
    ids[1, 2] = ids[0, 9] = 3                      # the qwen2 pad token appears in the input
    for name, config in MODELS.items():
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32, attn_implementation="eager")
        randomize(model)
        model.save_pretrained(out_dir / name)
        for case, make in (("plain", plain_reference), ("packed", packed_reference)):
            tensors = {k: v.contiguous() for k, v in make(model, ids).items()}
            save_file(tensors, out_dir / name / f"ref_{case}.safetensors")
        bf16 = AutoModelForCausalLM.from_pretrained(out_dir / name, dtype=torch.bfloat16, attn_implementation="eager")
        tensors = {k: v.float().contiguous() if v.is_floating_point() else v for k, v in plain_reference(bf16, ids).items()}
        save_file(tensors, out_dir / name / "ref_plain_bf16.safetensors")
        count = sum(p.numel() for p in model.parameters())
        (out_dir / name / "parameter_count.txt").write_text(f"{count}\n")   # transformers' count, for the C++ test
        print(f"{name}: {count} parameters -> {out_dir / name}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(Path(sys.argv[1]))
