#include "model/ring_attention.hpp"

#include <ATen/ops/_flash_attention_backward.h>
#include <ATen/ops/_flash_attention_forward.h>
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

PieceWindow piece_window(const RingPiece& p, std::int64_t window) {
  const std::int64_t right = p.q.end - p.k.end;   // 0 on the same tokens; past every key when the keys come first
  return {window - 1 - right, right};
}

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The kernel that computes the pieces: PieceKernel resolved for the tensors.
enum class Kernel { kFlashCpu, kFlashCuda, kWrittenOut };

Kernel resolve(PieceKernel asked, const c10::Device& device, c10::ScalarType dtype, std::int64_t head_dim) {
  if (asked == PieceKernel::kWrittenOut) return Kernel::kWrittenOut;
  if (device.is_cpu()) return Kernel::kFlashCpu;
  return flash_applies(device, dtype, head_dim) ? Kernel::kFlashCuda : Kernel::kWrittenOut;
}

// The ring and the layout, kept for backward (ctx->saved_data holds IValues only).
struct RingContext : torch::CustomClassHolder {
  RingContext(comm::Communicator& c, RingPosition w, AttentionPlan p, double s, Kernel k)
      : ring(c), where(w), plan(std::move(p)), scale(s), kernel(k) {}
  comm::Communicator& ring;
  RingPosition where;
  AttentionPlan plan;
  double scale;
  Kernel kernel;
};

// key ≤ query and query − key < window, as an additive mask [Lq, Lk] of `dtype` (0 allowed, −inf not)
torch::Tensor window_mask(const RingPiece& p, std::int64_t window, const torch::TensorOptions& opts) {
  const auto i = torch::arange(p.q.begin, p.q.end, opts.dtype(torch::kLong)).unsqueeze(1);   // [Lq, 1]
  const auto j = torch::arange(p.k.begin, p.k.end, opts.dtype(torch::kLong)).unsqueeze(0);   // [1, Lk]
  const auto allowed = (j <= i).logical_and(i - j < window);                                  // [Lq, Lk]
  return torch::zeros(allowed.sizes(), opts)
      .masked_fill(allowed.logical_not(), -std::numeric_limits<double>::infinity());
}

// How one piece is computed: its kernel, causal or not, its window (the CUDA kernel's) or mask (the CPU kernels').
struct PieceMath {
  Kernel kernel;
  bool causal;
  std::optional<PieceWindow> window;
  std::optional<torch::Tensor> mask;   // [Lq, Lk] additive
  double scale;
  c10::ScalarType acc;                 // the accumulation dtype
};

PieceMath piece_math(const RingContext& c, const RingPiece& p, const torch::Tensor& q, c10::ScalarType acc) {
  PieceMath m{c.kernel, p.causal, std::nullopt, std::nullopt, c.scale, acc};
  if (!p.masked) return m;
  if (c.kernel == Kernel::kFlashCuda)
    m.window = piece_window(p, *c.plan.window);
  else
    m.mask = window_mask(p, *c.plan.window, q.options());
  return m;
}

// The layout of the CPU kernels: rows [1, L, heads, D] → [1, h, L, D], KV heads repeated to the h query heads.
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

// One piece forward: q [1, Lq, h, D], k, v [1, Lk, hkv, D] (rows of the blocks) → out [1, Lq, h, D] (q's dtype),
// lse [1, h, Lq] (acc)
std::pair<torch::Tensor, torch::Tensor> piece_forward(const PieceMath& m, const torch::Tensor& q,
                                                      const torch::Tensor& k, const torch::Tensor& v) {
  const std::int64_t Lq = q.size(1), Lk = k.size(1), h = q.size(2);
  if (m.kernel == Kernel::kFlashCuda) {   // GQA native; lse [1, h, Lq] float
    auto r = at::_flash_attention_forward(q, k, v, std::nullopt, std::nullopt, Lq, Lk, /*dropout_p=*/0.0, m.causal,
                                          /*return_debug_mask=*/false, m.scale, left(m), right(m));
    return {std::get<0>(r), std::get<1>(r).reshape({1, h, Lq})};
  }
  const auto qt = heads_first(q, h), kt = heads_first(k, h), vt = heads_first(v, h);   // [1, h, L, D]
  if (m.kernel == Kernel::kFlashCpu) {
    auto [out, lse] = at::_scaled_dot_product_flash_attention_for_cpu(qt, kt, vt, 0.0, m.causal, m.mask, m.scale);
    return {out.transpose(1, 2), lse.to(m.acc)};
  }
  const auto s = scores(m, qt, kt);    // [1, h, Lq, Lk]
  const auto lse = s.logsumexp(-1);    // [1, h, Lq]
  return {torch::matmul((s - lse.unsqueeze(-1)).exp(), vt.to(m.acc)).to(q.scalar_type()).transpose(1, 2), lse};
}

