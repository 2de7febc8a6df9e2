// ModelOptions: how a model runs, beside what it is (arch::ModelConfig): the precision and the memory features'
// switches, PyTorch C++ frontend style (TORCH_ARG: `ModelOptions().precision(Precision::kBf16)`), or model_options()
// from the memory flags as plan/memory_flags resolves them for the planner too (the trainer's way). The decoder builds
// its layer runner from them (layer_runner.hpp); the decoder layer reads the MLP tile, the head the logits chunk.
//
// The model owns its autocast scope: CausalLm::forward enters it from `precision`, and the recompute primitive
// (recompute.hpp) re-enters the same precision around each chunk it runs again in backward. Sharded states come
// with the model's StatePlacement (sharded_states.hpp), not from here.
#pragma once

#include <cstdint>

#include <torch/arg.h>

#include "model/lora.hpp"
#include "model/precision.hpp"

namespace ulysses::plan {
struct Features;
}

namespace ulysses::model {

struct ModelOptions {
  TORCH_ARG(Precision, precision) = Precision::kFp32;   // precision.hpp: fp32, bf16 or amp-bf16
  // The dtype gradients are summed over ranks in (sharded: reduce-scattered; replicated: all-reduced) before they
  // reach the fp32 masters: float32, or bfloat16 (half the bytes on the wire, bf16 rounding of each rank's part).
  TORCH_ARG(c10::ScalarType, reduce_dtype) = c10::kFloat;
  // The bf16 model with an fp32 residual stream (Megatron's --fp32-residual-connection): the embedding output and
  // every layer's output (so each kept or offloaded layer input) fp32, each norm's output cast to the weights' bf16
  // for the matmuls it feeds. Nothing changes under fp32 or amp-bf16, whose residual stream is fp32 already.
  TORCH_ARG(bool, fp32_residual) = false;
  // Attention in head groups (attention.hpp): each layer's attention over this many groups of heads, one group's
  // activations alive at a time, in forward and in backward. 1 = all heads at once.
  TORCH_ARG(std::int64_t, attention_head_groups) = 1;
  // Activation checkpointing per decoder layer (recompute.hpp): keep each layer's input, recompute the layer
  // in backward.
  TORCH_ARG(bool, activation_checkpointing) = false;
  // Checkpoint offload: the inputs of the first this-many checkpointed layers are kept in host memory
  // (recompute.hpp); needs activation_checkpointing. 0 = none.
  TORCH_ARG(std::int64_t, offload_checkpoints) = 0;
  // TiledMLP (tiled_mlp.hpp): each layer's norm + MLP + residual over tiles of this many tokens; 0 = untiled.
  TORCH_ARG(std::int64_t, mlp_tile_tokens) = 0;
  // Tiled logits + loss (tiled_loss.hpp): the head and cross-entropy over chunks of this many tokens;
  // 0 = the whole [S/P, V] logits at once (also whenever the caller asks to keep the logits).
  TORCH_ARG(std::int64_t, logits_chunk_tokens) = 0;
  // Prefetch (side_stream.hpp): issue the next unit's weight gathers (sharded states) and the copy back of the
  // previous layer's offloaded input (checkpoint offload) ahead, on side streams. Exact either way.
  TORCH_ARG(bool, prefetch) = false;
  // Attention in head groups with each group's projections and all-to-all issued a group ahead on a side stream
  // (attention.hpp); model_options: with --prefetch, where the length leaves room for them (plan::Features).
  TORCH_ARG(bool, heads_ahead) = false;
  // LoRA (lora.hpp): adapters on the projections it names, the base frozen. rank 0 = off.
  TORCH_ARG(LoraOptions, lora);
};

// The memory flags as resolved once for the planner and the trainer (plan/memory_flags.hpp: the same rules, so the
// plan counts what the model runs), run on a CUDA device or not (--prefetch auto: on for a GPU).
ModelOptions model_options(const plan::Features& features, Precision precision, bool cuda);

}  // namespace ulysses::model
