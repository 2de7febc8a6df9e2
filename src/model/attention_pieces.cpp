#include "model/attention_pieces.hpp"

#include <ATen/ops/_flash_attention_backward.h>
#include <ATen/ops/_flash_attention_forward.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu_backward.h>
#include <fmt/ostream.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <limits>

#include "core/error.hpp"

namespace ulysses::model {

std::vector<AttentionPiece> attention_pieces(const AttentionPlan& plan, TokenRange q_chunk, TokenRange k_chunk,
                                             std::optional<std::int64_t> window) {
  std::vector<AttentionPiece> pieces;
  if (k_chunk.begin > q_chunk.begin) return pieces;   // keys after the queries: causal attention sees none
  const bool same = k_chunk.begin == q_chunk.begin;
  for (std::size_t row = 0; row < plan.runs.size(); ++row)
    for (const auto& [doc_begin, doc_end] : plan.runs[row]) {
      AttentionPiece p{static_cast<std::int64_t>(row),
                       {std::max(q_chunk.begin, doc_begin), std::min(q_chunk.end, doc_end)},
                       {std::max(k_chunk.begin, doc_begin), std::min(k_chunk.end, doc_end)}, same, false};
      if (p.q.size() <= 0 || p.k.size() <= 0) continue;
      if (window) {
        const std::int64_t w = *window;
        if (!same) {   // queries that reach a key of the chunk, and the keys some query reaches
          p.q.end = std::min(p.q.end, p.k.end - 1 + w);
          if (p.q.end <= p.q.begin) continue;
          p.k.begin = std::max(p.k.begin, p.q.begin - w + 1);
        }
        p.masked = (p.q.end - 1) - p.k.begin >= w;   // the farthest pair falls outside the window
        if (p.masked) p.causal = false;               // the mask says key ≤ query too
      }
      pieces.push_back(p);
    }
  return pieces;
}

PieceWindow piece_window(const AttentionPiece& p, std::int64_t window) {
  const std::int64_t right = p.q.end - p.k.end;   // 0 on the same tokens; past every key when the keys come first
  return {window - 1 - right, right};
}

Kernel resolve_kernel(PieceKernel asked, const c10::Device& device, c10::ScalarType dtype, std::int64_t head_dim) {
  if (asked == PieceKernel::kWrittenOut) return Kernel::kWrittenOut;
  if (device.is_cpu()) return Kernel::kFlashCpu;
  return flash_applies(device, dtype, head_dim) ? Kernel::kFlashCuda : Kernel::kWrittenOut;
}

std::string kernel_name(Kernel k) {
  switch (k) {
    case Kernel::kFlashCpu: return "PyTorch's flash attention for CPU";
    case Kernel::kFlashCuda: return "flash attention (FlashAttention-2, grouped KV heads native)";
    case Kernel::kWrittenOut: break;
  }
  return "the arithmetic written out (fp32 scores of the piece: no flash kernel for this dtype, GPU or head size)";
}

bool flash_pieces(const c10::Device& device, c10::ScalarType dtype, std::int64_t head_dim) {
  return resolve_kernel(PieceKernel::kAuto, device, dtype, head_dim) != Kernel::kWrittenOut;
}

namespace {

// key ≤ query and query − key < window, as an additive mask [Lq, Lk] of `dtype` (0 allowed, −inf not)
torch::Tensor window_mask(const AttentionPiece& p, std::int64_t window, const torch::TensorOptions& opts) {
  const auto i = torch::arange(p.q.begin, p.q.end, opts.dtype(torch::kLong)).unsqueeze(1);   // [Lq, 1]
  const auto j = torch::arange(p.k.begin, p.k.end, opts.dtype(torch::kLong)).unsqueeze(0);   // [1, Lk]
  const auto allowed = (j <= i).logical_and(i - j < window);                                  // [Lq, Lk]
  return torch::zeros(allowed.sizes(), opts)
      .masked_fill(allowed.logical_not(), -std::numeric_limits<double>::infinity());
}

// The layout of the CPU kernels: rows [1, L, heads, D] → [1, h, L, D], KV heads repeated to h heads (h = heads: none).
torch::Tensor heads_first(const torch::Tensor& x, std::int64_t h) {
  return expand_kv_heads(x.transpose(1, 2), h).contiguous();
}

// A gradient [1, h, L, D] back to rows of `heads` heads, [1, L, heads, D], summed over each KV head's query heads.
torch::Tensor to_rows(const torch::Tensor& g, std::int64_t heads) {
  return g.view({1, heads, g.size(1) / heads, g.size(2), g.size(3)}).sum(2).transpose(1, 2);
}

// The scores of a piece, written out: q [1, h, Lq, D], k [1, h, Lk, D] → [1, h, Lq, Lk] in the accumulation dtype
torch::Tensor scores(const PieceMath& m, const torch::Tensor& q, const torch::Tensor& k) {
  auto s = torch::matmul(q.to(m.acc), k.to(m.acc).transpose(-1, -2)) * m.scale;   // [1, h, Lq, Lk]
  if (m.causal) s = s.masked_fill(torch::ones({q.size(2), k.size(2)}, q.options().dtype(torch::kBool)).triu(1),
                                  -std::numeric_limits<double>::infinity());
  if (m.mask) s = s + m.mask->to(m.acc);
  return s;
}

std::optional<std::int64_t> left(const PieceMath& m) {
  return m.window ? std::optional(m.window->left) : std::nullopt;
}
std::optional<std::int64_t> right(const PieceMath& m) {
  return m.window ? std::optional(m.window->right) : std::nullopt;
}

}  // namespace

PieceMath piece_math(Kernel kernel, const AttentionPiece& p, std::optional<std::int64_t> window, double scale,
                     const torch::TensorOptions& q_options) {
  const auto acc = accumulation(c10::typeMetaToScalarType(q_options.dtype()));
  PieceMath m{kernel, p.causal, std::nullopt, std::nullopt, scale, acc};
  if (!p.masked) return m;
  if (kernel == Kernel::kFlashCuda)
    m.window = piece_window(p, *window);
  else
    m.mask = window_mask(p, *window, q_options);
  return m;
}

std::pair<torch::Tensor, torch::Tensor> piece_forward(const PieceMath& m, const torch::Tensor& q,
                                                      const torch::Tensor& k, const torch::Tensor& v) {
  const std::int64_t Lq = q.size(1), Lk = k.size(1), h = q.size(2);
  if (m.kernel == Kernel::kFlashCuda) {   // GQA native; lse [1, h, Lq] float
    auto r = at::_flash_attention_forward(q, k, v, std::nullopt, std::nullopt, Lq, Lk, /*dropout_p=*/0.0, m.causal,
                                          /*return_debug_mask=*/false, m.scale, left(m), right(m));
    return {std::get<0>(r), std::get<1>(r).reshape({1, h, Lq})};
  }
  if (m.kernel == Kernel::kFlashCpu) {   // GQA native: [1, h, Lq, D] against [1, hkv, Lk, D]
    auto [out, lse] = at::_scaled_dot_product_flash_attention_for_cpu(heads_first(q, h), heads_first(k, k.size(2)),
                                                                      heads_first(v, v.size(2)), 0.0, m.causal,
                                                                      m.mask, m.scale);
    return {out.transpose(1, 2), lse.to(m.acc)};
  }
  const auto qt = heads_first(q, h), kt = heads_first(k, h), vt = heads_first(v, h);   // [1, h, L, D]
  const auto s = scores(m, qt, kt);    // [1, h, Lq, Lk]
  const auto lse = s.logsumexp(-1);    // [1, h, Lq]
  return {torch::matmul((s - lse.unsqueeze(-1)).exp(), vt.to(m.acc)).to(q.scalar_type()).transpose(1, 2), lse};
}

std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> piece_backward(const PieceMath& m, const torch::Tensor& dout,
                                                                       const torch::Tensor& q, const torch::Tensor& k,
                                                                       const torch::Tensor& v, const torch::Tensor& out,
                                                                       const torch::Tensor& lse) {
  const std::int64_t Lq = q.size(1), Lk = k.size(1), h = q.size(2), hkv = k.size(2);
  if (m.kernel == Kernel::kFlashCuda) {   // dk, dv summed over each KV head's query heads by the kernel
    const auto unused = torch::empty({0}, q.options().dtype(torch::kUInt64));   // the dropout's rng state
    auto [dq, dk, dv] = at::_flash_attention_backward(dout, q, k, v, out, lse.to(torch::kFloat).contiguous(),
                                                      torch::Tensor(), torch::Tensor(), Lq, Lk, /*dropout_p=*/0.0,
                                                      m.causal, unused, unused, m.scale, left(m), right(m));
    return {dq.to(m.acc), dk.to(m.acc), dv.to(m.acc)};
  }
  const auto gt = heads_first(dout, h), ot = heads_first(out, h);                        // [1, h, Lq, D]
  if (m.kernel == Kernel::kFlashCpu) {   // GQA native: dk, dv [1, hkv, Lk, D]
    const auto kernel_lse = lse.to(accumulation(q.scalar_type())).contiguous();
    auto [dq, dk, dv] = at::_scaled_dot_product_flash_attention_for_cpu_backward(
        gt, heads_first(q, h), heads_first(k, hkv), heads_first(v, hkv), ot, kernel_lse, 0.0, m.causal, m.mask,
        m.scale);
    return {dq.to(m.acc).transpose(1, 2), dk.to(m.acc).transpose(1, 2), dv.to(m.acc).transpose(1, 2)};
  }
  const auto qt = heads_first(q, h), kt = heads_first(k, h), vt = heads_first(v, h);   // [1, h, L, D]
  const auto p = (scores(m, qt, kt) - lse.unsqueeze(-1)).exp();                         // [1, h, Lq, Lk]
  const auto g = gt.to(m.acc);
  const auto dv = torch::matmul(p.transpose(-1, -2), g);                                 // [1, h, Lk, D]
  const auto rowsum = (g * ot.to(m.acc)).sum(-1, /*keepdim=*/true);                      // [1, h, Lq, 1]
  const auto ds = p * (torch::matmul(g, vt.to(m.acc).transpose(-1, -2)) - rowsum);       // [1, h, Lq, Lk]
  return {(torch::matmul(ds, kt.to(m.acc)) * m.scale).transpose(1, 2),
          to_rows(torch::matmul(ds.transpose(-1, -2), qt.to(m.acc)) * m.scale, hkv), to_rows(dv, hkv)};
}

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// One piece per document of the whole sequence: f(piece, its math, rows of a [B, S, ...] tensor as [1, Lq or Lk, ...]).
template <typename F>
void for_each_document(const AttentionPlan& plan, const torch::Tensor& q, double scale, F&& f) {
  const TokenRange whole{0, q.size(1)};
  const Kernel kernel = resolve_kernel(PieceKernel::kAuto, q.device(), q.scalar_type(), q.size(3));
  for (const AttentionPiece& p : attention_pieces(plan, whole, whole, plan.window)) {
    auto queries = [&p](const torch::Tensor& t) { return t.narrow(0, p.row, 1).narrow(1, p.q.begin, p.q.size()); };
    auto keys = [&p](const torch::Tensor& t) { return t.narrow(0, p.row, 1).narrow(1, p.k.begin, p.k.size()); };
    f(piece_math(kernel, p, plan.window, scale, q.options()), queries, keys, p);
  }
}

// The plan and scale, kept for backward (ctx->saved_data holds IValues only).
struct KeptContext : torch::CustomClassHolder {
  KeptContext(AttentionPlan p, double s) : plan(std::move(p)), scale(s) {}
  AttentionPlan plan;
  double scale;
};

struct KeptAttention : torch::autograd::Function<KeptAttention> {
  // q [B, S, h, D], k, v [B, S, hkv, D], out [B, S, h, D], lse [B, h, S] → out
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, const torch::Tensor& out, const torch::Tensor& lse,
                               c10::intrusive_ptr<KeptContext> c) {
    ctx->save_for_backward({q, k, v, out, lse});
    ctx->saved_data["kept"] = c10::IValue::make_capsule(c);
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[3], &lse = saved[4];
    const auto c = c10::static_intrusive_pointer_cast<KeptContext>(ctx->saved_data["kept"].toCapsule());
    const torch::Tensor dout = grad_out[0].contiguous();   // [B, S, h, D]
    // each query and each key is in one piece: the pieces' gradients are written, not summed
    torch::Tensor dq = torch::zeros_like(q), dk = torch::zeros_like(k), dv = torch::zeros_like(v);
    for_each_document(c->plan, q, c->scale, [&](const PieceMath& m, auto queries, auto keys, const AttentionPiece& p) {
      auto [gq, gk, gv] = piece_backward(m, queries(dout), queries(q), keys(k), keys(v), queries(out),
                                         lse.narrow(0, p.row, 1).narrow(2, p.q.begin, p.q.size()));
      queries(dq).copy_(gq);
      keys(dk).copy_(gk);
      keys(dv).copy_(gv);
    });
    return {dq, dk, dv, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

std::pair<torch::Tensor, torch::Tensor> attention_with_lse(const torch::Tensor& q, const torch::Tensor& k,
                                                           const torch::Tensor& v, const AttentionPlan& plan,
                                                           double scale) {
  ULY_CHECK(static_cast<std::int64_t>(plan.runs.size()) == q.size(0) && k.sizes() == v.sizes() &&
                q.size(2) % k.size(2) == 0,
            "attention by pieces: q {} k {} v {} for a plan of {} rows", fmt::streamed(q.sizes()),
            fmt::streamed(k.sizes()), fmt::streamed(v.sizes()), plan.runs.size());
  const torch::NoGradGuard no_graph;
  auto out = torch::empty_like(q);                                                           // [B, S, h, D]
  const auto acc = accumulation(q.scalar_type());
  auto lse = torch::empty({q.size(0), q.size(2), q.size(1)}, q.options().dtype(acc));   // [B, h, S]
  for_each_document(plan, q, scale, [&](const PieceMath& m, auto queries, auto keys, const AttentionPiece& p) {
    auto [o, l] = piece_forward(m, queries(q), keys(k), keys(v));
    queries(out).copy_(o);
    lse.narrow(0, p.row, 1).narrow(2, p.q.begin, p.q.size()).copy_(l);
  });
  return {out, lse};
}

torch::Tensor attention_from_kept(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                  const torch::Tensor& out, const torch::Tensor& lse, const AttentionPlan& plan,
                                  double scale) {
  ULY_CHECK(out.sizes() == q.sizes() && lse.size(0) == q.size(0) && lse.size(1) == q.size(2) &&
                lse.size(2) == q.size(1),
            "a kept attention output {} and lse {} for q {}", fmt::streamed(out.sizes()), fmt::streamed(lse.sizes()),
            fmt::streamed(q.sizes()));
  return KeptAttention::apply(q.contiguous(), k.contiguous(), v.contiguous(), out, lse,
                              c10::make_intrusive<KeptContext>(plan, scale));
}

}  // namespace ulysses::model
