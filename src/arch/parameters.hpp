// The model's parameters as transformers builds them — names, shapes, order — and their counts, listed from the
// layer description (layer_spec.hpp) with the embeddings, final norm and head around the layers. The import, export,
// merge, PEFT and inspect name maps, the sharded state layout and the planner's state bytes all read this list.
// Torch-free.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "arch/model_config.hpp"

namespace ulysses::arch {

struct ParameterSpec {
  std::string name;                  // "model.layers.0.self_attn.q_proj.weight"
  std::vector<std::int64_t> shape;   // [H*D, hidden]
  std::int64_t layer = -1;           // decoder layer index; -1 for embeddings, final norm and head
  std::string peft_target;           // the PEFT module name LoRA adapts it under ("q_proj"); empty: not adaptable
  std::int64_t numel() const;
};

// Every parameter in transformers' named_parameters() order; no lm_head.weight when tied.
std::vector<ParameterSpec> parameters(const ModelConfig& c);
// LoRA's adapter factors (model/lora.hpp) on the decoder projections named by PEFT's module names (q_proj, …,
// down_proj): <projection>.lora_A.weight [rank, in] and <projection>.lora_B.weight [out, rank], in parameters() order.
std::vector<ParameterSpec> lora_parameters(const ModelConfig& c, std::int64_t rank,
                                           const std::vector<std::string>& targets);
std::int64_t parameter_count(const ModelConfig& c);         // all parameters
std::int64_t layer_parameter_count(const ModelConfig& c);   // the first decoder layer's
// The weights of matrix products: every 2-d parameter except an untied embedding table (a lookup, no
// FLOPs); a tied table counts once, as the head. A step's model FLOPs are 6 × this × tokens + attention.
std::int64_t matmul_parameter_count(const ModelConfig& c);
// What one token computes with: the same counts with each routed layer's E experts replaced by its k
// (LayerSpec::active_parameter_count): a step's FLOPs are those of the active parameters, its state bytes those of all.
std::int64_t active_parameter_count(const ModelConfig& c);
std::int64_t active_matmul_parameter_count(const ModelConfig& c);

}  // namespace ulysses::arch
