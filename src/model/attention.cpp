#include "model/attention.hpp"

#include <algorithm>
#include <array>
#include <cmath>

#include "core/error.hpp"
#include "model/recompute.hpp"
#include "model/ring_attention.hpp"
#include "model/ulysses.hpp"

namespace ulysses::model {

AttentionImpl::AttentionImpl(const arch::LayerSpec& layer, const SequenceParallel& sp, const HeadGroups& head_groups,
                             const LoraOptions& lora)
    : heads_(layer.attention.heads), kv_heads_(layer.attention.kv_heads), head_dim_(layer.attention.head_dim),
      head_groups_(head_groups), qk_norm_eps_(layer.attention.norm_eps), input_norm_eps_(layer.input_norm.eps),
      lora_scale_(lora.enabled() ? lora.scale() : 0), ulysses_degree_(sp.ulysses_degree()),
      ulysses_(sp.ulysses_group()), ulysses_ahead_(sp.ulysses_ahead_group()), ring_(sp.ring_group()),
      ring_position_{0, sp.ring_rank(), sp.ring_degree()} {
  const arch::AttentionSpec& a = layer.attention;
  ULY_CHECK(a.kind == arch::MixerKind::kSoftmaxAttention, "layer {}: a token mixer this model has no module for",
            layer.index);
  if (ulysses_degree_ > 1) {
    ULY_CHECK(ulysses_ != nullptr && ulysses_->size() == ulysses_degree_,
              "Ulysses degree {} needs its group's communicator (size {})", ulysses_degree_,
              ulysses_ ? ulysses_->size() : 0);
  }
  ULY_CHECK(sp.ring_degree() == 1 || (ring_ != nullptr && ring_->size() == sp.ring_degree()),
            "ring degree {} needs its group's communicator (size {})", sp.ring_degree(), ring_ ? ring_->size() : 0);
  auto linear = [](std::int64_t in, std::int64_t out, bool bias) {
    return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(bias));
  };
  q_proj = register_module("q_proj", linear(a.hidden, heads_ * head_dim_, a.qkv_bias));
  k_proj = register_module("k_proj", linear(a.hidden, kv_heads_ * head_dim_, a.qkv_bias));
  v_proj = register_module("v_proj", linear(a.hidden, kv_heads_ * head_dim_, a.qkv_bias));
  o_proj = register_module("o_proj", linear(heads_ * head_dim_, a.hidden, a.o_bias));
  add_adapter(q_proj, "q_proj", lora);
  add_adapter(k_proj, "k_proj", lora);
  add_adapter(v_proj, "v_proj", lora);
  add_adapter(o_proj, "o_proj", lora);
  if (a.qk_norm) {
    q_norm = register_module("q_norm", RMSNorm(head_dim_, a.norm_eps));
    k_norm = register_module("k_norm", RMSNorm(head_dim_, a.norm_eps));
  }
}

AttentionWeights AttentionImpl::weights() const {
  AttentionWeights w{q_proj->weight, k_proj->weight, v_proj->weight, o_proj->weight,
                     q_proj->bias,   k_proj->bias,   v_proj->bias,   o_proj->bias};
  if (q_norm) {
    w.q_norm = q_norm->weight;
    w.k_norm = k_norm->weight;
  }
  w.q_lora = adapter_of(q_proj), w.k_lora = adapter_of(k_proj), w.v_lora = adapter_of(v_proj);
  w.o_lora = adapter_of(o_proj);
  w.lora_scale = lora_scale_;
  return w;
}

torch::Tensor AttentionImpl::forward_normed(const torch::Tensor& x, const torch::Tensor& norm_weight,
                                            const RopeTables& rope, const AttentionPlan& plan,
                                            const AttentionWeights& w) const {
  AttentionWeights normed = w;   // applied where the heads are projected (heads_for_attention), in each group
  normed.input_norm = norm_weight;
  return forward(x, rope, plan, normed);
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& x, const RopeTables& rope, const AttentionPlan& plan,
                                     const AttentionWeights& w) const {
  if (head_groups_.groups > 1) {
    const torch::Tensor y = forward_in_groups(x, rope, plan, w);   // [B, S/P, hidden], o_proj's bias not added
    return w.o_bias.defined() ? y + w.o_bias : y;
  }
  const torch::Tensor heads = attend_heads(heads_for_attention(x, rope, w, ulysses_), x.size(1), plan);   // [B,S/P,H*D]
  return project(heads, w.o, w.o_bias, w.o_lora, w.lora_scale);   // [B, S/P, hidden]
}

