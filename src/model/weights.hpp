// Filling a CausalLm's parameters: from scratch (transformers' _init_weights, seeded) or from a Hugging
// Face weights directory (model.safetensors, or an index + shards).
//
// Loading is strict: every parameter must be present with its exact shape and a floating dtype (F32, BF16,
// F16; converted to the parameter's dtype and device), and the directory may hold nothing else except the
// rotary inv_freq buffers old exports carry. Anything else is a BadInput naming the directory and the
// first few offending tensors, before any parameter is touched.
#pragma once

#include <cstdint>
#include <filesystem>

#include "model/causal_lm.hpp"

namespace ulysses::model {

// torch::manual_seed(seed), then: Linear and Embedding weights ~ normal(0, initializer_range) (the
// padding row of the embedding zero), biases zero, RMSNorm weights one; then the LoRA adapters, if any
// (init_adapters). Same seed → same weights, the base's the same with and without LoRA.
void init_weights(CausalLm& model, std::uint64_t seed);
void init_base_weights(CausalLm& model, std::uint64_t seed);   // the same without the adapters
// Every LoRA adapter (model/lora.hpp) as PEFT initialises it — A kaiming-uniform (±1/√in), B zero — from
// torch::manual_seed(seed + 1) (the base's own draws, from seed, are the same with and without LoRA). Sharded or not.
void init_adapters(CausalLm& model, std::uint64_t seed);

// The base's parameters (every one but the LoRA adapters, which a model folder does not hold).
void load_hf_weights(CausalLm& model, const std::filesystem::path& dir);

}  // namespace ulysses::model
