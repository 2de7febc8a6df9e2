// Ulysses self-attention of one decoder layer: grouped-query attention (H query heads sharing Hkv
// key/value heads), RoPE, optional Qwen3 q/k norms, over a sequence split across an SP group.
//
//   x [B, S/P, hidden] (normed; forward_normed: the layer's input norm first)
//     -> q [B, S/P, H, D], k, v [B, S/P, Hkv, D]  (q/k RMSNorm over D for Qwen3, RoPE)
//   Hkv < U: replicate k, v heads to U (U % Hkv == 0)
//   all-to-all in the Ulysses group: [B, S/P, h, D] -> [B, S/R, h/U, D]   (only when U > 1)
//   attention for H/U heads: over the whole sequence (R = 1), causal within each document; or, with a ring
//     (--sp-ring R, ring_attention.hpp), of this ring rank's block over the whole sequence's k/v blocks
//   all-to-all back: [B, S/R, H/U, D] -> [B, S/P, H, D] -> o_proj -> [B, S/P, hidden]
// P = U × R (SequenceParallel); without a ring U = P and S/R = S.
//
// The groups come from the SequenceParallel handle; their communicators are not owned and must outlive
// the module and every backward pass through it. P = 1 calls no collective. The head rules (on U) are checked at
// construction (BadInput with both numbers). Attention itself runs per document (document_attention.hpp):
// fused causal SDPA calls, no S×S mask except for a sliding window.
//
// In head groups (--attention-head-groups G > 1, UPipe's head chunking): the heads run in G groups, group g holding
// query heads [g·H/G, (g+1)·H/G) and its own key/value heads [g·Hkv/G, (g+1)·Hkv/G) — or, with more groups than
// key/value heads, the one head g·Hkv/G its query heads use, whose k/v projection each of its groups computes
// (arch::check_head_groups). Each group is the whole pipeline above on its heads only — its rows of q/k/v_proj, q/k
// norm, RoPE, the all-to-alls, attention, back to [B, S/P, its heads·D], and its columns of o_proj (and of o_proj's
// LoRA A) — and the groups' o_proj products [B, S/P, hidden] are added (in fp32 at least), o_proj's bias once. The
// groups are the chunks (of columns) of one call of the recompute primitive (recompute.hpp): it keeps the layer's
// input (forward_normed: each group applies the layer's input norm itself, so the normed input is never kept whole),
// and backward recomputes and back-propagates one group at a time, so one group's activations are
// alive at once, in forward and in backward; the heads' output [B, S/P, H·D] and its gradient never exist whole
// (o_proj's weight gradient is summed group by group). Every rank runs the same groups in the same order. Where a
// flash kernel computes attention (on CPU; on a GPU in bf16/fp16: attention_pieces.hpp) and without a ring, the call
// keeps the heads' output (whole, [B, S/P, H·D]: its gradient still comes a group at a time) and each group's
// attention log-sum-exp ([B, H/U, S] float in all): backward
// recomputes a group's q, k, v, brings its output back to attention's layout by the all-to-all, and runs attention's
// backward from them, so attention's forward runs once per pass, as at G = 1 (not again in the group's backward).
// With prefetch (HeadGroups::ahead), each group's first stage — its projections, q/k norms, RoPE and all-to-all — is
// issued one group ahead on a side stream shared by the layers (recompute.hpp's first stage), its all-to-alls on the
// Ulysses group's second communicator (SequenceParallel::ulysses_ahead_group), so on a GPU the next group's
// projections and all-to-all overlap the current group's attention, in forward and in backward (the overlap
// DeepSpeed-Ulysses lacks); one more group's q, k, v are alive meanwhile. A CPU issues the same work in the same order.
// Exact: the same operations per head; the sums over the groups — o_proj's output over its columns, the input's
// gradient over their q/k/v projections, the shared q/k norms' — run in another order (the loss and the whole
// gradient ≤ 1e-6 relative in fp32).
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include "comm/communicator.hpp"
#include "core/sequence_parallel.hpp"
#include "model/attention_pieces.hpp"
#include "model/document_attention.hpp"
#include "model/rms_norm.hpp"
#include "model/rotary.hpp"
#include "model/lora.hpp"
#include "model/precision.hpp"
#include "model/ring_attention.hpp"
#include "model/side_stream.hpp"

