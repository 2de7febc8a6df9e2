// Tiled logits + loss: the language-model head and the cross-entropy over chunks of tokens, so the [N, V] logits (N
// tokens of this rank, V the vocabulary; ~12·V bytes per token in fp32 with the softmax and its gradient) never exist
// whole — one chunk of [chunk_tokens, V] at a time. The chunks are those of the recompute primitive (recompute.hpp),
// their losses summed.
//
//   forward (no graph kept): per chunk c of rows of h [N, hidden]:
//     loss += Σ cross-entropy(float(h_c · Wᵀ), labels_c) over labels != -100      (matmul in the compute dtype)
//   backward: per chunk, the same forward again with grad enabled, inside the same autocast scope, and
//     autograd gives dh_c (written into its rows of dh) and dW_c (summed over chunks).
//
// Exact: each chunk runs the plain path's operations (at::linear, the fp32 cast, cross_entropy with Sum), so
// dh equals the plain path's row by row; the loss and dW are sums in another order (≤ 1e-6 relative in fp32).
// Only h, W and the labels are saved. No collective inside: a rank never waits on another here.
#pragma once

#include <cstdint>

#include <torch/types.h>

#include "model/precision.hpp"

namespace ulysses::model {

// Σ token cross-entropies (fp32 scalar) of hidden [N, hidden] through head_weight [V, hidden] against
// labels [N] (kIgnoreLabel = no loss), chunk_tokens rows at a time, matmuls under `precision`'s autocast.
// Differentiable in hidden and head_weight.
torch::Tensor tiled_cross_entropy_sum(const torch::Tensor& hidden, const torch::Tensor& head_weight,
                                      const torch::Tensor& labels, std::int64_t chunk_tokens, Precision precision);

}  // namespace ulysses::model
