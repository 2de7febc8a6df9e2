// Rotary position embeddings exactly as transformers 4.57 computes them: every rope_type of arch/rope.hpp
// (modeling_rope_utils' initialisers, each with the same fp32 tensor operations, so the frequencies agree bit for
// bit), the attention factor on cos and sin (LlamaRotaryEmbedding.forward), apply_rotary_pos_emb.
#pragma once

#include <torch/types.h>

#include "arch/rope.hpp"
#include "core/sequence_parallel.hpp"

namespace ulysses::model {

// A layer's RoPE, tabulated once: fp32 on the CPU.
struct RopeFrequencies {
  torch::Tensor inv_freq;        // [rotary_dim / 2]
  torch::Tensor long_inv_freq;   // [rotary_dim / 2], longrope only: a document longer than long_after tokens takes it
  std::int64_t long_after = 0;
  double attention_factor = 1.0;   // multiplies cos and sin
};
RopeFrequencies rope_frequencies(const arch::RopeSpec& rope);

// cos and sin of position * inv_freq for every token, computed in fp32, times the attention factor, and cast to
// `dtype` (as HF does). doc_lengths [B, S/P]: the length of each token's document — read for longrope only (its
// long frequencies are transformers' for a document's own forward longer than the original context), undefined
// otherwise.
struct RopeTables {
  torch::Tensor cos;   // [B, S/P, 1, D]
  torch::Tensor sin;   // [B, S/P, 1, D]
};
RopeTables rope_tables(const RopeFrequencies& rope, const torch::Tensor& position_ids, const torch::Tensor& doc_lengths,
                       c10::ScalarType dtype);

// The length of each of this rank's tokens' document: doc_ids [B, S] (the whole sequence; a document's tokens are
// consecutive) -> [B, S/P] int64, this rank's slice of the sequence as `sp` holds it.
torch::Tensor local_document_lengths(const torch::Tensor& doc_ids, const SequenceParallel& sp);

// x * cos + rotate_half(x) * sin, rotate_half(x) = cat(-x[..., D/2:], x[..., :D/2]).
torch::Tensor apply_rope(const torch::Tensor& x, const RopeTables& rope);   // [B, S/P, h, D] -> same

}  // namespace ulysses::model
