// The layer description (see layer_spec.hpp): every field as transformers 4.57 builds the layer for the config.
#include "arch/layer_spec.hpp"

#include <fmt/format.h>

namespace ulysses::arch {
namespace {

AttentionSpec attention_of(const ModelConfig& c) {
  AttentionSpec a;
  a.hidden = c.hidden_size, a.heads = c.num_heads, a.kv_heads = c.num_kv_heads, a.head_dim = c.head_dim;
  a.qkv_bias = c.qkv_bias, a.o_bias = c.o_bias, a.qk_norm = c.qk_norm, a.norm_eps = c.rms_norm_eps;
  a.sliding_window = c.sliding_window;
  a.rope = rope_spec(c.rope, c.head_dim);
  return a;
}

// q/k/v/o projections (with their biases), then the q/k norms: LlamaAttention's and Qwen3Attention's order.
Block attention_block(const AttentionSpec& a) {
  const std::int64_t q = a.heads * a.head_dim, kv = a.kv_heads * a.head_dim;
  Block b{Block::Kind::kTokenMixer, "self_attn", {}};
  auto add = [&](const std::string& module, std::vector<std::int64_t> shape, bool bias) {
    b.parameters.push_back({module + ".weight", shape, module.substr(module.find('.') + 1)});
    if (bias) b.parameters.push_back({module + ".bias", {shape[0]}, ""});
  };
  add("self_attn.q_proj", {q, a.hidden}, a.qkv_bias);    // [H*D, hidden]
  add("self_attn.k_proj", {kv, a.hidden}, a.qkv_bias);   // [Hkv*D, hidden]
  add("self_attn.v_proj", {kv, a.hidden}, a.qkv_bias);   // [Hkv*D, hidden]
  add("self_attn.o_proj", {a.hidden, q}, a.o_bias);      // [hidden, H*D]
  if (a.qk_norm) {
    b.parameters.push_back({"self_attn.q_norm.weight", {a.head_dim}, ""});
    b.parameters.push_back({"self_attn.k_norm.weight", {a.head_dim}, ""});
  }
  return b;
}

// A gated MLP's three projections under `prefix`, in registration order; adaptable (peft_target) or not.
void add_gated(std::vector<LayerParameter>& out, const std::string& prefix, std::int64_t hidden,
               std::int64_t intermediate, const GatedMlpNames& n, bool adaptable) {
  auto add = [&](const std::string& name, std::vector<std::int64_t> shape) {
    out.push_back({prefix + name + ".weight", std::move(shape), adaptable ? name : ""});
  };
  add(n.gate, {intermediate, hidden});                                                // [I, hidden]
  if (n.down_before_up) add(n.down, {hidden, intermediate});                          // [hidden, I]
  add(n.up, {intermediate, hidden});                                                  // [I, hidden]
  if (!n.down_before_up) add(n.down, {hidden, intermediate});                         // [hidden, I]
}

// Mixtral's sparse block is "block_sparse_moe"; every other MLP, sparse or dense, is "mlp".
std::string mlp_module(const ModelConfig& c, const MlpSpec& m) {
  return m.routed() && c.rules->moe == MoeRule::kMixtral ? "block_sparse_moe" : "mlp";
}

// The dense MLP; or the router, the experts (not adapted by LoRA), the shared expert and its gate, in transformers'
// order (Qwen2MoeSparseMoeBlock, MixtralSparseMoeBlock).
Block mlp_block(const std::string& module, const MlpSpec& m) {
  Block b{Block::Kind::kMlp, module, {}};
  const std::string p = module + ".";
  if (!m.routed()) {
    add_gated(b.parameters, p, m.hidden, m.intermediate, m.names, true);
    return b;
  }
  b.parameters.push_back({p + "gate.weight", {m.experts, m.hidden}, ""});                       // [E, hidden]
  for (std::int64_t e = 0; e < m.experts; ++e)
    add_gated(b.parameters, fmt::format("{}experts.{}.", p, e), m.hidden, m.intermediate, m.names, false);
  if (m.shared_intermediate > 0) {
    add_gated(b.parameters, p + "shared_expert.", m.hidden, m.shared_intermediate, GatedMlpNames{}, false);
    b.parameters.push_back({p + "shared_expert_gate.weight", {1, m.hidden}, ""});              // [1, hidden]
  }
  return b;
}

MlpSpec mlp_of(const ModelConfig& c, std::int64_t layer) {
  MlpSpec m;
  m.hidden = c.hidden_size;
  m.intermediate = c.intermediate_size;
  if (!sparse_layer(c.moe, layer)) return m;
  m.kind = MlpKind::kRoutedExperts;
  m.intermediate = c.moe.expert_intermediate;
  if (c.rules->moe == MoeRule::kMixtral) m.names = {"w1", "w3", "w2", true};
  m.experts = c.moe.experts, m.top_k = c.moe.top_k, m.normalize_top_k = c.moe.normalize_top_k;
  m.shared_intermediate = c.moe.shared_intermediate;
  return m;
}

Block norm_block(const std::string& module, const NormSpec& n) {
  return {Block::Kind::kNorm, module, {{module + ".weight", {n.dim}, ""}}};
}

}  // namespace

LayerSpec layer_spec(const ModelConfig& c, std::int64_t layer) {
  LayerSpec l;
  l.index = layer;
  l.attention = attention_of(c);
  l.mlp = mlp_of(c, layer);
  l.input_norm = l.post_attention_norm = {NormKind::kRms, c.hidden_size, c.rms_norm_eps};
  l.blocks = {attention_block(l.attention), mlp_block(mlp_module(c, l.mlp), l.mlp),
              norm_block("input_layernorm", l.input_norm),
              norm_block("post_attention_layernorm", l.post_attention_norm)};
  return l;
}

std::vector<LayerSpec> layer_specs(const ModelConfig& c) {
  std::vector<LayerSpec> out;
  for (std::int64_t i = 0; i < c.num_layers; ++i) out.push_back(layer_spec(c, i));
  return out;
}

std::int64_t LayerSpec::parameter_count() const {
  std::int64_t n = 0;
  for (const Block& b : blocks) n += b.parameter_count();
  return n;
}

std::int64_t Block::parameter_count() const {
  std::int64_t n = 0;
  for (const LayerParameter& p : parameters) {
    std::int64_t e = 1;
    for (std::int64_t d : p.shape) e *= d;
    n += e;
  }
  return n;
}

std::int64_t MlpSpec::active_parameter_count() const {
  const std::int64_t expert = 3 * hidden * intermediate;
  if (!routed()) return expert;
  return experts * hidden + top_k * expert + (shared_intermediate > 0 ? 3 * hidden * shared_intermediate + hidden : 0);
}

std::int64_t LayerSpec::active_parameter_count() const {
  std::int64_t n = 0;
  for (const Block& b : blocks) n += b.kind == Block::Kind::kMlp ? mlp.active_parameter_count() : b.parameter_count();
  return n;
}

std::vector<std::string> peft_targets(const LayerSpec& layer) {
  std::vector<std::string> out;
  for (const Block& b : layer.blocks)
    for (const LayerParameter& p : b.parameters)
      if (!p.peft_target.empty()) out.push_back(p.peft_target);
  return out;
}

}  // namespace ulysses::arch
