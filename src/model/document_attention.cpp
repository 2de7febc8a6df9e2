#include "model/document_attention.hpp"

#include <ATen/SDPBackend.h>
#include <ATen/ops/_flash_attention_forward.h>
#include <ATen/ops/_fused_sdp_choice.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/scaled_dot_product_attention.h>
#include <fmt/format.h>

#include <cmath>
#include <utility>

#include "arch/model_config.hpp"

#if ULYSSES_CUDA
#include <cuda_runtime_api.h>
#endif

namespace ulysses::model {
namespace {

// Which fused kernel PyTorch picks for q, k, v as [b, heads, S, D] (GQA when the head counts differ).
at::SDPBackend fused_choice(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                            const std::optional<torch::Tensor>& mask, bool causal, double scale) {
  return static_cast<at::SDPBackend>(at::_fused_sdp_choice(q, k, v, mask, 0.0, causal, scale,
                                                           /*enable_gqa=*/k.size(1) != q.size(1)));
}

// On CUDA, grouped KV heads leave only the math kernel where flash does not apply (fp32): memory-efficient
// SDPA rejects them. Expanded KV heads let it run: O(S) memory instead of math's O(S²) scores.
bool expand_kv_for_cuda(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                        const std::optional<torch::Tensor>& mask, bool causal, double scale) {
  return q.is_cuda() && k.size(1) != q.size(1) && fused_choice(q, k, v, mask, causal, scale) == at::SDPBackend::math;
}

// q [b, S, h, D], k, v [b, S, hkv, D] → SDPA over [b, h, S, D] → [b, S, h, D]; query head i uses kv head
// i / (h / hkv), as transformers' repeat_kv
torch::Tensor sdpa(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                   const std::optional<torch::Tensor>& mask, bool causal, double scale) {
  const torch::Tensor qt = q.transpose(1, 2);   // [b, h, S, D]
  torch::Tensor kt = k.transpose(1, 2), vt = v.transpose(1, 2);   // [b, hkv, S, D]
  if (expand_kv_for_cuda(qt, kt, vt, mask, causal, scale)) {
    kt = expand_kv_heads(kt, qt.size(1));   // [b, h, S, D]
    vt = expand_kv_heads(vt, qt.size(1));
  }
  return at::scaled_dot_product_attention(qt, kt, vt, mask, /*dropout_p=*/0.0, causal, scale,
                                          /*enable_gqa=*/kt.size(1) != qt.size(1))
      .transpose(1, 2);
}

// The compute capability of a CUDA device, {major, minor}; {0, 0} off CUDA.
std::pair<int, int> capability([[maybe_unused]] const c10::Device& d) {
#if ULYSSES_CUDA
  int major = 0, minor = 0;
  if (d.is_cuda() && cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, d.index()) == cudaSuccess &&
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, d.index()) == cudaSuccess)
    return {major, minor};
#endif
  return {0, 0};
}

// The varlen flash kernel's conditions: the flash kernels' (flash_applies), and no explicit mask.
bool varlen_flash_applies(const torch::Tensor& q, const AttentionPlan& plan) {
  return !plan.mask.defined() && flash_applies(q);
}

// q [B, S, h, D], k, v [B, S, hkv, D] → [B, S, h, D]: every document of every row in one launch (GQA native).
torch::Tensor varlen_flash(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                           const AttentionPlan& plan, double scale) {
  const std::int64_t B = q.size(0), S = q.size(1);
  auto flat = [&](const torch::Tensor& t) { return t.reshape({B * S, t.size(2), t.size(3)}); };   // [B·S, heads, D]
  auto out = std::get<0>(at::_flash_attention_forward(flat(q), flat(k), flat(v), plan.cu_seqlens, plan.cu_seqlens,
                                                      plan.max_len, plan.max_len, /*dropout_p=*/0.0,
                                                      /*is_causal=*/true, /*return_debug_mask=*/false, scale));
  return out.view(q.sizes());   // [B, S, h, D]
}

std::string_view backend_name(at::SDPBackend b) {
  switch (b) {
    case at::SDPBackend::flash_attention: return "flash_attention";
    case at::SDPBackend::efficient_attention: return "efficient_attention";
    case at::SDPBackend::cudnn_attention: return "cudnn_attention";
    case at::SDPBackend::math: return "math";
    default: return "another backend";
  }
}

}  // namespace

torch::Tensor expand_kv_heads(const torch::Tensor& kv, std::int64_t heads) {   // [b, hkv, S, D] → [b, h, S, D]
  return kv.repeat_interleave(heads / kv.size(1), /*dim=*/1);
}

bool flash_supported(int major, int minor, std::int64_t head_dim) {
  const int cc = major * 10 + minor;
  if (cc < 80 || cc > 121) return false;   // PyTorch's flash kernels: sm80 to sm121
  // sm86 to sm89 and sm120 to sm121 (ranges, as PyTorch's sdp_utils checks them) have no backward kernels for
  // 192 < head_dim ≤ 224
  const bool small_smem = (cc >= 86 && cc <= 89) || (cc >= 120 && cc <= 121);
  return !(small_smem && head_dim > 192 && head_dim <= 224);
}

bool flash_applies(const c10::Device& device, c10::ScalarType dtype, std::int64_t head_dim) {
  if (!device.is_cuda() || (dtype != torch::kBFloat16 && dtype != torch::kHalf) || !arch::flash_head_dim(head_dim))
    return false;
  const auto [major, minor] = capability(device);
  return flash_supported(major, minor, head_dim);
}

