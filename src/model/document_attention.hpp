// Attention over packed documents, exact and without an S×S mask where none is needed.
//
// Documents are contiguous runs of equal doc id (padding is one more run). Causal attention restricted to
// a document equals causal attention over that document alone, so each run is one call of the fused
// scaled-dot-product attention with is_causal — O(Σ d²) work, no [S, S] mask, and the flash kernels on
// CPU and GPU. A row that is a single run is one call for the whole batch. Only a sliding window
// (Mistral) still needs the explicit boolean mask.
//
// On a CUDA device in bf16/fp16 (head_dim a multiple of 8, ≤ 256, a GPU flash runs on) the whole batch is instead one call of
// the variable-length flash-attention kernel: tokens flattened to [B·S, h, D], one causal segment per
// document given by cumulative lengths (cu_seqlens) — the same math, one launch for all documents.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <torch/types.h>

namespace ulysses::model {

struct AttentionPlan {
  std::vector<std::vector<std::pair<std::int64_t, std::int64_t>>> runs;   // [B] × documents: [begin, end)
  torch::Tensor mask;        // [B, 1, S, S] bool on the device, only with a sliding window (undefined otherwise)
  torch::Tensor cu_seqlens;  // [documents + 1] int32 on the device: document starts in the flattened [B·S]
  std::int64_t max_len = 0;  // the longest document
  std::optional<std::int64_t> window;   // the sliding window, if any (ring attention builds its masks from it)
  bool single_run() const;   // every row is one document spanning the whole sequence
};

// doc_ids [B, S] (the whole sequence, any device) → the plan, its tensors on `device`; dense_mask: build `mask` for a
// sliding window (ring attention masks each piece of its own instead).
AttentionPlan plan_attention(const torch::Tensor& doc_ids, std::optional<std::int64_t> sliding_window,
                             const c10::Device& device, bool dense_mask = true);

// Which kernel document_attention runs for q of this device/dtype and head_dim, as one line for the
// start-up log, e.g. "flash-attention varlen (one launch per layer for all documents)" or
// "fused SDPA per document (PyTorch picks flash_attention for float on cpu)".
std::string attention_kernel(const c10::Device& device, c10::ScalarType dtype, std::int64_t heads,
                             std::int64_t kv_heads, std::int64_t head_dim, bool sliding_window);

// Grouped KV heads repeated so head i of the result is kv head i / (heads / hkv), as transformers' repeat_kv:
// [b, hkv, S, D] → [b, heads, S, D]. On CUDA, where grouped heads would leave only the math kernel (fp32),
// SDPA gets them expanded (and the start-up log says so).
torch::Tensor expand_kv_heads(const torch::Tensor& kv, std::int64_t heads);

// Whether the flash kernels train on a GPU of compute capability major.minor with this head size, as PyTorch's
// own checks say: sm80 to sm121, and on sm86/89/120/121 not with 192 < head_dim ≤ 224 (no backward kernels).
bool flash_supported(int major, int minor, std::int64_t head_dim);

// Whether the CUDA flash kernels take q [..., h, D] (or q of this device, dtype and head size): a CUDA device,
// bf16/fp16, a head size they have kernels for (arch::flash_head_dim) on this GPU (flash_supported).
bool flash_applies(const c10::Device& device, c10::ScalarType dtype, std::int64_t head_dim);
bool flash_applies(const torch::Tensor& q);

// Which keys each query may attend to, for the whole sequence: key j <= query i, same document, and
// i - j < sliding_window when given. doc_ids [B, S] → mask [B, 1, S, S] bool (true = attend).
torch::Tensor document_causal_mask(const torch::Tensor& doc_ids, std::optional<std::int64_t> sliding_window);

// q [B, S, h, D], k, v [B, S, hkv, D] (h % hkv == 0; query head i uses kv head i / (h / hkv)) → [B, S, h, D]
torch::Tensor document_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                 const AttentionPlan& plan, double scale);

}  // namespace ulysses::model
