#include "model/document_attention.hpp"

#include <ATen/ops/cat.h>
#include <ATen/ops/scaled_dot_product_attention.h>

#include "model/ulysses.hpp"

namespace ulysses::model {
namespace {

// q [b, S, h, D], k, v [b, S, hkv, D] → SDPA over [b, h, S, D] → [b, S, h, D]; query head i uses kv head
// i / (h / hkv), as transformers' repeat_kv
torch::Tensor sdpa(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                   const std::optional<torch::Tensor>& mask, bool causal, double scale) {
  return at::scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), mask,
                                          /*dropout_p=*/0.0, causal, scale, /*enable_gqa=*/k.size(2) != q.size(2))
      .transpose(1, 2);
}

}  // namespace

bool AttentionPlan::single_run() const {
  for (const auto& row : runs)
    if (row.size() != 1) return false;
  return true;
}

AttentionPlan plan_attention(const torch::Tensor& doc_ids, std::optional<std::int64_t> sliding_window) {
  AttentionPlan plan;
  if (sliding_window) plan.mask = document_causal_mask(doc_ids, sliding_window);   // [B, 1, S, S]
  const torch::Tensor ids = doc_ids.to(torch::kCPU, torch::kInt64).contiguous();      // [B, S]
  const auto a = ids.accessor<std::int64_t, 2>();
  for (std::int64_t b = 0; b < a.size(0); ++b) {
    auto& row = plan.runs.emplace_back();
    std::int64_t begin = 0;
    for (std::int64_t i = 1; i <= a.size(1); ++i)
      if (i == a.size(1) || a[b][i] != a[b][i - 1]) {
        row.emplace_back(begin, i);
        begin = i;
      }
  }
  return plan;
}

torch::Tensor document_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                 const AttentionPlan& plan, double scale) {
  if (plan.mask.defined()) return sdpa(q, k, v, plan.mask, /*causal=*/false, scale);
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

}  // namespace ulysses::model
