// LoRA (Hu et al. 2021) as PEFT computes it: a projection y = x·Wᵀ + bias becomes
//   y = x·Wᵀ + bias + scale · (x·Aᵀ)·Bᵀ,   A [r, in], B [out, r], scale = alpha / r (rsLoRA: alpha / √r)
// on the projections named by PEFT's module names (q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj, or
// all-linear: all seven; never the head). The base weights are frozen (no gradient); the adapters are the trained
// parameters, named as PEFT names them inside the model: <projection>.lora_A.weight, <projection>.lora_B.weight
// (model.layers.0.self_attn.q_proj.lora_A.weight). Initialised as PEFT's default: A kaiming-uniform (a = √5, i.e.
// uniform in ±1/√in), B zero, so the adapted model starts as the base model. Dropout: none (0 only).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>

namespace ulysses::model {

// Which projections get adapters and their size; rank 0 = no LoRA.
struct LoraOptions {
  std::int64_t rank = 0;
  double alpha = 0;
  bool rslora = false;
  std::vector<std::string> targets;   // PEFT module names (q_proj, …; plan::lora_targets expands all-linear)

  bool enabled() const { return rank > 0; }
  double scale() const;
  bool targets_module(const std::string& projection) const;
};

// One projection's adapter; undefined tensors when the projection has none.
struct Lora {
  torch::Tensor a;   // [r, in]
  torch::Tensor b;   // [out, r]
};

// x [..., in] -> [..., out]: x·wᵀ + bias, plus scale · (x·aᵀ)·bᵀ when the adapter is there. The one seam every
// decoder weight's product goes through (attention's q/k/v — one product or three — and o, the MLP's three): where a
// lower-precision matmul (FP8) would go. The head's product (tiled_loss.cpp, causal_lm.cpp) stays outside it, as FP8
// recipes keep the head in bf16.
torch::Tensor project(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& bias, const Lora& lora,
                      double scale);
// y (x's projection, [..., out]) plus the adapter's scale · (x·aᵀ)·bᵀ; y itself where the projection has none.
torch::Tensor with_adapter(const torch::Tensor& y, const torch::Tensor& x, const Lora& lora, double scale);

// The adapter factors' module type: one weight, registered as lora_A / lora_B under the projection it adapts.
struct LoraFactorImpl : torch::nn::Module {
  LoraFactorImpl(std::int64_t rows, std::int64_t columns);
  torch::Tensor weight;
};
TORCH_MODULE(LoraFactor);

// Registers lora_A [r, in] and lora_B [out, r] under `projection` when the options target `name`.
void add_adapter(torch::nn::Linear& projection, const std::string& name, const LoraOptions& options);
// The adapter `projection` carries (undefined tensors if none).
Lora adapter_of(const torch::nn::Linear& projection);

// A parameter name of an adapter factor (….lora_A.weight, ….lora_B.weight).
bool is_adapter_parameter(const std::string& name);

// The base's parameters stop requiring grad; the adapters keep it.
void freeze_base(torch::nn::Module& model);

}  // namespace ulysses::model