// One piece backward from the whole attention's out [1, Lq, h, D] and lse [1, h, Lq] (rows, as piece_forward's)
// → dq [1, Lq, h, D], dk, dv [1, Lk, hkv, D] (acc)
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
  const auto qt = heads_first(q, h), kt = heads_first(k, h), vt = heads_first(v, h);   // [1, h, L, D]
  const auto gt = heads_first(dout, h), ot = heads_first(out, h);                        // [1, h, Lq, D]
  if (m.kernel == Kernel::kFlashCpu) {
    const auto kernel_lse = lse.to(q.scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat).contiguous();
    auto [dq, dk, dv] = at::_scaled_dot_product_flash_attention_for_cpu_backward(gt, qt, kt, vt, ot, kernel_lse, 0.0,
                                                                                  m.causal, m.mask, m.scale);
    return {dq.to(m.acc).transpose(1, 2), to_rows(dk.to(m.acc), hkv), to_rows(dv.to(m.acc), hkv)};
  }
  const auto p = (scores(m, qt, kt) - lse.unsqueeze(-1)).exp();                         // [1, h, Lq, Lk]
  const auto g = gt.to(m.acc);
  const auto dv = torch::matmul(p.transpose(-1, -2), g);                                 // [1, h, Lk, D]
  const auto rowsum = (g * ot.to(m.acc)).sum(-1, /*keepdim=*/true);                      // [1, h, Lq, 1]
  const auto ds = p * (torch::matmul(g, vt.to(m.acc).transpose(-1, -2)) - rowsum);       // [1, h, Lq, Lk]
  return {(torch::matmul(ds, kt.to(m.acc)) * m.scale).transpose(1, 2),
          to_rows(torch::matmul(ds.transpose(-1, -2), qt.to(m.acc)) * m.scale, hkv), to_rows(dv, hkv)};
}

// Where a piece's tokens sit in a block [B, 2C, ...] whose two chunks are `chunks`.
std::int64_t local_begin(const std::array<TokenRange, 2>& chunks, std::int64_t position) {
  const bool tail = position >= chunks[1].begin && position < chunks[1].end;
  return tail ? chunks[0].size() + position - chunks[1].begin : position - chunks[0].begin;
}

// A piece's place in the blocks: its query rows and key rows of batch row `row` of a block [B, 2C, heads, D], each
// as [1, n, heads, D].
struct PieceRows {
  std::int64_t row, q_begin, q_size, k_begin, k_size;
  torch::Tensor queries(const torch::Tensor& block) const { return block.narrow(0, row, 1).narrow(1, q_begin, q_size); }
  torch::Tensor keys(const torch::Tensor& block) const { return block.narrow(0, row, 1).narrow(1, k_begin, k_size); }
  torch::Tensor lse(const torch::Tensor& lse_block) const {   // [B, h, 2C] → [1, h, Lq]
    return lse_block.narrow(0, row, 1).narrow(2, q_begin, q_size);
  }
};

PieceRows piece_rows(const RingPiece& p, const std::array<TokenRange, 2>& q_chunks,
                     const std::array<TokenRange, 2>& k_chunks) {
  return {p.row, local_begin(q_chunks, p.q.begin), p.q.size(), local_begin(k_chunks, p.k.begin), p.k.size()};
}

