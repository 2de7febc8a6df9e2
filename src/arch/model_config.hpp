// ModelConfig: the one description of a Llama-family decoder, read from a Hugging Face config.json.
// Torch-free: the model (ulysses-train), ulysses-ckpt and ulysses-pack --model-config all read configs
// here, and the questions asked before building a model (parameter names, shapes and counts, heads per
// SP rank) are answered here; the layers it describes are arch/layer_spec.hpp's, their parameters
// arch/parameters.hpp's.
//
// Supported: the rows of architectures.cpp — Llama 2/3/3.1/3.2, with every RoPE kind of arch/rope.hpp,
// Mistral (sliding window), Qwen2 (q/k/v bias), Qwen3 (per-head q/k RMSNorm, explicit head_dim), and the
// mixtures of experts Mixtral, Qwen2-MoE (shared expert) and Qwen3-MoE (dense layers among sparse ones). Every
// field means exactly what transformers 4.57 makes of it; anything the model would compute differently
// (another activation, dynamic RoPE, partial rotary, MLP bias, Qwen sliding-window layers, attention
// dropout) is a BadInput naming the file and the field, never silently ignored.
//
// Shape letters: H query heads, Hkv key/value heads, D head dim, V vocabulary, I intermediate size.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "arch/architectures.hpp"
#include "arch/moe_config.hpp"
#include "arch/rope.hpp"

namespace ulysses::arch {

struct ModelConfig {
  const ArchitectureRules* rules = nullptr;   // the row of architectures.cpp
  std::string model_type;              // "llama", ...
  std::string architecture;            // the transformers class: "LlamaForCausalLM", ...
  std::int64_t vocab_size = 0;         // V
  std::int64_t hidden_size = 0;
  std::int64_t intermediate_size = 0;  // I
  std::int64_t num_layers = 0;         // num_hidden_layers
  std::int64_t num_heads = 0;          // H
  std::int64_t num_kv_heads = 0;       // Hkv; H % Hkv == 0
  std::int64_t head_dim = 0;           // D; even
  double rms_norm_eps = 1e-6;
  RopeConfig rope;                     // rope_theta, rope_scaling, the context lengths (arch/rope.hpp)
  bool qkv_bias = false;               // bias on q_proj, k_proj, v_proj
  bool o_bias = false;                 // bias on o_proj
  bool qk_norm = false;                // RMSNorm over D of every query and key head, before RoPE
  bool tie_word_embeddings = false;    // lm_head reuses model.embed_tokens.weight (no lm_head.weight)
  std::optional<std::int64_t> sliding_window;   // query i sees keys j with i - j < window
  std::optional<std::int64_t> pad_token_id;     // embedding row that never receives a gradient (HF padding_idx)
  double initializer_range = 0.02;     // std of the from-scratch normal init
  MoeConfig moe;                       // routed experts (arch/moe_config.hpp); none in a dense model
};

// Reads and validates config.json, with --rope-scaling / --rope-theta applied when given (arch/rope.hpp). BadInput
// (naming the file and the field) on a missing required field, a wrong type or value, an unsupported architecture or
// feature.
ModelConfig read_model_config(const std::filesystem::path& config_json, const RopeOverride& rope = {});

// The same, keeping the file as read (key order kept; the override applied) for tools that rewrite it (the export,
// the checkpoint's copy).
struct ModelConfigFile {
  std::filesystem::path path;
  nlohmann::ordered_json json;
  ModelConfig config;
};
ModelConfigFile read_model_config_file(const std::filesystem::path& config_json, const RopeOverride& rope = {});

// ---- Sequence parallelism ----------------------------------------------------------------------

// Whether the flash kernels (FlashAttention-2, as PyTorch builds it) have kernels for this head size: a multiple of 8,
// at most 256. The model asks it of the attention it runs, the planner of the attention it counts.
inline bool flash_head_dim(std::int64_t head_dim) { return head_dim % 8 == 0 && head_dim <= 256; }

// Ulysses splits heads over the SP degree P — with a ring (--sp-ring R) over the Ulysses degree U = P / R: H % U == 0
// and (Hkv % U == 0 or U % Hkv == 0). BadInput naming `source`, with the numbers and the valid degrees as a hint.
void check_heads_for_sp(const ModelConfig& c, std::int64_t sp, const std::string& source, std::int64_t ring = 1);

// The heads one SP rank attends with after the all-to-all: H/P query heads and max(Hkv, P)/P key/value
// heads (key/value heads are replicated up to P when Hkv < P).
struct UlyssesHeads {
  std::int64_t q = 0, kv = 0;
};
UlyssesHeads ulysses_heads(const ModelConfig& c, std::int64_t sp);

// Attention in G head groups (--attention-head-groups): each group holds H/G query heads and either its own Hkv/G
// key/value heads (Hkv % G == 0) or, when G % Hkv == 0, the one key/value head its query heads share with the other
// groups of that head; and the group's heads split over P as a whole model's heads do (the SP rule above, with
// max(Hkv/G, 1) key/value heads). BadInput naming the flag, the numbers and the valid G for this P.
void check_head_groups(const ModelConfig& c, std::int64_t sp, std::int64_t groups);
std::vector<std::int64_t> valid_head_groups(const ModelConfig& c, std::int64_t sp);   // those G, ascending (1 first)

}  // namespace ulysses::arch