bool flash_applies(const torch::Tensor& q) { return flash_applies(q.device(), q.scalar_type(), q.size(-1)); }

bool AttentionPlan::single_run() const {
  for (const auto& row : runs)
    if (row.size() != 1) return false;
  return true;
}

AttentionPlan plan_attention(const torch::Tensor& doc_ids, std::optional<std::int64_t> sliding_window,
                             const c10::Device& device, bool dense_mask) {
  AttentionPlan plan;
  plan.window = sliding_window;
  if (sliding_window && dense_mask) plan.mask = document_causal_mask(doc_ids, sliding_window).to(device);   // [B, 1, S, S]
  const torch::Tensor ids = doc_ids.to(torch::kCPU, torch::kInt64).contiguous();                // [B, S]
  const auto a = ids.accessor<std::int64_t, 2>();
  std::vector<std::int32_t> starts{0};   // document starts in the flattened [B·S], then B·S
  for (std::int64_t b = 0; b < a.size(0); ++b) {
    auto& row = plan.runs.emplace_back();
    std::int64_t begin = 0;
    for (std::int64_t i = 1; i <= a.size(1); ++i)
      if (i == a.size(1) || a[b][i] != a[b][i - 1]) {
        row.emplace_back(begin, i);
        starts.push_back(static_cast<std::int32_t>(b * a.size(1) + i));
        plan.max_len = std::max(plan.max_len, i - begin);
        begin = i;
      }
  }
  plan.cu_seqlens = at::empty({static_cast<std::int64_t>(starts.size())}, at::kInt);   // [documents + 1]
  std::copy(starts.begin(), starts.end(), plan.cu_seqlens.data_ptr<std::int32_t>());
  plan.cu_seqlens = plan.cu_seqlens.to(device);
  return plan;
}

std::string attention_kernel(const c10::Device& device, c10::ScalarType dtype, std::int64_t heads,
                             std::int64_t kv_heads, std::int64_t head_dim, bool sliding_window) {
  if (sliding_window) return "SDPA with a [B, 1, S, S] document + sliding-window mask (dense in S)";
  const auto opts = at::TensorOptions().dtype(dtype).device(device);
  const torch::Tensor q = at::empty({1, 128, heads, head_dim}, opts), kv = at::empty({1, 128, kv_heads, head_dim}, opts);
  if (varlen_flash_applies(q, AttentionPlan{})) return "flash-attention varlen (all documents of a layer in one launch)";
  const torch::Tensor qt = q.transpose(1, 2), kt = kv.transpose(1, 2);   // [1, heads, 128, D]
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  if (expand_kv_for_cuda(qt, kt, kt, std::nullopt, /*causal=*/true, scale)) {
    const torch::Tensor wide = expand_kv_heads(kt, heads);   // [1, heads, 128, D]
    return fmt::format("fused SDPA per document (PyTorch picks {} for {} on {}, KV heads expanded from {} to {}: "
                       "no fused kernel takes grouped KV heads there)",
                       backend_name(fused_choice(qt, wide, wide, std::nullopt, true, scale)), c10::toString(dtype),
                       device.str(), kv_heads, heads);
  }
  return fmt::format("fused SDPA per document (PyTorch picks {} for {} on {})",
                     backend_name(fused_choice(qt, kt, kt, std::nullopt, true, scale)), c10::toString(dtype),
                     device.str());
}

torch::Tensor document_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                 const AttentionPlan& plan, double scale) {
  if (plan.mask.defined()) return sdpa(q, k, v, plan.mask, /*causal=*/false, scale);
  if (varlen_flash_applies(q, plan)) return varlen_flash(q, k, v, plan, scale);
  if (plan.single_run()) return sdpa(q, k, v, std::nullopt, /*causal=*/true, scale);
  std::vector<torch::Tensor> rows;
  for (std::size_t b = 0; b < plan.runs.size(); ++b) {
    const auto i = static_cast<std::int64_t>(b);
    std::vector<torch::Tensor> docs;
    for (const auto& [begin, end] : plan.runs[b]) {
      auto slice = [&](const torch::Tensor& t) { return t.slice(0, i, i + 1).slice(1, begin, end); };   // [1, d, h, D]
      docs.push_back(sdpa(slice(q), slice(k), slice(v), std::nullopt, /*causal=*/true, scale));
    }
    rows.push_back(at::cat(docs, 1));   // [1, S, h, D]
  }
  return at::cat(rows, 0);   // [B, S, h, D]
}

torch::Tensor document_causal_mask(const torch::Tensor& doc_ids, std::optional<std::int64_t> sliding_window) {
  const std::int64_t S = doc_ids.size(1);
  auto i = at::arange(S, doc_ids.options()).unsqueeze(1);   // [S, 1] query index
  auto j = at::arange(S, doc_ids.options()).unsqueeze(0);   // [1, S] key index
  auto mask = (j <= i)                                      // [S, S]
                  .logical_and(doc_ids.unsqueeze(2) == doc_ids.unsqueeze(1));   // [B, S, S]
  if (sliding_window) mask = mask.logical_and(i - j < *sliding_window);        // [B, S, S]
  return mask.unsqueeze(1);                                 // [B, 1, S, S]
}

}  // namespace ulysses::model
