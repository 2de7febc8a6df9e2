#include "model/config.hpp"

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.hpp"

namespace ulysses::model {
namespace {

using nlohmann::json;

constexpr const char* kHint = "pass the config.json of a Hugging Face Llama, Mistral, Qwen2 or Qwen3 model";

// The value of `key`, or nullptr when it is absent or null.
const json* field(const json& j, const char* key) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

[[noreturn]] void bad_field(const std::string& file, const char* key, const std::string& why) {
  throw BadInput(fmt::format("{}: field \"{}\" {}", file, key, why), kHint);
}

std::int64_t positive_int(const json& v, const std::string& file, const char* key) {
  if (!v.is_number_integer() || v.get<std::int64_t>() <= 0)
    bad_field(file, key, fmt::format("must be a positive integer (got {})", v.dump()));
  return v.get<std::int64_t>();
}

std::int64_t required_int(const json& j, const std::string& file, const char* key) {
  const json* v = field(j, key);
  if (!v) bad_field(file, key, "is required but missing");
  return positive_int(*v, file, key);
}

double number_or(const json& j, const std::string& file, const char* key, double fallback) {
  const json* v = field(j, key);
  if (!v) return fallback;
  if (!v->is_number()) bad_field(file, key, fmt::format("must be a number (got {})", v->dump()));
  return v->get<double>();
}

bool bool_or(const json& j, const std::string& file, const char* key, bool fallback) {
  const json* v = field(j, key);
  if (!v) return fallback;
  if (!v->is_boolean()) bad_field(file, key, fmt::format("must be true or false (got {})", v->dump()));
  return v->get<bool>();
}

Architecture architecture_of(const json& j, const std::string& file) {
  const json* type = field(j, "model_type");
  if (!type || !type->is_string()) bad_field(file, "model_type", "is required but missing");
  const std::string t = type->get<std::string>();
  Architecture a;
  if (t == "llama") a = Architecture::kLlama;
  else if (t == "mistral") a = Architecture::kMistral;
  else if (t == "qwen2") a = Architecture::kQwen2;
  else if (t == "qwen3") a = Architecture::kQwen3;
  else bad_field(file, "model_type", fmt::format("\"{}\" is not supported (llama, mistral, qwen2, qwen3)", t));
  // A head other than the causal-LM one (e.g. ...ForSequenceClassification) has other weights.
  const json* archs = field(j, "architectures");
  if (archs && (!archs->is_array() || archs->empty() || (*archs)[0] != architecture_name(a)))
    bad_field(file, "architectures", fmt::format("must be [\"{}\"] for model_type \"{}\" (got {})",
                                                 architecture_name(a), t, archs->dump()));
  return a;
}

std::optional<Llama3RopeScaling> rope_scaling_of(const json& j, const std::string& file) {
  const json* rs = field(j, "rope_scaling");
  if (!rs) return std::nullopt;
  if (!rs->is_object()) bad_field(file, "rope_scaling", fmt::format("must be an object (got {})", rs->dump()));
  const json* type = field(*rs, "rope_type") ? field(*rs, "rope_type") : field(*rs, "type");
  const std::string t = type && type->is_string() ? type->get<std::string>() : "default";
  if (t == "default") return std::nullopt;
  if (t != "llama3")
    bad_field(file, "rope_scaling", fmt::format("has rope_type \"{}\"; only \"default\" and \"llama3\" are "
                                                "supported", t));
  const std::string where = file + " rope_scaling";
  Llama3RopeScaling s;
  for (auto [key, dst] : {std::pair{"factor", &s.factor}, std::pair{"low_freq_factor", &s.low_freq_factor},
                          std::pair{"high_freq_factor", &s.high_freq_factor}}) {
    const json* v = field(*rs, key);
    if (!v || !v->is_number() || v->get<double>() <= 0)
      bad_field(where, key, "must be a positive number for rope_type \"llama3\"");
    *dst = v->get<double>();
  }
  if (s.high_freq_factor <= s.low_freq_factor)
    bad_field(where, "high_freq_factor", fmt::format("({}) must be greater than low_freq_factor ({})",
                                                     s.high_freq_factor, s.low_freq_factor));
  s.original_max_position_embeddings = required_int(*rs, where, "original_max_position_embeddings");
  return s;
}

// H and Hkv. A null num_key_value_heads means H everywhere; an absent one means H only for Llama
// (Mistral and Qwen default to another number, so we ask for it).
void read_heads(const json& j, const std::string& file, ModelConfig& c) {
  c.num_heads = required_int(j, file, "num_attention_heads");
  const bool absent = !j.contains("num_key_value_heads");
  if (absent && c.architecture != Architecture::kLlama)
    bad_field(file, "num_key_value_heads", "is required but missing");
  const json* kv = field(j, "num_key_value_heads");
  c.num_kv_heads = kv ? positive_int(*kv, file, "num_key_value_heads") : c.num_heads;
  if (c.num_heads % c.num_kv_heads != 0)
    bad_field(file, "num_key_value_heads", fmt::format("({}) must divide num_attention_heads ({})",
                                                       c.num_kv_heads, c.num_heads));
}

// D: explicit for Qwen3 (its class default differs), else head_dim when set, else hidden / H.
void read_head_dim(const json& j, const std::string& file, ModelConfig& c) {
  const json* hd = field(j, "head_dim");
  if (hd && !(c.architecture == Architecture::kMistral && *hd == 0)) {
    c.head_dim = positive_int(*hd, file, "head_dim");
  } else if (c.architecture == Architecture::kQwen3) {
    bad_field(file, "head_dim", "is required but missing");
  } else {
    if (c.hidden_size % c.num_heads != 0)
      bad_field(file, "hidden_size", fmt::format("({}) must be divisible by num_attention_heads ({}) when "
                                                 "head_dim is not given", c.hidden_size, c.num_heads));
    c.head_dim = c.hidden_size / c.num_heads;
  }
  if (c.head_dim % 2 != 0) bad_field(file, "head_dim", fmt::format("({}) must be even for RoPE", c.head_dim));
}

// Bias flags as each transformers class builds its projections.
void read_biases(const json& j, const std::string& file, ModelConfig& c) {
  switch (c.architecture) {
    case Architecture::kLlama:
    case Architecture::kQwen3:
      c.qkv_bias = c.o_bias = bool_or(j, file, "attention_bias", false);
      break;
    case Architecture::kQwen2:
      c.qkv_bias = true;
      break;
    case Architecture::kMistral:
      break;
  }
  if (bool_or(j, file, "mlp_bias", false)) bad_field(file, "mlp_bias", "is true; MLP biases are not supported");
}

void read_attention_window(const json& j, const std::string& file, ModelConfig& c) {
  if (c.architecture == Architecture::kMistral) {
    if (!j.contains("sliding_window")) bad_field(file, "sliding_window", "is required (null for none) but missing");
    if (const json* w = field(j, "sliding_window")) c.sliding_window = positive_int(*w, file, "sliding_window");
  } else if (bool_or(j, file, "use_sliding_window", false)) {
    bad_field(file, "use_sliding_window", "is true; sliding-window layers are supported for Mistral only");
  }
}

// Fields whose only supported value is the default: refuse anything else instead of ignoring it.
void check_unsupported(const json& j, const std::string& file) {
  const json* act = field(j, "hidden_act");
  if (act && *act != "silu") bad_field(file, "hidden_act", fmt::format("must be \"silu\" (got {})", act->dump()));
  if (number_or(j, file, "partial_rotary_factor", 1.0) != 1.0)
    bad_field(file, "partial_rotary_factor", "must be 1 (partial rotary embeddings are not supported)");
  if (number_or(j, file, "attention_dropout", 0.0) != 0.0)
    bad_field(file, "attention_dropout", "must be 0 (attention dropout is not supported)");
}

ModelConfig parse(const json& j, const std::string& file) {
  ModelConfig c;
  c.architecture = architecture_of(j, file);
  check_unsupported(j, file);
  c.vocab_size = required_int(j, file, "vocab_size");
  c.hidden_size = required_int(j, file, "hidden_size");
  c.intermediate_size = required_int(j, file, "intermediate_size");
  c.num_layers = required_int(j, file, "num_hidden_layers");
  read_heads(j, file, c);
  read_head_dim(j, file, c);
  read_biases(j, file, c);
  read_attention_window(j, file, c);
  c.qk_norm = c.architecture == Architecture::kQwen3;
  c.rms_norm_eps = number_or(j, file, "rms_norm_eps", 1e-6);
  c.rope_theta = number_or(j, file, "rope_theta", 10000.0);
  c.llama3_rope = rope_scaling_of(j, file);
  c.tie_word_embeddings = bool_or(j, file, "tie_word_embeddings", false);
  c.initializer_range = number_or(j, file, "initializer_range", 0.02);
  if (const json* pad = field(j, "pad_token_id")) {
    if (!pad->is_number_integer() || pad->get<std::int64_t>() < 0 || pad->get<std::int64_t>() >= c.vocab_size)
      bad_field(file, "pad_token_id", fmt::format("must be a token id in [0, {}) (got {})", c.vocab_size, pad->dump()));
    c.pad_token_id = pad->get<std::int64_t>();
  }
  return c;
}

}  // namespace

const char* architecture_name(Architecture a) {
  switch (a) {
    case Architecture::kLlama: return "LlamaForCausalLM";
    case Architecture::kMistral: return "MistralForCausalLM";
    case Architecture::kQwen2: return "Qwen2ForCausalLM";
    case Architecture::kQwen3: return "Qwen3ForCausalLM";
  }
  return "?";
}

ModelConfig read_model_config(const std::filesystem::path& config_json) {
  const std::string file = config_json.string();
  std::ifstream in(config_json);
  if (!in) throw BadInput(fmt::format("cannot open model config {}", file), kHint);
  json j;
  try {
    j = json::parse(in);
  } catch (const json::parse_error& e) {
    throw BadInput(fmt::format("{}: not valid JSON (byte {}): {}", file, e.byte, e.what()), kHint);
  }
  if (!j.is_object()) throw BadInput(fmt::format("{}: not a JSON object", file), kHint);
  return parse(j, file);
}

}  // namespace ulysses::model
