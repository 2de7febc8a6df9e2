// Rotary position embeddings exactly as transformers 4.57 computes them (LlamaRotaryEmbedding with the "default"
// and "llama3" initialisers, apply_rotary_pos_emb), including where it switches to fp32.
#pragma once

#include <torch/types.h>

#include "arch/layer_spec.hpp"

namespace ulysses::model {

// The RoPE inverse frequencies [D/2], fp32 on the CPU, computed with the same fp32 operations as
// transformers' "default" and "llama3" rope initialisers.
torch::Tensor rope_inv_freq(const arch::RopeSpec& rope);   // [rotary_dim / 2]

// cos and sin of position * inv_freq for every token, computed in fp32 and cast to `dtype` (as HF does).
struct RopeTables {
  torch::Tensor cos;   // [B, S/P, 1, D]
  torch::Tensor sin;   // [B, S/P, 1, D]
};
RopeTables rope_tables(const torch::Tensor& inv_freq, const torch::Tensor& position_ids, c10::ScalarType dtype);

// x * cos + rotate_half(x) * sin, rotate_half(x) = cat(-x[..., D/2:], x[..., :D/2]).
torch::Tensor apply_rope(const torch::Tensor& x, const RopeTables& rope);   // [B, S/P, h, D] -> same

}  // namespace ulysses::model
