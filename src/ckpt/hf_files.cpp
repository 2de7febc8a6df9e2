#include "ckpt/hf_files.hpp"

using nlohmann::ordered_json;

namespace ulysses::ckpt {
namespace {

bool present(const ordered_json& j, const char* key) { return j.contains(key) && !j[key].is_null(); }

}  // namespace

ordered_json export_config(const arch::ModelConfigFile& file, const std::string& torch_dtype) {
  const arch::ModelConfig& s = file.config;
  const arch::ArchitectureRules& rules = *s.rules;
  ordered_json c = file.json;
  c["architectures"] = {s.architecture};
  c["model_type"] = s.model_type;
  // written explicitly: the value the trainer used, whatever transformers' class default is
  c["vocab_size"] = s.vocab_size;
  c["hidden_size"] = s.hidden_size;
  c["intermediate_size"] = s.intermediate_size;
  c["num_hidden_layers"] = s.num_layers;
  c["num_attention_heads"] = s.num_heads;
  c["num_key_value_heads"] = s.num_kv_heads;
  c["head_dim"] = s.head_dim;
  c["tie_word_embeddings"] = s.tie_word_embeddings;
  if (!present(c, "hidden_act")) c["hidden_act"] = "silu";
  if (!present(c, "rms_norm_eps")) c["rms_norm_eps"] = 1e-6;
  if (!present(c, "rope_theta")) c["rope_theta"] = 10000.0;
  if (!c.contains("rope_scaling")) c["rope_scaling"] = nullptr;
  if (rules.bias == arch::BiasRule::kAttentionBiasFlag) c["attention_bias"] = s.o_bias;
  if (rules.mlp_bias_field) c["mlp_bias"] = false;
  if (rules.window == arch::WindowRule::kUseSlidingWindowFlag && !present(c, "use_sliding_window"))
    c["use_sliding_window"] = false;
  c["torch_dtype"] = torch_dtype;
  if (c.contains("dtype")) c["dtype"] = torch_dtype;   // transformers >= 4.56 writes this name
  return c;
}

ordered_json generation_config(const arch::ModelConfigFile& file) {
  ordered_json g = ordered_json::object();
  for (const char* key : {"bos_token_id", "eos_token_id", "pad_token_id"})
    if (present(file.json, key)) g[key] = file.json[key];
  return g;
}

bool ignorable_extra(const arch::ModelConfig& c, const std::string& name) {
  return name.ends_with(".rotary_emb.inv_freq") || (c.tie_word_embeddings && name == "lm_head.weight");
}

}  // namespace ulysses::ckpt