std::vector<torch::Tensor*> tensor_slots(AttentionWeights& w) {
  return {&w.q,        &w.k,        &w.v,        &w.o,        &w.q_bias,   &w.k_bias,   &w.v_bias,
          &w.o_bias,   &w.q_norm,   &w.k_norm,   &w.q_lora.a, &w.q_lora.b, &w.k_lora.a, &w.k_lora.b,
          &w.v_lora.a, &w.v_lora.b, &w.o_lora.a, &w.o_lora.b, &w.input_norm};
}

namespace {

// The weights a group's function was handed (SlotMask::take's order), back in their slots.
AttentionWeights handed_weights(const SlotMask& mask, const std::vector<torch::Tensor>& ws, double lora_scale) {
  AttentionWeights w;
  w.lora_scale = lora_scale;
  mask.put(tensor_slots(w), ws);
  return w;
}

}  // namespace

AttentionWeights AttentionImpl::group_weights(const AttentionWeights& w, std::int64_t group) const {
  const std::int64_t D = head_dim_, G = head_groups_.groups, q = heads_ / G;
  // its own Hkv/G key/value heads, or the one it shares with the other groups of that head's query heads
  const std::int64_t kv = std::max<std::int64_t>(kv_heads_ / G, 1), first_kv = group * kv_heads_ / G;
  auto rows = [D](const torch::Tensor& t, std::int64_t first, std::int64_t n) {   // heads [first, first + n)
    return t.defined() ? t.narrow(0, first * D, n * D) : t;
  };
  auto columns = [D](const torch::Tensor& t, std::int64_t first, std::int64_t n) {   // the same heads' columns
    return t.defined() ? t.narrow(1, first * D, n * D) : t;
  };
  AttentionWeights g = w;
  g.q = rows(w.q, group * q, q), g.q_bias = rows(w.q_bias, group * q, q);               // [q*D, hidden], [q*D]
  g.k = rows(w.k, first_kv, kv), g.k_bias = rows(w.k_bias, first_kv, kv);               // [kv*D, hidden], [kv*D]
  g.v = rows(w.v, first_kv, kv), g.v_bias = rows(w.v_bias, first_kv, kv);
  g.q_lora.b = rows(w.q_lora.b, group * q, q);   // an adapter's B rows are its projection's; A is every head's
  g.k_lora.b = rows(w.k_lora.b, first_kv, kv), g.v_lora.b = rows(w.v_lora.b, first_kv, kv);
  g.o = columns(w.o, group * q, q);   // [hidden, q*D]: o_proj of its heads' output
  g.o_lora.a = columns(w.o_lora.a, group * q, q);   // [r, q*D]; o_proj's adapter B [hidden, r] is every group's
  g.o_bias = torch::Tensor();
  return g;
}

torch::Tensor AttentionImpl::forward_in_groups(const torch::Tensor& x, const RopeTables& rope,
                                               const AttentionPlan& plan, const AttentionWeights& w) const {
  const auto self = std::static_pointer_cast<const AttentionImpl>(shared_from_this());
  AttentionWeights all = w;
  all.o_bias = torch::Tensor();   // added once, to the groups' sum
  SlotMask mask;
  const std::vector<torch::Tensor> handed = mask.take(tensor_slots(all));   // its defined tensors, in slot order
  const bool keep = keeps_attention_output(x), ahead = head_groups_.ahead != nullptr;
  // kept by the graph for backward: the module, copies of the rope tables and the plan, which slots are there
  const double scale = w.lora_scale;
  // group c's weights: views of its heads' rows of q/k/v_proj and columns of o_proj
  const auto weights = [self, mask, scale](const Chunk& c, const std::vector<torch::Tensor>& ws) {
    return self->group_weights(handed_weights(mask, ws, scale), c.index);
  };
  // group c's o_proj product [B, S/P, hidden] (added over the groups) and, kept, its heads' output and log-sum-exp
  const ChunkForward group = [self, rope, plan, keep, ahead, weights](const Chunk& c, const torch::Tensor& in,
                                                                      const std::vector<torch::Tensor>& ws) {
    const AttentionWeights g = weights(c, ws);
    const Heads h = ahead ? Heads{c.ahead.at(0), c.ahead.at(1), c.ahead.at(2)}
                          : self->heads_for_attention(in, rope, g, self->ulysses_);
    const auto o_proj = [&g](const torch::Tensor& heads) { return project(heads, g.o, {}, g.o_lora, g.lora_scale); };
    const std::int64_t s = in.size(1);
    if (!keep) return torch::autograd::variable_list{o_proj(self->attend_heads(h, s, plan))};
    const auto heads = self->attend_heads_kept(h, s, plan, c.kept);   // [B, S/P, its heads·D], its lse
    return torch::autograd::variable_list{o_proj(heads[0]), heads[0], heads[1]};
  };
  Recompute recompute;
  recompute.precision = head_groups_.precision;
  recompute.chunking.columns = head_groups_.groups;
  recompute.keep_outputs = keep;
  if (ahead) {
    recompute.ahead = [self, rope, weights](const Chunk& c, const torch::Tensor& in,
                                            const std::vector<torch::Tensor>& ws) {
      const Heads h = self->heads_for_attention(in, rope, weights(c, ws), self->ulysses_ahead_);
      return torch::autograd::variable_list{h.q, h.k, h.v};
    };
    recompute.ahead_stream = head_groups_.ahead->on(x.device());
  }
  return recomputed(group, x, handed, recompute)[0];   // [B, S/P, hidden]: the groups' products added
}

