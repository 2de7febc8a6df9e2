// Attention over packed documents, exact and without an S×S mask where none is needed.
//
// Documents are contiguous runs of equal doc id (padding is one more run). Causal attention restricted to
// a document equals causal attention over that document alone, so each run is one call of the fused
// scaled-dot-product attention with is_causal — O(Σ d²) work, no [S, S] mask, and the flash kernels on
// CPU and GPU. A row that is a single run is one call for the whole batch. Only a sliding window
// (Mistral) still needs the explicit boolean mask.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include <torch/types.h>

namespace ulysses::model {

struct AttentionPlan {
  std::vector<std::vector<std::pair<std::int64_t, std::int64_t>>> runs;   // [B] × documents: [begin, end)
  torch::Tensor mask;   // [B, 1, S, S] bool, only with a sliding window (undefined otherwise)
  bool single_run() const;   // every row is one document spanning the whole sequence
};

// doc_ids [B, S] (the whole sequence) → the plan.
AttentionPlan plan_attention(const torch::Tensor& doc_ids, std::optional<std::int64_t> sliding_window);

// q [B, S, h, D], k, v [B, S, hkv, D] (h % hkv == 0; query head i uses kv head i / (h / hkv)) → [B, S, h, D]
torch::Tensor document_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                 const AttentionPlan& plan, double scale);

}  // namespace ulysses::model
