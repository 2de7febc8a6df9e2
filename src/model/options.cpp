#include "model/options.hpp"

#include "plan/memory_flags.hpp"

namespace ulysses::model {

ModelOptions model_options(const plan::Features& f, Precision precision, bool cuda) {
  return ModelOptions()
      .precision(precision)
      .reduce_dtype(f.reduce_bf16 ? c10::kBFloat16 : c10::kFloat)
      .fp32_residual(f.fp32_residual)
      .attention_head_groups(f.attention_head_groups)
      .prefetch(f.prefetches(cuda))
      .heads_ahead(f.issues_heads_ahead(cuda))
      .activation_checkpointing(f.activation_checkpointing)
      .offload_checkpoints(f.offload_checkpoints)
      .mlp_tile_tokens(f.mlp_tile_tokens)
      .logits_chunk_tokens(f.logits_chunk_tokens)
      .lora(LoraOptions{
          .rank = f.lora_rank, .alpha = f.lora_alpha, .rslora = f.lora_rslora, .targets = f.lora_targets});
}

}  // namespace ulysses::model
