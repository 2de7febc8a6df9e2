#include "ckpt/model_spec.hpp"

#include <fstream>

#include "core/error.hpp"

namespace fs = std::filesystem;
using nlohmann::ordered_json;

namespace ulysses::ckpt {
namespace {

constexpr const char* kHint = "pass the config.json of a Hugging Face Llama, Mistral, Qwen2 or Qwen3 model";

struct ArchRow {
  const char* model_type;
  const char* architecture;
};
constexpr ArchRow kArchs[] = {{"llama", "LlamaForCausalLM"},
                              {"mistral", "MistralForCausalLM"},
                              {"qwen2", "Qwen2ForCausalLM"},
                              {"qwen3", "Qwen3ForCausalLM"}};

const ordered_json* present(const ordered_json& j, const char* key) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

[[noreturn]] void bad(const fs::path& file, const char* key, const std::string& why) {
  throw BadInput(fmt::format("{}: field \"{}\" {}", file.string(), key, why), kHint);
}

std::int64_t positive(const ordered_json& v, const fs::path& file, const char* key) {
  if (!v.is_number_integer() || v.get<std::int64_t>() <= 0)
    bad(file, key, fmt::format("must be a positive integer (got {})", v.dump()));
  return v.get<std::int64_t>();
}

std::int64_t required(const ordered_json& j, const fs::path& file, const char* key) {
  const ordered_json* v = present(j, key);
  if (!v) bad(file, key, "is required but missing");
  return positive(*v, file, key);
}

bool flag(const ordered_json& j, const fs::path& file, const char* key) {
  const ordered_json* v = present(j, key);
  if (!v) return false;
  if (!v->is_boolean()) bad(file, key, fmt::format("must be true or false (got {})", v->dump()));
  return v->get<bool>();
}

}  // namespace

ModelSpec read_model_spec(const fs::path& file) {
  std::ifstream in(file);
  if (!in) throw BadInput(fmt::format("cannot open model config {}", file.string()), kHint);
  ModelSpec s;
  s.file = file;
  try {
    s.config = ordered_json::parse(in);
  } catch (const ordered_json::parse_error& e) {
    throw BadInput(fmt::format("{}: not valid JSON (byte {})", file.string(), e.byte), kHint);
  }
  const ordered_json& j = s.config;
  if (!j.is_object()) throw BadInput(fmt::format("{}: not a JSON object", file.string()), kHint);
  const ordered_json* type = present(j, "model_type");
  if (!type || !type->is_string()) bad(file, "model_type", "is required but missing");
  for (const ArchRow& a : kArchs)
    if (*type == a.model_type) s.model_type = a.model_type, s.architecture = a.architecture;
  if (s.model_type.empty())
    bad(file, "model_type", fmt::format("{} is not supported (llama, mistral, qwen2, qwen3)", type->dump()));
  s.vocab = required(j, file, "vocab_size");
  s.hidden = required(j, file, "hidden_size");
  s.intermediate = required(j, file, "intermediate_size");
  s.layers = required(j, file, "num_hidden_layers");
  s.heads = required(j, file, "num_attention_heads");
  if (!j.contains("num_key_value_heads") && s.model_type != "llama")
    bad(file, "num_key_value_heads", "is required but missing");
  const ordered_json* kv = present(j, "num_key_value_heads");
  s.kv_heads = kv ? positive(*kv, file, "num_key_value_heads") : s.heads;
  if (s.heads % s.kv_heads != 0)
    bad(file, "num_key_value_heads", fmt::format("({}) must divide num_attention_heads ({})", s.kv_heads, s.heads));
  const ordered_json* hd = present(j, "head_dim");
  if (hd && !(s.model_type == "mistral" && *hd == 0)) {
    s.head_dim = positive(*hd, file, "head_dim");
  } else if (s.model_type == "qwen3") {
    bad(file, "head_dim", "is required but missing");
  } else {
    if (s.hidden % s.heads != 0)
      bad(file, "hidden_size", fmt::format("({}) must be divisible by num_attention_heads ({}) when head_dim is not "
                                           "given", s.hidden, s.heads));
    s.head_dim = s.hidden / s.heads;
  }
  if (s.model_type == "llama" || s.model_type == "qwen3") s.qkv_bias = s.o_bias = flag(j, file, "attention_bias");
  if (s.model_type == "qwen2") s.qkv_bias = true;
  if (flag(j, file, "mlp_bias")) bad(file, "mlp_bias", "is true; MLP biases are not supported");
  s.qk_norm = s.model_type == "qwen3";
  s.tied = flag(j, file, "tie_word_embeddings");
  return s;
}

std::vector<TensorSpec> expected_tensors(const ModelSpec& s) {
  const std::int64_t q = s.heads * s.head_dim, kv = s.kv_heads * s.head_dim;
  std::vector<TensorSpec> out{{"model.embed_tokens.weight", {s.vocab, s.hidden}}};
  for (std::int64_t i = 0; i < s.layers; ++i) {
    const std::string p = fmt::format("model.layers.{}.", i);
    for (auto [proj, rows] : {std::pair{"q_proj", q}, std::pair{"k_proj", kv}, std::pair{"v_proj", kv}}) {
      out.push_back({p + "self_attn." + proj + ".weight", {rows, s.hidden}});
      if (s.qkv_bias) out.push_back({p + "self_attn." + proj + ".bias", {rows}});
    }
    out.push_back({p + "self_attn.o_proj.weight", {s.hidden, q}});
    if (s.o_bias) out.push_back({p + "self_attn.o_proj.bias", {s.hidden}});
    if (s.qk_norm) {
      out.push_back({p + "self_attn.q_norm.weight", {s.head_dim}});
      out.push_back({p + "self_attn.k_norm.weight", {s.head_dim}});
    }
    out.push_back({p + "mlp.gate_proj.weight", {s.intermediate, s.hidden}});
    out.push_back({p + "mlp.up_proj.weight", {s.intermediate, s.hidden}});
    out.push_back({p + "mlp.down_proj.weight", {s.hidden, s.intermediate}});
    out.push_back({p + "input_layernorm.weight", {s.hidden}});
    out.push_back({p + "post_attention_layernorm.weight", {s.hidden}});
  }
  out.push_back({"model.norm.weight", {s.hidden}});
  if (!s.tied) out.push_back({"lm_head.weight", {s.vocab, s.hidden}});
  return out;
}

bool ignorable_extra(const ModelSpec& s, const std::string& name) {
  return name.ends_with(".rotary_emb.inv_freq") || (s.tied && name == "lm_head.weight");
}

ordered_json export_config(const ModelSpec& s, const std::string& torch_dtype) {
  ordered_json c = s.config;
  c["architectures"] = {s.architecture};
  c["model_type"] = s.model_type;
  // written explicitly: the value the trainer used, whatever transformers' class default is
  c["vocab_size"] = s.vocab;
  c["hidden_size"] = s.hidden;
  c["intermediate_size"] = s.intermediate;
  c["num_hidden_layers"] = s.layers;
  c["num_attention_heads"] = s.heads;
  c["num_key_value_heads"] = s.kv_heads;
  c["head_dim"] = s.head_dim;
  c["tie_word_embeddings"] = s.tied;
  if (!present(c, "hidden_act")) c["hidden_act"] = "silu";
  if (!present(c, "rms_norm_eps")) c["rms_norm_eps"] = 1e-6;
  if (!present(c, "rope_theta")) c["rope_theta"] = 10000.0;
  if (!c.contains("rope_scaling")) c["rope_scaling"] = nullptr;
  if (s.model_type == "llama" || s.model_type == "qwen3") c["attention_bias"] = s.o_bias;
  if (s.model_type == "llama") c["mlp_bias"] = false;
  if (s.model_type == "mistral" && !c.contains("sliding_window")) c["sliding_window"] = nullptr;
  if (s.model_type == "qwen2" || s.model_type == "qwen3")
    if (!present(c, "use_sliding_window")) c["use_sliding_window"] = false;
  c["torch_dtype"] = torch_dtype;
  if (c.contains("dtype")) c["dtype"] = torch_dtype;   // transformers >= 4.56 writes this name
  return c;
}

ordered_json generation_config(const ModelSpec& s) {
  ordered_json g = ordered_json::object();
  for (const char* key : {"bos_token_id", "eos_token_id", "pad_token_id"})
    if (const ordered_json* v = present(s.config, key)) g[key] = *v;
  return g;
}

}  // namespace ulysses::ckpt
