// The per-token pieces of a Llama-family decoder: RMSNorm, the SwiGLU MLP and rotary position embeddings
// (RoPE). Each computes exactly what transformers 4.57 computes (LlamaRMSNorm, LlamaMLP,
// LlamaRotaryEmbedding + apply_rotary_pos_emb), including where it switches to fp32.
//
// Shape letters (used in every model file): B batch, S global sequence length, P sequence-parallel degree
// (this rank holds S/P tokens), H query heads, Hkv key/value heads, D head dim, V vocabulary.
#pragma once

#include <cstdint>

#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include "model/config.hpp"

namespace ulysses::model {

// y = weight * (x / sqrt(mean(x^2) + eps)), the normalisation in fp32 and the product in x's dtype.
struct RMSNormImpl : torch::nn::Module {
  RMSNormImpl(std::int64_t dim, double eps);
  torch::Tensor forward(const torch::Tensor& x);   // [..., dim] -> [..., dim]

  torch::Tensor weight;   // [dim]
  double eps;
};
TORCH_MODULE(RMSNorm);

// down_proj(silu(gate_proj(x)) * up_proj(x)), no biases.
struct MlpImpl : torch::nn::Module {
  explicit MlpImpl(const ModelConfig& c);
  torch::Tensor forward(const torch::Tensor& x);   // [B, S/P, hidden] -> [B, S/P, hidden]

  torch::nn::Linear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
};
TORCH_MODULE(Mlp);

// The RoPE inverse frequencies [D/2], fp32 on the CPU, computed with the same fp32 operations as
// transformers' "default" and "llama3" rope initialisers.
torch::Tensor rope_inv_freq(const ModelConfig& c);

// cos and sin of position * inv_freq for every token, computed in fp32 and cast to `dtype` (as HF does).
struct RopeTables {
  torch::Tensor cos;   // [B, S/P, 1, D]
  torch::Tensor sin;   // [B, S/P, 1, D]
};
RopeTables rope_tables(const torch::Tensor& inv_freq, const torch::Tensor& position_ids, c10::ScalarType dtype);

// x * cos + rotate_half(x) * sin, rotate_half(x) = cat(-x[..., D/2:], x[..., :D/2]).
torch::Tensor apply_rope(const torch::Tensor& x, const RopeTables& rope);   // [B, S/P, h, D] -> same

}  // namespace ulysses::model
