// The layer description (see layer_spec.hpp): every field as transformers 4.57 builds the layer for the config.
#include "arch/layer_spec.hpp"

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

Block mlp_block(const MlpSpec& m) {
  return {Block::Kind::kMlp, "mlp", {{"mlp.gate_proj.weight", {m.intermediate, m.hidden}, "gate_proj"},    // [I, hidden]
                                     {"mlp.up_proj.weight", {m.intermediate, m.hidden}, "up_proj"},        // [I, hidden]
                                     {"mlp.down_proj.weight", {m.hidden, m.intermediate}, "down_proj"}}};  // [hidden, I]
}

Block norm_block(const std::string& module, const NormSpec& n) {
  return {Block::Kind::kNorm, module, {{module + ".weight", {n.dim}, ""}}};
}

}  // namespace

LayerSpec layer_spec(const ModelConfig& c, std::int64_t layer) {
  LayerSpec l;
  l.index = layer;
  l.attention = attention_of(c);
  l.mlp = {MlpKind::kDenseGated, c.hidden_size, c.intermediate_size};
  l.input_norm = l.post_attention_norm = {NormKind::kRms, c.hidden_size, c.rms_norm_eps};
  l.blocks = {attention_block(l.attention), mlp_block(l.mlp), norm_block("input_layernorm", l.input_norm),
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
  for (const Block& b : blocks)
    for (const LayerParameter& p : b.parameters) {
      std::int64_t e = 1;
      for (std::int64_t d : p.shape) e *= d;
      n += e;
    }
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
