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
  kQkvBiasFlag,         // q/k/v_proj follow "qkv_bias" (default true), o_proj never (Qwen2-MoE); export writes it
  kNoBias,              // none
};

// Sliding-window attention.
enum class WindowRule {
  kNoWindow,            // no window; "use_sliding_window": true is refused
  kSlidingWindow,       // "sliding_window" is required (null = none): query i sees keys j with i - j < window
  kOptionalSlidingWindow,   // the same, absent meaning none (Mixtral)
  kUseSlidingWindowFlag,// Qwen: "use_sliding_window" must be false; export writes it false
};

// The MLP of its decoder layers (arch/layer_spec.hpp), and the config fields that describe it (model_config.cpp).
enum class MoeRule {
  kDense,     // the dense gated MLP of intermediate_size in every layer
  kMixtral,   // routed experts in every layer: num_local_experts of intermediate_size, top-k renormalised,
              // "block_sparse_moe" with experts' w1/w3/w2; router_jitter_noise must be 0
  kQwen2Moe,  // routed experts (num_experts of moe_intermediate_size, norm_topk_prob) in the layers that
              // decoder_sparse_step and mlp_only_layers make sparse, dense ones of intermediate_size elsewhere, and a
              // shared expert of shared_expert_intermediate_size with its sigmoid gate
  kQwen3Moe,  // the same without the shared expert
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
  MoeRule moe;
};

// The row of `model_type`, or nullptr.
const ArchitectureRules* find_architecture(std::string_view model_type);

// "llama, mistral, mixtral, ...": the supported model types, for messages.
std::string supported_model_types();

}  // namespace ulysses::arch