bool AttentionImpl::keeps_attention_output(const torch::Tensor& x) const {
  const c10::ScalarType compute = compute_dtype(head_groups_.precision);   // bf16 in both bf16 modes
  return !ring_ && flash_pieces(x.device(), compute == torch::kFloat ? x.scalar_type() : compute, head_dim_);
}

namespace {

// xn [B, S/P, hidden] -> its q, k, v projections without adapters ([B, S/P, h·D], [B, S/P, hkv·D] twice). In head
// groups (one_product), one product with the group's q/k/v_proj rows stacked (and their biases, which are all there or
// none): in backward one input gradient [B, S/P, hidden], where three products' would be summed beside one another —
// the largest tensors of a head group's backward once its heads' ran. q and k are views of the product, which RoPE
// reads and lets go of; v, which attention keeps, is a copy, so that it does not keep the product's q and k alive. The
// stacked rows, which the product's backward keeps, are then one group's, recomputed in its backward: transient. All
// heads at once, three products: each backward keeps its weight itself, not a copy (kept through the whole forward
// in the plain path).
std::array<torch::Tensor, 3> project_qkv(const torch::Tensor& xn, const AttentionWeights& w, bool one_product) {
  const Lora none;   // the adapters are added to each part (with_adapter)
  if (!one_product)
    return {project(xn, w.q, w.q_bias, none, 0), project(xn, w.k, w.k_bias, none, 0),
            project(xn, w.v, w.v_bias, none, 0)};
  const torch::Tensor bias = w.q_bias.defined() ? at::cat({w.q_bias, w.k_bias, w.v_bias}) : torch::Tensor();
  const torch::Tensor qkv = project(xn, at::cat({w.q, w.k, w.v}), bias, none, 0);   // [B, S/P, (h + 2·hkv)·D]
  const auto parts = at::split_with_sizes(qkv, {w.q.size(0), w.k.size(0), w.v.size(0)}, -1);
  return {parts[0], parts[1], parts[2].clone(at::MemoryFormat::Contiguous)};
}

}  // namespace

AttentionImpl::Heads AttentionImpl::heads_for_attention(const torch::Tensor& x, const RopeTables& rope,
                                                        const AttentionWeights& w, comm::Communicator* a2a) const {
  const std::int64_t B = x.size(0), s = x.size(1);   // s = S/P
  const std::int64_t heads = w.q.size(0) / head_dim_, kv_heads = w.k.size(0) / head_dim_;   // all, or one group's
  const double r = w.lora_scale;
  const torch::Tensor xn =   // [B, S/P, hidden]
      w.input_norm.defined() ? rms_norm_for_matmul(x, w.input_norm, input_norm_eps_) : x;
  const auto [q_rows, k_rows, v_rows] = project_qkv(xn, w, head_groups_.groups > 1);
  auto q = with_adapter(q_rows, xn, w.q_lora, r).view({B, s, heads, head_dim_});      // [B, S/P, H*D] -> ..., H, D]
  auto k = with_adapter(k_rows, xn, w.k_lora, r).view({B, s, kv_heads, head_dim_});   // [B, S/P, Hkv*D] -> ..Hkv, D]
  auto v = with_adapter(v_rows, xn, w.v_lora, r).view({B, s, kv_heads, head_dim_});   // [B, S/P, Hkv*D] -> ..Hkv, D]
  if (w.q_norm.defined()) {
    q = rms_norm(q, w.q_norm, qk_norm_eps_);   // [B, S/P, H, D], normalised over D
    k = rms_norm(k, w.k_norm, qk_norm_eps_);   // [B, S/P, Hkv, D]
  }
  // RoPE (and q/k norm) compute in float32 when the projections ran in bf16 (autocast); the result goes back
  // to the projections' dtype, so the all-to-alls and attention stay bf16 (SDPA would cast to it anyway).
  const auto compute = v.scalar_type();
  q = apply_rope(q, rope).to(compute);
  k = apply_rope(k, rope).to(compute);
  if (!a2a) return {q, k, v};   // U = 1: S/R = S/P
  // U = P without a ring: the block is the whole sequence, S/R = S
  const std::int64_t U = ulysses_degree_;
  k = replicate_kv_heads_for_sp(k, U);   // [B, S/P, max(Hkv, U), D]
  v = replicate_kv_heads_for_sp(v, U);   // [B, S/P, max(Hkv, U), D]
  return {scatter_heads_gather_sequence(*a2a, q),    // [B, S/R, H/U, D]
          scatter_heads_gather_sequence(*a2a, k),    // [B, S/R, max(Hkv, U)/U, D]
          scatter_heads_gather_sequence(*a2a, v)};   // [B, S/R, max(Hkv, U)/U, D]
}