namespace ulysses::model {

// The tensors attention computes with; an undefined tensor is an absent bias or norm.
struct AttentionWeights {
  torch::Tensor q, k, v;                     // [H*D, hidden], [Hkv*D, hidden], [Hkv*D, hidden]
  torch::Tensor o;                           // [hidden, H*D]
  torch::Tensor q_bias, k_bias, v_bias;      // [H*D], [Hkv*D], [Hkv*D] (Qwen2; Llama with attention_bias)
  torch::Tensor o_bias;                      // [hidden]
  torch::Tensor q_norm, k_norm;              // [D] (Qwen3)
  Lora q_lora, k_lora, v_lora, o_lora;       // LoRA adapters (lora.hpp): a [r, hidden] / [r, H*D], b [rows, r]
  double lora_scale = 0;
  torch::Tensor input_norm;                  // [hidden]: the decoder layer's input norm, where attention applies it
                                             // (forward_normed)
};

// The tensors of AttentionWeights in one fixed order, for code that hands them on as a list and back (head groups'
// recomputation) or finds them among the module's parameters; undefined ones are absent.
std::vector<torch::Tensor*> tensor_slots(AttentionWeights& w);

// Attention in head groups: how many, and the precision each group's recomputation re-enters.
struct HeadGroups {
  std::int64_t groups = 1;
  Precision precision = Precision::kFp32;
  std::shared_ptr<SharedSideStream> ahead;   // prefetch: each group's first stage issued ahead there; null: in turn
};

struct AttentionImpl : torch::nn::Module {
  // The layer's token mixer (layer.attention) and the layer's input norm's eps (applied per group in head groups). The
  // heads are those the model's checks allowed for this SP degree and G (arch::check_heads_for_sp, check_head_groups).
  AttentionImpl(const arch::LayerSpec& layer, const SequenceParallel& sp, const HeadGroups& head_groups = {},
                const LoraOptions& lora = {});

  AttentionWeights weights() const;   // its own parameters
  // x [B, S/P, hidden], rope tables of this rank's tokens, the whole sequence's documents -> [B, S/P, hidden]
  torch::Tensor forward(const torch::Tensor& x, const RopeTables& rope, const AttentionPlan& plan) {
    return forward(x, rope, plan, weights());
  }
  torch::Tensor forward(const torch::Tensor& x, const RopeTables& rope, const AttentionPlan& plan,
                        const AttentionWeights& w) const;
  // The same on rms_norm(x, norm_weight) (the decoder layer's input norm, x [B, S/P, hidden] its input): in head groups
  // each group normalises x itself, so the normed input is never kept whole.
  torch::Tensor forward_normed(const torch::Tensor& x, const torch::Tensor& norm_weight, const RopeTables& rope,
                               const AttentionPlan& plan, const AttentionWeights& w) const;

  torch::nn::Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
  RMSNorm q_norm{nullptr}, k_norm{nullptr};   // Qwen3 only

 private:
  torch::Tensor attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                       const AttentionPlan& plan) const;
  torch::Tensor ring_attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                            const AttentionPlan& plan) const;
  struct Heads {
    torch::Tensor q, k, v;   // [B, S/R, h, D], [B, S/R, hkv, D]: after RoPE and the all-to-all
  };
  // The heads of w's q/k/v rows (all of them, or one group's), their all-to-alls on `a2a` (null when U = 1)
  Heads heads_for_attention(const torch::Tensor& x, const RopeTables& rope, const AttentionWeights& w,
                            comm::Communicator* a2a) const;
  // Attention on those heads, back to this rank's s = S/P tokens -> their output [B, S/P, heads·D]
  torch::Tensor attend_heads(const Heads& h, std::int64_t s, const AttentionPlan& plan) const;
  // The same with attention's log-sum-exp: forward (kept empty) -> {output, lse [B, heads/U, S] float}; backward
  // (kept: that output and lse) -> the output again as a graph whose attention backward runs from them
  torch::autograd::variable_list attend_heads_kept(const Heads& h, std::int64_t s, const AttentionPlan& plan,
                                                   const std::vector<torch::Tensor>& kept) const;
  // attention's output [B, S/R, h, D] back to this rank's tokens, all its heads side by side: [B, S/P, heads·D]
  torch::Tensor heads_back(const torch::Tensor& out, std::int64_t s) const;
  bool keeps_attention_output(const torch::Tensor& x) const;   // head groups' backward from the kept output
  torch::Tensor forward_in_groups(const torch::Tensor& x, const RopeTables& rope, const AttentionPlan& plan,
                                  const AttentionWeights& w) const;
  // views: its heads' rows of q/k/v_proj, their columns of o_proj (no bias)
  AttentionWeights group_weights(const AttentionWeights& w, std::int64_t group) const;

  std::int64_t heads_, kv_heads_, head_dim_;
  HeadGroups head_groups_;
  double qk_norm_eps_, input_norm_eps_;   // of the q/k norms, and of the layer's input norm
  double lora_scale_;
  std::int64_t ulysses_degree_;    // U (P without a ring)
  comm::Communicator* ulysses_;    // non-null only when U > 1
  comm::Communicator* ulysses_ahead_;   // the all-to-alls issued ahead (head groups with prefetch); null when U = 1
  comm::Communicator* ring_;       // non-null only when R > 1
  RingPosition ring_position_;     // this rank's, its seq_len filled per forward
};
TORCH_MODULE(Attention);

}  // namespace ulysses::model
