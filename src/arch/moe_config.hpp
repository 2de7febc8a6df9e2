// MoeConfig: the routed experts of a mixture-of-experts config.json (architectures.hpp's MoeRule), every field as
// transformers 4.57's MixtralConfig, Qwen2MoeConfig and Qwen3MoeConfig read it — an absent field is the class's
// default — and which layers are sparse. Torch-free; model_config.cpp calls read_moe_config.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "arch/architectures.hpp"

namespace ulysses::arch {

// Routed experts (architectures.hpp's MoeRule), as transformers 4.57's MixtralConfig, Qwen2MoeConfig and Qwen3MoeConfig
// read them; experts == 0: a dense model.
struct MoeConfig {
  std::int64_t experts = 0;                 // E: num_local_experts (Mixtral), num_experts (Qwen)
  std::int64_t top_k = 0;                   // k: num_experts_per_tok
  std::int64_t expert_intermediate = 0;     // each expert's I: moe_intermediate_size (Mixtral: intermediate_size)
  std::int64_t shared_intermediate = 0;     // shared_expert_intermediate_size (Qwen2-MoE); 0: no shared expert
  bool normalize_top_k = false;             // the k weights divided by their sum: norm_topk_prob (Mixtral: always)
  std::int64_t sparse_step = 1;             // decoder_sparse_step: layer i is sparse when (i + 1) % step == 0 ...
  std::vector<std::int64_t> dense_layers;   // ... and i is not in mlp_only_layers
  bool router_loss = false;                 // the load-balancing loss is trained: output_router_logits, coef > 0
  double router_aux_loss_coef = 0.001;      // its weight (ulysses-train --router-aux-loss-coef replaces it)
  bool enabled() const { return experts > 0; }
};

// The MoE fields of config.json `j` (`file` in messages) for an architecture of rule `rule` with `layers` decoder
// layers and intermediate_size `intermediate`. BadInput naming the file and the field: a size that is not a positive
// integer, top-k above the experts, a layer index outside [0, layers), a negative coefficient, router jitter (random
// per step: not reproducible, not supported). A dense rule reads nothing and returns no experts.
MoeConfig read_moe_config(const nlohmann::ordered_json& j, const std::string& file, MoeRule rule,
                          std::int64_t intermediate, std::int64_t layers);

// Whether decoder layer `layer` has routed experts: (layer + 1) % sparse_step == 0 and layer not among dense_layers.
bool sparse_layer(const MoeConfig& moe, std::int64_t layer);
std::int64_t sparse_layer_count(const MoeConfig& moe, std::int64_t layers);

}  // namespace ulysses::arch
