#include "model/ring_attention.hpp"

#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu_backward.h>
#include <fmt/ostream.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <limits>
#include <tuple>
#include <utility>

#include "core/error.hpp"

namespace ulysses::model {

std::vector<RingPiece> ring_pieces(const AttentionPlan& plan, TokenRange q_chunk, TokenRange k_chunk,
                                   std::optional<std::int64_t> window) {
  std::vector<RingPiece> pieces;
  if (k_chunk.begin > q_chunk.begin) return pieces;   // keys after the queries: causal attention sees none
  const bool same = k_chunk.begin == q_chunk.begin;
  for (std::size_t row = 0; row < plan.runs.size(); ++row)
    for (const auto& [doc_begin, doc_end] : plan.runs[row]) {
      RingPiece p{static_cast<std::int64_t>(row),
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

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The ring and the layout, kept for backward (ctx->saved_data holds IValues only).
struct RingContext : torch::CustomClassHolder {
  RingContext(comm::Communicator& c, RingPosition w, AttentionPlan p, double s, bool flash)
      : ring(c), where(w), plan(std::move(p)), scale(s), flash_cpu(flash) {}
  comm::Communicator& ring;
  RingPosition where;
  AttentionPlan plan;
  double scale;
  bool flash_cpu;   // the pieces by PyTorch's flash attention for CPU; else written out
};

// key ≤ query and query − key < window, as an additive mask [Lq, Lk] of `dtype` (0 allowed, −inf not)
torch::Tensor window_mask(const RingPiece& p, std::int64_t window, const torch::TensorOptions& opts) {
  const auto i = torch::arange(p.q.begin, p.q.end, opts.dtype(torch::kLong)).unsqueeze(1);   // [Lq, 1]
  const auto j = torch::arange(p.k.begin, p.k.end, opts.dtype(torch::kLong)).unsqueeze(0);   // [1, Lk]
  const auto allowed = (j <= i).logical_and(i - j < window);                                  // [Lq, Lk]
  return torch::zeros(allowed.sizes(), opts)
      .masked_fill(allowed.logical_not(), -std::numeric_limits<double>::infinity());
}

// The scores of a piece, written out: q [1, h, Lq, D], k [1, h, Lk, D] → [1, h, Lq, Lk] in the accumulation dtype
torch::Tensor scores(const torch::Tensor& q, const torch::Tensor& k, bool causal,
                     const std::optional<torch::Tensor>& mask, double scale, c10::ScalarType acc) {
  auto s = torch::matmul(q.to(acc), k.to(acc).transpose(-1, -2)) * scale;   // [1, h, Lq, Lk]
  if (causal) s = s.masked_fill(torch::ones({q.size(2), k.size(2)}, q.options().dtype(torch::kBool)).triu(1),
                                -std::numeric_limits<double>::infinity());
  if (mask) s = s + mask->to(acc);
  return s;
}

// One piece forward: q [1, h, Lq, D], k, v [1, h, Lk, D] → out [1, h, Lq, D] (q's dtype), lse [1, h, Lq] (acc)
std::pair<torch::Tensor, torch::Tensor> piece_forward(const torch::Tensor& q, const torch::Tensor& k,
                                                      const torch::Tensor& v, bool causal,
                                                      const std::optional<torch::Tensor>& mask, double scale,
                                                      c10::ScalarType acc, bool flash_cpu) {
  if (flash_cpu) {
    auto [out, lse] = at::_scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal, mask, scale);
    return {out, lse.to(acc)};
  }
  const auto s = scores(q, k, causal, mask, scale, acc);   // [1, h, Lq, Lk]
  const auto lse = s.logsumexp(-1);                          // [1, h, Lq]
  return {torch::matmul((s - lse.unsqueeze(-1)).exp(), v.to(acc)).to(q.scalar_type()), lse};
}

// One piece backward from the whole attention's out and lse → dq [1, h, Lq, D], dk, dv [1, h, Lk, D] (acc)
std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> piece_backward(
    const torch::Tensor& dout, const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
    const torch::Tensor& out, const torch::Tensor& lse, bool causal, const std::optional<torch::Tensor>& mask,
    double scale, c10::ScalarType acc, bool flash_cpu) {
  if (flash_cpu) {
    const auto kernel_lse = lse.to(q.scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat).contiguous();
    auto [dq, dk, dv] = at::_scaled_dot_product_flash_attention_for_cpu_backward(dout, q, k, v, out, kernel_lse, 0.0,
                                                                                  causal, mask, scale);
    return {dq.to(acc), dk.to(acc), dv.to(acc)};
  }
  const auto p = (scores(q, k, causal, mask, scale, acc) - lse.unsqueeze(-1)).exp();   // [1, h, Lq, Lk]
  const auto g = dout.to(acc);
  const auto dv = torch::matmul(p.transpose(-1, -2), g);                                 // [1, h, Lk, D]
  const auto rowsum = (g * out.to(acc)).sum(-1, /*keepdim=*/true);                       // [1, h, Lq, 1]
  const auto ds = p * (torch::matmul(g, v.to(acc).transpose(-1, -2)) - rowsum);          // [1, h, Lq, Lk]
  return {torch::matmul(ds, k.to(acc)) * scale, torch::matmul(ds.transpose(-1, -2), q.to(acc)) * scale, dv};
}

// Where a piece's tokens sit in a block [B, 2C, ...] whose two chunks are `chunks`.
std::int64_t local_begin(const std::array<TokenRange, 2>& chunks, std::int64_t position) {
  const bool tail = position >= chunks[1].begin && position < chunks[1].end;
  return tail ? chunks[0].size() + position - chunks[1].begin : position - chunks[0].begin;
}

// rows [begin, begin + n) of row `row` of a block [B, 2C, heads, D] as [1, heads, n, D]
torch::Tensor heads_view(const torch::Tensor& t, std::int64_t row, std::int64_t begin, std::int64_t n) {
  return t.narrow(0, row, 1).narrow(1, begin, n).transpose(1, 2);
}

// One piece's view of the pieces' inputs: q rows, k/v rows expanded to the query heads.
struct PieceTensors {
  std::int64_t q_begin, k_begin;   // in the blocks
  torch::Tensor q, k, v;           // [1, h, Lq, D], [1, h, Lk, D], [1, h, Lk, D], contiguous
  std::optional<torch::Tensor> mask;
};

PieceTensors piece_tensors(const RingPiece& p, const std::array<TokenRange, 2>& q_chunks,
                           const std::array<TokenRange, 2>& k_chunks, const torch::Tensor& q, const torch::Tensor& k,
                           const torch::Tensor& v, const AttentionPlan& plan) {
  PieceTensors t;
  t.q_begin = local_begin(q_chunks, p.q.begin), t.k_begin = local_begin(k_chunks, p.k.begin);
  const std::int64_t h = q.size(2);
  auto expanded = [&](const torch::Tensor& kv) {   // [1, hkv, Lk, D] → [1, h, Lk, D]
    return expand_kv_heads(heads_view(kv, p.row, t.k_begin, p.k.size()), h).contiguous();
  };
  t.q = heads_view(q, p.row, t.q_begin, p.q.size()).contiguous();
  t.k = expanded(k), t.v = expanded(v);
  if (p.masked) t.mask = window_mask(p, *plan.window, q.options());
  return t;
}

// Every piece this rank computes at one ring step, holding the k/v block of ring rank `held`.
template <typename F>
void for_each_piece(const RingContext& c, std::int64_t held, F&& f) {
  const auto mine = ring_block(c.where.seq_len, c.where.degree, c.where.rank);
  const auto theirs = ring_block(c.where.seq_len, c.where.degree, held);
  for (const TokenRange& qc : mine)
    for (const TokenRange& kc : theirs)
      for (const RingPiece& p : ring_pieces(c.plan, qc, kc, c.plan.window)) f(p, mine, theirs);
}

c10::ScalarType accumulation(const torch::Tensor& q) {
  return q.scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat;
}

std::int64_t next(const RingPosition& w) { return (w.rank + 1) % w.degree; }
std::int64_t previous(const RingPosition& w) { return (w.rank + w.degree - 1) % w.degree; }

// Sends x ([2, B, 2C, hkv, D]: k and v, or their gradients, as one tensor) to the next ring rank and receives the
// previous one's; the caller computes before it waits.
std::unique_ptr<comm::Communicator::Exchange> pass_on(comm::Communicator& ring, const RingPosition& w,
                                                      const torch::Tensor& x) {
  return ring.start_send_recv(x, static_cast<int>(next(w)), static_cast<int>(previous(w)));
}

struct RingAttention : torch::autograd::Function<RingAttention> {
  // q [B, 2C, h, D], k, v [B, 2C, hkv, D] → [B, 2C, h, D]
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, c10::intrusive_ptr<RingContext> c) {
    const auto acc = accumulation(q);
    const std::int64_t B = q.size(0), L = q.size(1), h = q.size(2), D = q.size(3);
    auto out = torch::zeros({B, h, L, D}, q.options().dtype(acc));                                  // [B, h, 2C, D]
    auto lse = torch::full({B, h, L}, -std::numeric_limits<double>::infinity(), q.options().dtype(acc));   // [B, h, 2C]
    torch::Tensor kv = torch::stack({k, v});                                                         // [2, B, 2C, hkv, D]
    for (std::int64_t t = 0; t < c->where.degree; ++t) {
      const std::int64_t held = (c->where.rank - t + c->where.degree) % c->where.degree;
      // the next block travels while this one's pieces run (double-buffered: kv is only read meanwhile)
      const auto arriving = t + 1 < c->where.degree ? pass_on(c->ring, c->where, kv) : nullptr;
      for_each_piece(*c, held, [&](const RingPiece& p, const auto& mine, const auto& theirs) {
        const PieceTensors in = piece_tensors(p, mine, theirs, q, kv[0], kv[1], c->plan);
        // o [1, h, Lq, D], l [1, h, Lq]
        auto [o, l] = piece_forward(in.q, in.k, in.v, p.causal, in.mask, c->scale, acc, c->flash_cpu);
        auto o_acc = out.narrow(0, p.row, 1).narrow(2, in.q_begin, p.q.size());
        auto l_acc = lse.narrow(0, p.row, 1).narrow(2, in.q_begin, p.q.size());
        const auto merged = torch::logaddexp(l_acc, l);
        o_acc.copy_(o_acc * (l_acc - merged).exp().unsqueeze(-1) + o.to(acc) * (l - merged).exp().unsqueeze(-1));
        l_acc.copy_(merged);
      });
      if (arriving) kv = arriving->wait();
    }
    const torch::Tensor result = out.transpose(1, 2).to(q.scalar_type()).contiguous();   // [B, 2C, h, D]
    ctx->save_for_backward({q, k, v, result, lse});
    ctx->saved_data["ring"] = c10::IValue::make_capsule(c);
    return result;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[3], &lse = saved[4];
    const auto c = c10::static_intrusive_pointer_cast<RingContext>(ctx->saved_data["ring"].toCapsule());
    const auto acc = accumulation(q);
    const torch::Tensor dout = grad_out[0].contiguous();                         // [B, 2C, h, D]
    auto dq = torch::zeros(q.sizes(), q.options().dtype(acc));                   // [B, 2C, h, D]
    torch::Tensor kv = torch::stack({k, v});                                     // [2, B, 2C, hkv, D]
    // The gradient of each k/v block travels behind it: at step t this rank adds its share for the block it holds
    // into what arrived for that block (sent by the previous rank after its step t − 1) and passes the sum on while
    // the next step runs; after the last step the sum of every rank's share arrives at the block's own rank.
    std::unique_ptr<comm::Communicator::Exchange> gradient_arriving;
    const std::int64_t hkv = k.size(2), group = q.size(2) / hkv;
    for (std::int64_t t = 0; t < c->where.degree; ++t) {
      const std::int64_t held = (c->where.rank - t + c->where.degree) % c->where.degree;
      const auto arriving = t + 1 < c->where.degree ? pass_on(c->ring, c->where, kv) : nullptr;
      torch::Tensor dkv = torch::zeros(kv.sizes(), kv.options().dtype(acc));   // [2, B, 2C, hkv, D]: this rank's share
      for_each_piece(*c, held, [&](const RingPiece& p, const auto& mine, const auto& theirs) {
        const PieceTensors in = piece_tensors(p, mine, theirs, q, kv[0], kv[1], c->plan);
        const auto rows = [&](const torch::Tensor& x) {   // the piece's queries of a [B, 2C, h, D] block
          return heads_view(x, p.row, in.q_begin, p.q.size()).contiguous();
        };
        const auto l = lse.narrow(0, p.row, 1).narrow(2, in.q_begin, p.q.size());   // [1, h, Lq]
        auto [gq, gk, gv] =
            piece_backward(rows(dout), in.q, in.k, in.v, rows(out), l, p.causal, in.mask, c->scale, acc, c->flash_cpu);
        heads_view(dq, p.row, in.q_begin, p.q.size()).add_(gq);
        auto to_kv_heads = [&](const torch::Tensor& g) {   // [1, h, Lk, D] → [1, hkv, Lk, D]: summed over each group
          return g.view({1, hkv, group, p.k.size(), g.size(3)}).sum(2);
        };
        heads_view(dkv[0], p.row, in.k_begin, p.k.size()).add_(to_kv_heads(gk));
        heads_view(dkv[1], p.row, in.k_begin, p.k.size()).add_(to_kv_heads(gv));
      });
      if (gradient_arriving) dkv += gradient_arriving->wait();
      gradient_arriving = pass_on(c->ring, c->where, dkv);
      if (arriving) kv = arriving->wait();
    }
    const torch::Tensor dkv = gradient_arriving->wait();   // this rank's own block's, from every rank
    return {dq.to(q.scalar_type()), dkv[0].to(k.scalar_type()), dkv[1].to(v.scalar_type()), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor ring_attention(comm::Communicator& ring, const RingPosition& where, const torch::Tensor& q,
                             const torch::Tensor& k, const torch::Tensor& v, const AttentionPlan& plan, double scale,
                             PieceKernel kernel) {
  ULY_CHECK(ring.size() == where.degree && ring.rank() == where.rank, "ring group of {} (rank {}) for ring {} (rank {})",
            ring.size(), ring.rank(), where.degree, where.rank);
  ULY_CHECK(q.size(1) * where.degree == where.seq_len && k.sizes() == v.sizes() && q.size(2) % k.size(2) == 0,
            "ring block q {} k {} v {} for S = {} in {} blocks", fmt::streamed(q.sizes()), fmt::streamed(k.sizes()),
            fmt::streamed(v.sizes()), where.seq_len, where.degree);
  const bool flash_cpu = q.is_cpu() && kernel == PieceKernel::kAuto;
  return RingAttention::apply(q, k, v, c10::make_intrusive<RingContext>(ring, where, plan, scale, flash_cpu));
}

}  // namespace ulysses::model
