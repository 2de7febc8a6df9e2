// What a Hugging Face config.json says about the weights, torch-free: the tensor names and shapes of a
// Llama / Mistral / Qwen2 / Qwen3 causal LM exactly as transformers 4.57 builds them (the same rules as
// model/config.cpp, which ulysses-ckpt may not link), and the config.json / generation_config.json an
// export writes so that from_pretrained rebuilds the very model the trainer ran.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ulysses::ckpt {

struct ModelSpec {
  std::filesystem::path file;        // the config.json it came from
  nlohmann::ordered_json config;     // the file as read, key order kept
  std::string model_type;            // "llama", "mistral", "qwen2", "qwen3"
  std::string architecture;          // "LlamaForCausalLM", ...
  std::int64_t vocab = 0, hidden = 0, intermediate = 0, layers = 0;
  std::int64_t heads = 0, kv_heads = 0, head_dim = 0;   // H, Hkv, D
  bool qkv_bias = false, o_bias = false, qk_norm = false, tied = false;
};

// BadInput naming the file and the field: missing or not a positive integer, unknown model_type, H % Hkv.
ModelSpec read_model_spec(const std::filesystem::path& config_json);

struct TensorSpec {
  std::string name;
  std::vector<std::int64_t> shape;
};

// Every parameter, in transformers' named_parameters() order; no lm_head.weight when tied.
std::vector<TensorSpec> expected_tensors(const ModelSpec& spec);

// Tensors a Hugging Face directory may hold beyond the parameters, ignored on import: old exports'
// rotary inv_freq buffers, and lm_head.weight of a tied model (equal to the embeddings by definition).
bool ignorable_extra(const ModelSpec& spec, const std::string& name);

// config.json of an export: the checkpoint's config with every field transformers reads written out
// as the trainer resolved it (head_dim, num_key_value_heads, biases, tie_word_embeddings, ...), plus
// architectures, model_type and the dtype of the written weights.
nlohmann::ordered_json export_config(const ModelSpec& spec, const std::string& torch_dtype);

// generation_config.json: bos/eos/pad token ids from the config (those present).
nlohmann::ordered_json generation_config(const ModelSpec& spec);

}  // namespace ulysses::ckpt
