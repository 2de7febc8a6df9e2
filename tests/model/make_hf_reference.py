"""Reference outputs of Hugging Face transformers for the C++ model's parity test.

Usage: make_hf_reference.py OUT_DIR

For each tiny model (float32, hidden 64, 2 layers, vocab 256, 4 query heads sharing 2 kv heads):
  llama       Llama 3.1-style "llama3" rope scaling, untied
  llama_tied  tied embeddings, biases on q/k/v/o
  mistral     sliding window 6 (shorter than the sequence)
  qwen2       q/k/v biases, pad_token_id 3 (its embedding row gets no gradient)
  qwen3       q/k RMSNorm, head_dim 24 != hidden / heads
  qwen3_yarn  YaRN ×4 over an original context of 8 (Qwen3's recipe), documents up to 16 long
  llama_yarn  YaRN as DeepSeek-V3 sets it: mscale and mscale_all_dim, beta_fast 16, truncate off
  llama_linear  linear ×2.5
  llama_longrope  longrope over a top-level original context of 8: the 13- and 16-token documents take the long
              factors, the others the short ones (transformers switches per forward, here per document)
  mixtral     4 experts, top-2 renormalised
  qwen2_moe   top-3 of 6 unnormalised, a shared expert and its gate, the load-balancing loss trained (coef 0.3)
  qwen3_moe   a dense first layer (mlp_only_layers), top-2 of 4 renormalised, the load-balancing loss trained
The mixtures of experts' references hold aux_loss (load_balancing_loss_func over the forward's tokens: the plain
batch's, every document's of the packed one), and their gradients are those of loss + coef · aux_loss where the
config trains it (output_router_logits); loss is the CE alone. An expert no token picked has a zero gradient.
it writes OUT_DIR/<name>/ (save_pretrained: config.json + model.safetensors) and, beside them,
ref_plain.safetensors and ref_packed.safetensors holding the inputs in the C++ model's convention
(input_ids, position_ids, doc_ids, pre-shifted labels; all [B, S] int64), the reference logits [B, S, V],
loss [] (mean over valid labels) and grad.<parameter name> for every parameter. ref_plain_bf16.safetensors is the
plain case again from the same checkpoint loaded with dtype=torch.bfloat16 (transformers' own bf16 model): its
logits, loss and gradients, cast to float32. parameter_count.txt holds the number of parameters transformers built.

OUT_DIR/rope/<case>/ holds a table of RoPE parameter sets (every rope_type, the edge cases: truncate off, mscale
without mscale_all_dim, factor <= 1, an explicit attention factor, longrope's two ways of giving its factor): each a
config.json and ref.safetensors with the rotary embedding's inv_freq (and longrope's long_inv_freq), its
attention_scaling, and the cos/sin it returns for positions 0..N-1 at a short and a long N (cos_<N>, sin_<N>).

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
from transformers import (LlamaConfig, MistralConfig, MixtralConfig, Qwen2Config, Qwen2MoeConfig, Qwen3Config,
                          Qwen3MoeConfig, AutoModelForCausalLM)
from transformers.models.qwen3_moe.modeling_qwen3_moe import load_balancing_loss_func

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
    "qwen3_yarn": Qwen3Config(**COMMON, head_dim=24, rope_theta=1e6,
                              rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8}),
    "llama_yarn": LlamaConfig(**COMMON, rope_scaling={"type": "yarn", "factor": 40.0, "mscale": 0.707,
                                                      "mscale_all_dim": 1.0, "beta_fast": 16.0, "beta_slow": 1.0,
                                                      "original_max_position_embeddings": 4, "truncate": False}),
    "llama_linear": LlamaConfig(**COMMON, rope_scaling={"rope_type": "linear", "factor": 2.5}),
    "llama_longrope": LlamaConfig(**COMMON, original_max_position_embeddings=8,
                                  rope_scaling={"rope_type": "longrope", "short_factor": [1.0 + i / 8 for i in range(8)],
                                                "long_factor": [1.0 + i for i in range(8)]}),
    "mixtral": MixtralConfig(**{**COMMON, "intermediate_size": 48}, num_local_experts=4, num_experts_per_tok=2),
    "qwen2_moe": Qwen2MoeConfig(**COMMON, num_experts=6, num_experts_per_tok=3, moe_intermediate_size=32,
                                shared_expert_intermediate_size=48, norm_topk_prob=False, output_router_logits=True,
                                router_aux_loss_coef=0.3),
    "qwen3_moe": Qwen3MoeConfig(**COMMON, mlp_only_layers=[0], num_experts=4, num_experts_per_tok=2,
                                moe_intermediate_size=32, norm_topk_prob=True, output_router_logits=True,
                                router_aux_loss_coef=0.3),
}
BF16_MODELS = ["llama", "llama_tied", "mistral", "qwen2", "qwen3"]

ROPE_HEAD = dict(hidden_size=64, num_attention_heads=4, max_position_embeddings=64)   # head_dim 16
ROPE_CASES = {
    "default": dict(rope_theta=1e6),
    "linear": dict(rope_scaling={"rope_type": "linear", "factor": 2.5}),
    "llama3": dict(rope_theta=5e5, rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                 "high_freq_factor": 4.0, "original_max_position_embeddings": 16}),
    "yarn": dict(rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16}),
    "yarn_no_truncate": dict(rope_scaling={"rope_type": "yarn", "factor": 4.0, "beta_fast": 16.0, "beta_slow": 2.0,
                                           "original_max_position_embeddings": 16, "truncate": False}),
    "yarn_mscale_only": dict(rope_scaling={"rope_type": "yarn", "factor": 8.0, "mscale": 0.707,
                                           "original_max_position_embeddings": 16}),
    "yarn_mscale_all_dim": dict(rope_scaling={"rope_type": "yarn", "factor": 8.0, "mscale": 0.707,
                                              "mscale_all_dim": 1.0, "original_max_position_embeddings": 16}),
    "yarn_factor_below_1": dict(rope_scaling={"rope_type": "yarn", "factor": 0.5, "original_max_position_embeddings": 16}),
    "yarn_attention_factor": dict(rope_theta=1.5e5, rope_scaling={"rope_type": "yarn", "factor": 32.0,
                                                                  "attention_factor": 1.3}),   # context: max_position
    "longrope_factor": dict(rope_scaling={"rope_type": "longrope", "factor": 4.0, "short_factor": [1.0] * 8,
                                          "long_factor": [1.0 + i / 2 for i in range(8)]}),
    "longrope_original": dict(original_max_position_embeddings=16,
                              rope_scaling={"type": "longrope", "attention_factor": 1.1,
                                            "short_factor": [1.0 + i / 16 for i in range(8)],
                                            "long_factor": [2.0 + i for i in range(8)]}),
}
ROPE_LENGTHS = (12, 80)   # below every case's original context, and above it


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
    return {f"grad.{n}": p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p)
            for n, p in model.named_parameters()}


def router_loss(model, router_logits):
    """(load_balancing_loss_func over the sparse layers' logits, its weight in the trained loss)."""
    c = model.config
    aux = load_balancing_loss_func(router_logits, getattr(c, "num_local_experts", None) or c.num_experts,
                                   c.num_experts_per_tok)
    return aux, c.router_aux_loss_coef if c.output_router_logits else 0.0


def is_moe(model):
    return hasattr(model.config, "num_experts_per_tok")


def plain_reference(model, ids):
    hf_labels = ids.clone()
    hf_labels[0, :4] = -100                        # a masked prompt
    model.zero_grad()
    moe = is_moe(model)
    out = model(input_ids=ids, labels=hf_labels, output_router_logits=moe)   # transformers shifts the labels itself
    extra, loss = {}, out.loss
    if moe:   # out.loss holds coef · aux_loss where the config trains it (output_router_logits)
        aux, coef = router_loss(model, out.router_logits)
        loss = model.loss_function(out.logits, hf_labels, vocab_size=VOCAB)
        (loss + coef * aux).backward()
        extra["aux_loss"] = aux.detach()
    else:
        loss.backward()
    return dict(input_ids=ids, position_ids=torch.arange(S).repeat(B, 1), doc_ids=torch.zeros_like(ids),
                labels=shifted(hf_labels), logits=out.logits.detach(), loss=loss.detach(), **extra, **grads(model))


def packed_reference(model, ids):
    positions, docs, labels = packed_inputs(ids)
    model.zero_grad()
    moe = is_moe(model)
    rows, router_logits = [], []
    for b, lengths in enumerate(PACKED_DOC_LENGTHS):
        outs = [model(input_ids=p[None], output_router_logits=moe) for p in ids[b].split(lengths)]
        rows.append(torch.cat([o.logits[0] for o in outs]))                           # [S, V]
        router_logits += [o.router_logits for o in outs] if moe else []
    logits = torch.stack(rows)                                                         # [B, S, V]
    loss = F.cross_entropy(logits.float().view(-1, VOCAB), labels.view(-1), ignore_index=-100, reduction="sum")
    loss = loss / (labels != -100).sum()
    extra, objective = {}, loss
    if moe:   # every document's tokens together, layer by layer
        layers = tuple(torch.cat([doc[i] for doc in router_logits]) for i in range(len(router_logits[0])))
        aux, coef = router_loss(model, layers)
        objective = loss + coef * aux
        extra["aux_loss"] = aux.detach()
    objective.backward()
    return dict(input_ids=ids, position_ids=positions, doc_ids=docs, labels=labels, logits=logits.detach(),
                loss=loss.detach(), **extra, **grads(model))


def rope_reference(out_dir):
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding
    for name, fields in ROPE_CASES.items():
        config = LlamaConfig(**{**COMMON, **ROPE_HEAD, **fields})
        rotary = LlamaRotaryEmbedding(config)
        tensors = {"inv_freq": rotary.inv_freq.clone(), "attention_scaling": torch.tensor(rotary.attention_scaling,
                                                                                          dtype=torch.float64)}
        if rotary.rope_type == "longrope":   # the frequencies of a forward longer than the original context
            tensors["long_inv_freq"] = rotary.rope_init_fn(config, None, seq_len=10**6)[0]
        for n in ROPE_LENGTHS:
            x = torch.zeros(1, n, 16)
            cos, sin = rotary(x, torch.arange(n)[None])   # [1, n, D]
            tensors[f"cos_{n}"], tensors[f"sin_{n}"] = cos.contiguous(), sin.contiguous()
        (out_dir / "rope" / name).mkdir(parents=True)
        config.to_json_file(out_dir / "rope" / name / "config.json")
        save_file(tensors, out_dir / "rope" / name / "ref.safetensors")
    print(f"rope: {len(ROPE_CASES)} parameter sets -> {out_dir / 'rope'}")


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
        count = sum(p.numel() for p in model.parameters())
        (out_dir / name / "parameter_count.txt").write_text(f"{count}\n")   # transformers' count, for the C++ test
        print(f"{name}: {count} parameters -> {out_dir / name}")
        if name not in BF16_MODELS:
            continue
        bf16 = AutoModelForCausalLM.from_pretrained(out_dir / name, dtype=torch.bfloat16, attn_implementation="eager")
        tensors = {k: v.float().contiguous() if v.is_floating_point() else v for k, v in plain_reference(bf16, ids).items()}
        save_file(tensors, out_dir / name / "ref_plain_bf16.safetensors")
    rope_reference(out_dir)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(Path(sys.argv[1]))
