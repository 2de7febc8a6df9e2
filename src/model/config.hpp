// ModelConfig: the architecture of a Llama-family decoder, read from a Hugging Face config.json.
//
// Supported: LlamaForCausalLM (Llama 2, 3, 3.1, 3.2, with or without "llama3" RoPE scaling),
// MistralForCausalLM (sliding-window attention when "sliding_window" is set), Qwen2ForCausalLM (q/k/v
// bias) and Qwen3ForCausalLM (per-head q/k RMSNorm, explicit head_dim). Every field means exactly what
// transformers 4.57 makes of it; anything the model would compute differently from transformers
// (another activation, another RoPE type, partial rotary, MLP bias, Qwen sliding-window layers,
// attention dropout) is a BadInput naming the file and the field, never silently ignored.
// Torch-free.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>

namespace ulysses::model {

enum class Architecture { kLlama, kMistral, kQwen2, kQwen3 };

const char* architecture_name(Architecture a);   // "LlamaForCausalLM", ...

// rope_scaling {"rope_type": "llama3", ...} (Llama 3.1 / 3.2): long wavelengths divided by `factor`,
// short ones kept, a smooth blend between (modeling_rope_utils._compute_llama3_parameters).
struct Llama3RopeScaling {
  double factor = 0;
  double low_freq_factor = 0;
  double high_freq_factor = 0;
  std::int64_t original_max_position_embeddings = 0;
};

struct ModelConfig {
  Architecture architecture = Architecture::kLlama;
  std::int64_t vocab_size = 0;
  std::int64_t hidden_size = 0;
  std::int64_t intermediate_size = 0;
  std::int64_t num_layers = 0;         // num_hidden_layers
  std::int64_t num_heads = 0;          // H
  std::int64_t num_kv_heads = 0;       // Hkv; H % Hkv == 0
  std::int64_t head_dim = 0;           // D; even
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  std::optional<Llama3RopeScaling> llama3_rope;
  bool qkv_bias = false;               // bias on q_proj, k_proj, v_proj
  bool o_bias = false;                 // bias on o_proj
  bool qk_norm = false;                // Qwen3: RMSNorm over D of every query and key head, before RoPE
  bool tie_word_embeddings = false;    // lm_head reuses model.embed_tokens.weight (no lm_head.weight)
  std::optional<std::int64_t> sliding_window;   // Mistral: query i sees keys j with i - j < window
  std::optional<std::int64_t> pad_token_id;     // embedding row that never receives a gradient (HF padding_idx)
  double initializer_range = 0.02;     // std of the from-scratch normal init
};

// Reads and validates config.json. BadInput (naming the file and the field) on a missing required field,
// a wrong type or value, an unsupported architecture or feature.
ModelConfig read_model_config(const std::filesystem::path& config_json);

}  // namespace ulysses::model
