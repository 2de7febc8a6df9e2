#include "plan/memory_model.hpp"

#include <algorithm>

#include "arch/layer_spec.hpp"
#include "core/rank_layout.hpp"
#include "core/topology.hpp"
#include "plan/tensor_limit.hpp"

namespace ulysses::plan {
namespace {

// Elements one layer holds per token of this rank, counted from its tensors (attention after the all-to-all
// holds S tokens × H/P heads: the same element count as T tokens × H heads; KV heads replicated up to P). With G
// head groups the heads' tensors are one group's: H/G query heads and max(Hkv/G, 1) KV heads.
struct LayerCounts {
  double attention = 0;   // per token: the norms' outputs and o_proj's, and (G = 1) the heads' output o_proj reads:
                          // whole per layer, each with its gradient. G > 1: 1.5·hidden, counted twice — the three
                          // [T, hidden] a group's backward, the layer's peak, has whole beside its heads while its
                          // attention back-propagates: the gradient of attention's output (each group's), the groups'
                          // input gradient as it sums and the group's normed input (the layer output's gradient is
                          // freed once the MLP's backward read it: recompute.hpp; tests/model/test_working_set.cpp
                          // counts the live tensors)
  double projections = 0; // per token, G > 1: 2.5·hidden, counted twice — the five whole [T, hidden] beside no head
                          // of the group once its heads' backward ran: the three above, the q/k/v projection's input
                          // gradient (one product: attention.cpp) and the norm's. Where a group holds few heads this
                          // binds, not attention + heads
  double kept = 0;        // per token, G > 1 where attention's output is kept: the heads' output, whole, its gradient
                          // a group at a time (o_proj runs group by group)
  double heads = 0;       // per token: q/k/v before and after RoPE and the all-to-all, attention's output: one group
  double mlp_token = 0;   // per token: the MLP block's input and its norm. G > 1: none beyond attention's — the MLP's
                          // backward holds as many whole tensors as a group's (the output's gradient, the MLP's input
                          // and its gradient), and its rows are counted apart
  double mlp_row = 0;     // per MLP row (a token of the tile): gate, up, act(gate), act(gate)·up; routed: none
  double routed = 0;      // per token of the tile, a routed MLP: what its forward keeps (routed_counts)
  double routed_backward = 0;   // per token of the tile: the gradients beside it at its peak, the imbalance bound
  double a2a = 0;         // per token: what crosses the all-to-all (q, k, v there, the output back): one group
  double heads_q = 0, heads_kv = 0;   // per token: q, and k or v, after the all-to-all (KV replicated): one group
  bool operator==(const LayerCounts&) const = default;
};

// The routed MLP (model/moe.cpp), per token of the tile, in elements of the compute dtype (act its bytes: fp32 and
// int64 tensors count 4/act and 8/act). Counted as what is alive at its backward's peak, not scaled by the profile's
// mlp_factor: that factor measures how a dense MLP's gradients replace its saved tensors one by one, while here every
// pick's saved tensors stay until its own expert back-propagates, the experts one after another.
//   saved: the router's logits and fp32 probabilities [E], the top-k's fp32 weights (before and after renormalising)
//     and int64 picks [k]; for each of the token's k picks its expert's gathered input [hidden], gate, up,
//     act(gate), act(gate)·up [I] and output [hidden] — the picks of a tile are exactly k per token, whatever the
//     imbalance —; the shared expert's gate, up, act, product [I_shared], its output and gated output [hidden] and
//     its gate's logit.
//   backward: one expert's gradients at a time — of its output [hidden], its product, act, gate and up [I], its
//     gathered input [hidden] — over the n_e tokens routed to it, beside two [hidden] a token of the tile (the
//     gather's backward buffer and the input's gradient it adds into); or the shared expert's, if larger. The top-k
//     imbalance bound: n_e is at most the tile's tokens (a token picks an expert once), so one expert's rows are
//     counted for every token of the tile, all picks on one expert; a balanced router gives it k/E of them
//     (tools/bench/moe_bench.py measures the difference).
struct RoutedCounts {
  double saved = 0, backward = 0;
};
RoutedCounts routed_counts(const arch::MlpSpec& m, double act) {
  if (!m.routed()) return {};
  const double h = static_cast<double>(m.hidden), I = static_cast<double>(m.intermediate);
  const double E = static_cast<double>(m.experts), k = static_cast<double>(m.top_k);
  const double shared = static_cast<double>(m.shared_intermediate);
  const double router = E * (1 + 4 / act) + k * (2 * 4 + 8) / act;
  RoutedCounts n;
  n.saved = router + k * (4 * I + 2 * h) + (shared > 0 ? 4 * shared + 2 * h + 1 : 0);
  n.backward = std::max(4 * I + 2 * h, 4 * shared + 2 * h) + 2 * h;
  return n;
}

// expanded_kv: CUDA in fp32 with grouped KV heads, where SDPA gets (and saves for backward) K and V expanded to
// the query heads (model/document_attention.hpp).
// keeps: head groups keep attention's output (MemoryFeatures::keeps_head_output).
LayerCounts counts(const arch::LayerSpec& layer, int sp, bool expanded_kv, std::int64_t groups, bool keeps,
                   double act) {
  const arch::AttentionSpec& a = layer.attention;
  const std::int64_t group_heads = a.heads / groups, group_kv = std::max<std::int64_t>(a.kv_heads / groups, 1);
  const std::int64_t rank_heads = group_heads / sp, rank_kv = std::max<std::int64_t>(group_kv, sp) / sp;   // after a2a
  const double h = static_cast<double>(a.hidden), d = static_cast<double>(a.head_dim);
  const double q = static_cast<double>(group_heads) * d, kv = static_cast<double>(group_kv) * d;
  const double qa = static_cast<double>(sp * rank_heads) * d, kva = static_cast<double>(sp * rank_kv) * d;
  LayerCounts n;
  const double heads_output = static_cast<double>(a.heads) * d;
  n.attention = groups > 1 ? 1.5 * h : 3 * h + heads_output;
  n.projections = groups > 1 ? 2.5 * h : 0;
  n.kept = groups > 1 && keeps ? heads_output : 0;
  n.heads = 2 * (q + 2 * kv) + (qa + 2 * kva) + qa + (expanded_kv ? 2 * (qa - kva) : 0);
  n.mlp_token = groups > 1 ? 0 : 2 * h;
  n.mlp_row = layer.mlp.routed() ? 0 : 4 * static_cast<double>(layer.mlp.intermediate);
  const RoutedCounts routed = routed_counts(layer.mlp, act);
  n.routed = routed.saved, n.routed_backward = routed.backward;
  n.a2a = sp > 1 ? 2 * qa + 2 * kva : 0;
  n.heads_q = qa, n.heads_kv = kva;
  return n;
}

std::int64_t bytes(double b) { return static_cast<std::int64_t>(b); }

// The model's layers by kind: layers whose counts and attention agree are counted once, times how many they are
// (today's architectures have one kind; a model mixing kinds has each).
struct LayerKind {
  arch::LayerSpec spec;
  bool keeps = false;   // head groups keep attention's output (MemoryFeatures::keeps_head_output)
  LayerCounts n;
  double layers = 0;
};
std::vector<LayerKind> layer_kinds(const arch::ModelConfig& c, const Layout& l, const Features& f, const Profile& p) {
  std::vector<LayerKind> kinds;
  for (arch::LayerSpec& spec : arch::layer_specs(c)) {
    const bool keeps = f.keeps_head_output(p.cuda, spec.attention.head_dim, l.ring);
    const LayerCounts n = counts(spec, l.ulysses(), p.cuda && !f.bf16, f.attention_head_groups, keeps,
                                 f.compute_bytes());
    const auto same = [&](const LayerKind& k) {
      return k.n == n && k.keeps == keeps && k.spec.attention.sliding_window == spec.attention.sliding_window &&
             k.spec.attention.heads == spec.attention.heads && k.spec.attention.head_dim == spec.attention.head_dim;
    };
    const auto it = std::find_if(kinds.begin(), kinds.end(), same);
    if (it != kinds.end()) ++it->layers;
    else kinds.push_back({std::move(spec), keeps, n, 1});
  }
  return kinds;
}

// Ring attention's buffers (model/ring_attention.hpp) beside one group's heads: the k/v block held and the one
// arriving ([2, S/R, kv heads]: 2·T·kva elements each, the compute dtype); in backward the gradients of the blocks
// (fp32, three: this rank's share, the sum in flight to the next rank, the one arriving), the fp32 accumulators of
// the queries' output or gradient and the log-sum-exp; then one piece's kernel (a piece is a chunk of C = S/(2R)
// tokens at most). FlashAttention-2 (a GPU in bf16, a head size it has kernels for): grouped KV heads native; in its
// backward the fp32 dq accumulator, the dq, dk, dv it returns and, under GQA, the k/v gradients expanded to the query
// heads. PyTorch's flash attention for CPU and the arithmetic written out: the piece's k/v expanded to the query
// heads; written out on a GPU: its scores, probabilities and their gradient too, fp32 [h, C, C].
double ring_bytes(const arch::AttentionSpec& a, const Layout& l, const Features& f, const Profile& p,
                  const LayerCounts& n, double T, std::int64_t seq_len) {
  const double act = f.compute_bytes();
  const double qa = n.heads_q, kva = n.heads_kv;   // per token of this rank, one group
  double b = act * 2 * (2 * T * kva) + 4 * 3 * (2 * T * kva) + 4 * T * qa;
  const bool flash = p.cuda && f.bf16 && arch::flash_head_dim(a.head_dim);
  if (flash) return b + 4 * (T / 2) * qa + act * (T / 2 * qa + T * kva) + (qa > kva ? act * T * qa : 0);
  b += act * T * qa;
  if (p.cuda) {
    const double C = static_cast<double>(seq_len) / (2 * l.ring);
    const double h = static_cast<double>(a.heads / f.attention_head_groups / l.ulysses());
    b += 3 * 4 * h * C * C * static_cast<double>(l.micro_batch);
  }
  return b;
}

// Elements per token of each layer's adapter products x·Aᵀ (one [T, r] per adapted projection).
double lora_row(const Features& f) {
  return static_cast<double>(f.lora_rank) * static_cast<double>(f.lora_targets.size());
}

// Head groups' kept log-sum-exp, float [B, H/U, S] a layer: with the layer back-propagated, or every layer's.
double kept_lse(const LayerKind& k, double T) {
  return k.keeps ? 4 * T * static_cast<double>(k.spec.attention.heads) : 0;
}

// LoRA's replicated model states (sharded, they are plan_states' frozen groups): the frozen base in the compute dtype —
// fp32, the bf16 model's bf16, or amp-bf16's fp32 with autocast's bf16 copies of the matrices —, no gradient or AdamW
// state for it; the adapters fp32 masters with their fp32 gradients and two AdamW moments, and under bf16 their bf16
// copies and those copies' gradients.
void lora_states(const arch::ModelConfig& c, const Features& f, Breakdown& b) {
  const std::int64_t base = arch::parameter_count(c), adapters = lora_parameter_count(c, f);
  const std::int64_t autocast_copies = f.bf16 && !f.bf16_activations ? 2 * arch::matmul_parameter_count(c) : 0;
  b.weights = (f.bf16_activations ? 2 : 4) * base + autocast_copies + (4 + (f.bf16 ? 2 : 0)) * adapters;
  b.gradients = (4 + (f.bf16_activations ? 2 : 0)) * adapters;
  b.optimizer = 8 * adapters;
}

// Replicated states' bf16 weights beside the fp32 masters: autocast's cached copies of the matrices (amp-bf16), or
// the bf16 model's one copy of every weight (bf16).
std::int64_t replicated_copy_bytes(const arch::ModelConfig& c, int shards, const Features& f) {
  if (shards > 0 || !f.bf16) return 0;
  return 2 * (f.bf16_activations ? arch::parameter_count(c) : arch::matmul_parameter_count(c));
}


// One layer's working set (forward and backward) of kind k. Head groups: one group's heads' tensors are alive at a
// time (attention.hpp), in forward and backward — the larger of a group's attention backward and its projections' —,
// and with prefetch the next group's q, k, v beside them; LoRA: each adapted projection's [T, r] product beside the
// layer's.
std::int64_t layer_working_bytes(const LayerKind& k, const Layout& l, const Features& f, const Profile& p, double T,
                                 std::int64_t seq_len) {
  const LayerCounts& n = k.n;
  const arch::AttentionSpec& a = k.spec.attention;
  const double act = f.compute_bytes();
  const auto mlp_rows = static_cast<double>(f.mlp_rows(static_cast<std::int64_t>(T)));
  const double ahead = f.issues_heads_ahead(p.cuda) ? n.heads_q + 2 * n.heads_kv : 0;
  const double layer_tokens = T * (std::max(n.attention + n.heads, n.projections) + ahead + n.mlp_token + lora_row(f));
  // a routed MLP's saved tensors are this layer's own when it recomputes them (checkpointing, or a tile's in
  // TiledMLP's backward); otherwise they are among every layer's saved activations (layer_saved_bytes)
  const bool recomputes = f.activation_checkpointing || !f.saves_mlp_rows();
  const double routed = mlp_rows * (n.routed_backward + (recomputes ? n.routed : 0));
  std::int64_t working = bytes(act * (2 * (p.work_factor * layer_tokens + p.mlp_factor * mlp_rows * n.mlp_row) +
                                      p.work_factor * T * n.kept + routed));
  if (a.sliding_window) {   // no fused kernel: the [B, 1, S, S] bool mask and the scores of the rank's H/P heads
    const double S = static_cast<double>(seq_len), B = static_cast<double>(l.micro_batch);
    if (l.ring == 1) working += bytes(B * S * S * (1 + act * static_cast<double>(a.heads / l.sp)));
  }
  if (l.ring > 1) working += ring_bytes(a, l, f, p, n, T, seq_len);
  if (f.activation_checkpointing) working += bytes(kept_lse(k, T));
  return working;
}

// Without checkpointing: what the layers of kind k save for backward, all of them.
double layer_saved_bytes(const LayerKind& k, const Features& f, const Profile& p, double T) {
  const LayerCounts& n = k.n;
  const double act = f.compute_bytes();
  const double saved_mlp = f.saves_mlp_rows() ? T * n.mlp_row : 0.0;
  const double saved_heads = f.saves_head_tensors() ? T * n.heads : 0.0;
  const double saved_routed = f.saves_mlp_rows() ? T * n.routed : 0.0;
  return act * k.layers * (p.saved_factor * T * (n.attention + n.kept + n.mlp_token + lora_row(f)) +
                           p.saved_factor * saved_heads + p.mlp_factor * saved_mlp + saved_routed) +
         k.layers * kept_lse(k, T);
}

}  // namespace

std::int64_t lora_parameter_count(const arch::ModelConfig& c, const Features& f) {
  if (f.lora_rank <= 0) return 0;
  std::int64_t n = 0;   // r × (in + out) of each adapted projection
  for (const arch::ParameterSpec& p : arch::lora_parameters(c, f.lora_rank, f.lora_targets)) n += p.numel();
  return n;
}

std::vector<std::pair<std::string, std::int64_t>> Breakdown::device_lines() const {
  return {{"weights", weights},           {"gradients", gradients},
          {"optimizer (AdamW)", optimizer}, {"gathered units", gathered},
          {"saved activations", saved},   {"one layer's working set", working},
          {"loss chunk", loss},           {"communication buffers", comm},
          {"fixed (context, allocator)", device_fixed}};
}

std::vector<std::pair<std::string, std::int64_t>> Breakdown::host_lines() const {
  return {{"offloaded model states", host_states},
          {"offloaded layer inputs", host_checkpoints},
          {"process (runtime, libraries)", host_fixed}};
}

Breakdown predict(const arch::ModelConfig& c, const Layout& l, const Features& f, const Profile& p,
                  std::int64_t seq_len) {
  const int shards = shard_ranks(f.sharding, l.world(), l.sp);
  const GatherBytes gather{f.compute_bytes(), f.other_weight_bytes()};
  const std::vector<Parameter> params = parameters_of(c, f.lora_rank, f.lora_targets);
  const StatePlan states = plan_states(params, shards, {f.offload_optimizer, f.offload_params}, gather);
  const double T = static_cast<double>(l.micro_batch * (seq_len / l.sp));
  const double act = f.compute_bytes(), h = static_cast<double>(c.hidden_size), V = static_cast<double>(c.vocab_size);
  const double L = static_cast<double>(c.num_layers);
  Breakdown b;
  b.weights = states.device.weights + replicated_copy_bytes(c, shards, f);
  // replicated bf16: the copies' bf16 gradients, whole after a backward until they are summed into the masters'
  b.gradients = states.device.grads + (shards == 0 && f.bf16_activations ? 2 * arch::parameter_count(c) : 0);
  b.optimizer = states.device.optimizer;
  if (f.lora_rank > 0 && shards == 0) lora_states(c, f, b);
  if (shards > 0) {
    const UnitSize u = largest_unit(state_layout(params), c.tie_word_embeddings, gather);
    // the largest unit whole with its fp32 gradient, and (prefetch) the next unit beside it — always a layer in
    // backward, and in forward never more than that
    b.gathered = u.gathered_bytes + 4 * u.elements + (f.prefetches(p.cuda) ? u.layer_gathered_bytes : 0);
    // --offload-params over more than one rank: the shard copied over from host memory before its all-gather
    if (f.offload_params && shards > 1) b.gathered += (u.gathered_bytes + shards - 1) / shards;
  }
  const auto rows = static_cast<std::int64_t>(T);   // the same tokens as a count
  double saved = 0;   // without checkpointing: every layer's, by kind
  for (const LayerKind& k : layer_kinds(c, l, f, p)) {
    b.working = std::max(b.working, layer_working_bytes(k, l, f, p, T, seq_len));
    b.comm = std::max(b.comm, bytes(act * T * k.n.a2a));   // one group's all-to-all buffers at a time
    if (!f.activation_checkpointing) saved += layer_saved_bytes(k, f, p, T);
  }
  if (f.activation_checkpointing) {
    const double kept = static_cast<double>(p.checkpoint_bytes > 0 ? p.checkpoint_bytes : f.activation_bytes()) * T * h;
    b.saved = bytes(kept * f.device_kept_inputs(L, p.cuda));
    b.host_checkpoints = bytes(kept * f.host_kept_inputs());
  } else {
    b.saved = bytes(saved);
  }
  const auto loss_rows = static_cast<double>(f.logit_rows(rows));
  b.loss = bytes(p.loss_factor * loss_rows * V * 4 + (f.logits_gradient_buffer() ? 4 * V * h : 0.0));
  b.device_fixed = p.device_fixed;
  b.host_states = states.host.total() / 16 * p.offload_bytes + states.host_copies;   // 16 bytes a parameter: ours
  b.host_fixed = p.host_fixed;
  return b;
}

Fit check_fit(const Breakdown& b, const Layout& l, const Machine& m) {
  const std::int64_t node = (m.cuda ? b.host() : b.host() + b.device()) * l.ranks_per_node;
  if (m.cuda && b.device() > m.usable(m.device_bytes)) return {false, "device", b.device(), m.usable(m.device_bytes)};
  if (node > m.usable(m.host_bytes)) return {false, "host", node, m.usable(m.host_bytes)};
  return {true, "", m.cuda ? b.device() : node, m.cuda ? m.usable(m.device_bytes) : m.usable(m.host_bytes)};
}

bool Layout::sp_within_islands(int p) const {
  if (across_islands) return true;
  if (p < 1 || world() % p != 0) return false;
  const RankLayout layout(world(), p, p % ring == 0 ? ring : 1);
  return sp_group_crossing_islands(layout, Topology::uniform(world(), ranks_per_node, island)).empty();
}

std::int64_t sequence_unit(int sp, int ring) { return std::int64_t{64} * sp * (ring > 1 ? 2 : 1); }

std::int64_t longest_sequence(const arch::ModelConfig& c, const Layout& l, const Features& f, const Profile& p,
                              const Machine& m, std::int64_t ceiling) {
  const std::int64_t unit = sequence_unit(l.sp, l.ring);
  auto fits = [&](std::int64_t k) {
    return !(p.limits_tensors && past_tensor_limit(c, l, f, k * unit)) &&
           check_fit(predict(c, l, f, p, k * unit), l, m).fits;
  };
  std::int64_t lo = 0, hi = ceiling / unit;   // fits(lo) (or lo == 0), invariant: the answer is in [lo, hi]
  if (hi >= 1 && fits(hi)) return hi * unit;
  while (hi - lo > 1) {   // memory grows with S: bisect
    const std::int64_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  return lo * unit;
}

namespace {
std::int64_t attention_width(const arch::ModelConfig& c) {   // Σ over the layers of H·D
  std::int64_t n = 0;
  for (const arch::LayerSpec& layer : arch::layer_specs(c)) n += layer.attention.heads * layer.attention.head_dim;
  return n;
}
}  // namespace

double step_flops(const arch::ModelConfig& c, double tokens, double attention_pairs) {
  return 6.0 * static_cast<double>(arch::active_matmul_parameter_count(c)) * tokens +
         6.0 * static_cast<double>(attention_width(c)) * attention_pairs;
}

}  // namespace ulysses::plan