// Every piece this rank computes at one ring step, holding the k/v block of ring rank `held`: f(piece, its rows).
template <typename F>
void for_each_piece(const RingContext& c, std::int64_t held, F&& f) {
  const auto mine = ring_block(c.where.seq_len, c.where.degree, c.where.rank);
  const auto theirs = ring_block(c.where.seq_len, c.where.degree, held);
  for (const TokenRange& qc : mine)
    for (const TokenRange& kc : theirs)
      for (const RingPiece& p : ring_pieces(c.plan, qc, kc, c.plan.window)) f(p, piece_rows(p, mine, theirs));
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

// [1, h, Lq] → [1, Lq, h, 1]: a weight per query and head, on rows
torch::Tensor on_rows(const torch::Tensor& x) { return x.transpose(1, 2).unsqueeze(-1); }

struct RingAttention : torch::autograd::Function<RingAttention> {
  // q [B, 2C, h, D], k, v [B, 2C, hkv, D] (contiguous) → [B, 2C, h, D]
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, c10::intrusive_ptr<RingContext> c) {
    const auto acc = accumulation(q);
    const std::int64_t B = q.size(0), L = q.size(1), h = q.size(2);
    auto out = torch::zeros(q.sizes(), q.options().dtype(acc));                                      // [B, 2C, h, D]
    auto lse = torch::full({B, h, L}, -std::numeric_limits<double>::infinity(), q.options().dtype(acc));   // [B, h, 2C]
    torch::Tensor kv = torch::stack({k, v});                                                     // [2, B, 2C, hkv, D]
    for (std::int64_t t = 0; t < c->where.degree; ++t) {
      const std::int64_t held = (c->where.rank - t + c->where.degree) % c->where.degree;
      // the next block travels while this one's pieces run (double-buffered: kv is only read meanwhile)
      const auto arriving = t + 1 < c->where.degree ? pass_on(c->ring, c->where, kv) : nullptr;
      for_each_piece(*c, held, [&](const RingPiece& p, const PieceRows& at) {
        // o [1, Lq, h, D], l [1, h, Lq]
        auto [o, l] = piece_forward(piece_math(*c, p, q, acc), at.queries(q), at.keys(kv[0]), at.keys(kv[1]));
        auto o_acc = at.queries(out);   // [1, Lq, h, D]
        auto l_acc = at.lse(lse);       // [1, h, Lq]
        const auto merged = torch::logaddexp(l_acc, l);
        o_acc.mul_(on_rows((l_acc - merged).exp())).add_(o.to(acc).mul_(on_rows((l - merged).exp())));
        l_acc.copy_(merged);
      });
      if (arriving) kv = arriving->wait();
    }
    const torch::Tensor result = out.to(q.scalar_type());   // [B, 2C, h, D]
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
    for (std::int64_t t = 0; t < c->where.degree; ++t) {
      const std::int64_t held = (c->where.rank - t + c->where.degree) % c->where.degree;
      const auto arriving = t + 1 < c->where.degree ? pass_on(c->ring, c->where, kv) : nullptr;
      torch::Tensor dkv = torch::zeros(kv.sizes(), kv.options().dtype(acc));   // [2, B, 2C, hkv, D]: this rank's share
      for_each_piece(*c, held, [&](const RingPiece& p, const PieceRows& at) {
        auto [gq, gk, gv] = piece_backward(piece_math(*c, p, q, acc), at.queries(dout), at.queries(q), at.keys(kv[0]),
                                           at.keys(kv[1]), at.queries(out), at.lse(lse));
        at.queries(dq).add_(gq);
        at.keys(dkv[0]).add_(gk);
        at.keys(dkv[1]).add_(gv);
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
  const Kernel resolved = resolve(kernel, q.device(), q.scalar_type(), q.size(3));
  const auto context = c10::make_intrusive<RingContext>(ring, where, plan, scale, resolved);
  return RingAttention::apply(q.contiguous(), k.contiguous(), v.contiguous(), context);
}

std::string piece_kernel(const c10::Device& device, c10::ScalarType dtype, std::int64_t head_dim) {
  switch (resolve(PieceKernel::kAuto, device, dtype, head_dim)) {
    case Kernel::kFlashCpu: return "PyTorch's flash attention for CPU";
    case Kernel::kFlashCuda: return "flash attention (FlashAttention-2, grouped KV heads native)";
    case Kernel::kWrittenOut: break;
  }
  return "the arithmetic written out (fp32 scores of the piece: no flash kernel for this dtype, GPU or head size)";
}

}  // namespace ulysses::model
