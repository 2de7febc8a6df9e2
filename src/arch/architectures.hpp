// The architecture table: every Hugging Face model_type the toolkit trains, and how its config.json is
// read. This is the one place that knows architectures by name; everything else (the parser in
// model_config.cpp, the model, the export config) asks a row for a rule. Adding an architecture is a row
// in architectures.cpp plus its tests (docs/architecture.md, "Adding an architecture").
// Torch-free.
#pragma once

#include <string>
#include <string_view>

namespace ulysses::arch {

// head_dim in config.json.
enum class HeadDimRule {
  kOptional,          // absent or null: hidden_size / num_attention_heads
  kOptionalZeroNull,  // the same, and 0 also means absent (MistralConfig writes head_dim 0 for "unset")
  kRequired,          // must be given (the class default is not hidden / heads)
};

// Which projections carry a bias.
enum class BiasRule {
  kAttentionBiasFlag,   // q/k/v/o_proj follow "attention_bias" (default false); export writes it
  kQkvAlways,           // q/k/v_proj always, o_proj never
  kNoBias,              // none
};

// Sliding-window attention.
enum class WindowRule {
  kNoWindow,            // no window; "use_sliding_window": true is refused
  kSlidingWindow,       // "sliding_window" is required (null = none): query i sees keys j with i - j < window
  kUseSlidingWindowFlag,// Qwen: "use_sliding_window" must be false; export writes it false
};

struct ArchitectureRules {
  const char* model_type;          // config.json "model_type": "llama"
  const char* class_name;          // "architectures"[0], the transformers class: "LlamaForCausalLM"
  bool kv_heads_default_to_heads;  // an absent num_key_value_heads means H (else it is required)
  HeadDimRule head_dim;
  BiasRule bias;
  bool qk_norm;                    // RMSNorm over D of every query and key head before RoPE (Qwen3)
  WindowRule window;
  bool mlp_bias_field;             // the config class reads "mlp_bias": export writes it (false)
};

// The row of `model_type`, or nullptr.
const ArchitectureRules* find_architecture(std::string_view model_type);

// "llama, mistral, qwen2, qwen3": the supported model types, for messages.
std::string supported_model_types();

}  // namespace ulysses::arch
