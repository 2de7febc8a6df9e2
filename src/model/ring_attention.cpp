#include "model/ring_attention.hpp"

#include <fmt/ostream.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <limits>
#include <tuple>
#include <utility>

#include "core/error.hpp"

namespace ulysses::model {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

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

PieceMath ring_math(const RingContext& c, const AttentionPiece& p, const torch::Tensor& q) {
  return piece_math(c.kernel, p, c.plan.window, c.scale, q.options());
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

PieceRows piece_rows(const AttentionPiece& p, const std::array<TokenRange, 2>& q_chunks,
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
      for (const AttentionPiece& p : attention_pieces(c.plan, qc, kc, c.plan.window))
        f(p, piece_rows(p, mine, theirs));
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
    const auto acc = accumulation(q.scalar_type());
    const std::int64_t B = q.size(0), L = q.size(1), h = q.size(2);
    auto out = torch::zeros(q.sizes(), q.options().dtype(acc));                                      // [B, 2C, h, D]
    auto lse = torch::full({B, h, L}, -std::numeric_limits<double>::infinity(), q.options().dtype(acc));   // [B, h, 2C]
    torch::Tensor kv = torch::stack({k, v});                                                     // [2, B, 2C, hkv, D]
    for (std::int64_t t = 0; t < c->where.degree; ++t) {
      const std::int64_t held = (c->where.rank - t + c->where.degree) % c->where.degree;
      // the next block travels while this one's pieces run (double-buffered: kv is only read meanwhile)
      const auto arriving = t + 1 < c->where.degree ? pass_on(c->ring, c->where, kv) : nullptr;
      for_each_piece(*c, held, [&](const AttentionPiece& p, const PieceRows& at) {
        // o [1, Lq, h, D], l [1, h, Lq]
        auto [o, l] = piece_forward(ring_math(*c, p, q), at.queries(q), at.keys(kv[0]), at.keys(kv[1]));
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
    const auto acc = accumulation(q.scalar_type());
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
      for_each_piece(*c, held, [&](const AttentionPiece& p, const PieceRows& at) {
        auto [gq, gk, gv] = piece_backward(ring_math(*c, p, q), at.queries(dout), at.queries(q), at.keys(kv[0]),
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
  const Kernel resolved = resolve_kernel(kernel, q.device(), q.scalar_type(), q.size(3));
  const auto context = c10::make_intrusive<RingContext>(ring, where, plan, scale, resolved);
  return RingAttention::apply(q.contiguous(), k.contiguous(), v.contiguous(), context);
}

std::string piece_kernel(const c10::Device& device, c10::ScalarType dtype, std::int64_t head_dim) {
  return kernel_name(resolve_kernel(PieceKernel::kAuto, device, dtype, head_dim));
}

}  // namespace ulysses::model