torch::Tensor AttentionImpl::heads_back(const torch::Tensor& out, std::int64_t s) const {
  const torch::Tensor mine = ulysses_ ? scatter_sequence_gather_heads(*ulysses_, out) : out;   // [B, S/P, H, D]
  return mine.reshape({mine.size(0), s, mine.size(2) * head_dim_});                            // [B, S/P, H*D]
}

torch::Tensor AttentionImpl::attend_heads(const Heads& h, std::int64_t s, const AttentionPlan& plan) const {
  return heads_back(ring_ ? ring_attend(h.q, h.k, h.v, plan) : attend(h.q, h.k, h.v, plan), s);
}

torch::autograd::variable_list AttentionImpl::attend_heads_kept(const Heads& h, std::int64_t s,
                                                                const AttentionPlan& plan,
                                                                const std::vector<torch::Tensor>& kept) const {
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim_));
  if (kept.empty()) {
    auto [out, lse] = attention_with_lse(h.q, h.k, h.v, plan, scale);   // [B, S, h, D], [B, h, S]
    return {heads_back(out, s), lse};
  }
  torch::Tensor out;   // the kept output in attention's layout, [B, S, h, D]: data, not part of the graph
  {
    const torch::NoGradGuard data;
    const torch::Tensor& y = kept[0];   // [B, S/P, heads·D]
    out = y.reshape({y.size(0), y.size(1), y.size(2) / head_dim_, head_dim_});
    if (ulysses_) out = scatter_heads_gather_sequence(*ulysses_, out);
  }
  return {heads_back(attention_from_kept(h.q, h.k, h.v, out, kept[1], plan, scale), s), kept[1]};
}

namespace {

// The Ulysses group's ranks each hold a piece of both chunks of the ring block, so its all-to-all gathers the block as
// [B, U, 2, C/U, h, D] (rank-major); the ring works on the chunks in order, [B, 2, U, C/U, h, D]. to_chunks: the
// first into the second; its inverse swaps the same two axes back. Identity at U = 1.
torch::Tensor swap_rank_and_chunk(const torch::Tensor& x, std::int64_t first, std::int64_t second) {
  const std::int64_t B = x.size(0), L = x.size(1);
  return x.reshape({B, first, second, L / (first * second), x.size(2), x.size(3)}).transpose(1, 2).reshape(x.sizes());
}

}  // namespace

// q [B, S/R, h, D], k, v [B, S/R, hkv, D] as the Ulysses all-to-all gathered them → ring attention → the same order
torch::Tensor AttentionImpl::ring_attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                         const AttentionPlan& plan) const {
  const std::int64_t U = ulysses_degree_;
  RingPosition where = ring_position_;
  where.seq_len = q.size(1) * where.degree;
  auto to_chunks = [U](const torch::Tensor& x) { return swap_rank_and_chunk(x, U, 2); };
  const torch::Tensor out = ring_attention(*ring_, where, to_chunks(q), to_chunks(k), to_chunks(v), plan,
                                           1.0 / std::sqrt(static_cast<double>(head_dim_)));   // [B, S/R, h, D]
  return swap_rank_and_chunk(out, 2, U);
}

// Local attention of h query heads over the whole sequence; each kv head serves h / hkv consecutive
// query heads, as transformers' repeat_kv. q [B, S, h, D], k, v [B, S, hkv, D] -> [B, S, h, D]
torch::Tensor AttentionImpl::attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                    const AttentionPlan& plan) const {
  ULY_CHECK(static_cast<std::int64_t>(plan.runs.size()) == q.size(0), "attention plan for {} rows, batch of {}",
            plan.runs.size(), q.size(0));
  return document_attention(q, k, v, plan, 1.0 / std::sqrt(static_cast<double>(head_dim_)));
}

}  // namespace ulysses::model
