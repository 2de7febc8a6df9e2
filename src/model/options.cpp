#include "model/options.hpp"

#include "plan/memory_flags.hpp"

namespace ulysses::model {

ModelOptions model_options(const plan::Features& f, Precision precision, bool cuda) {
  return ModelOptions()
      .precision(precision)
      .prefetch(f.prefetches(cuda))
      .activation_checkpointing(f.activation_checkpointing)
      .offload_checkpoints(f.offload_checkpoints)
      .mlp_tile_tokens(f.mlp_tile_tokens)
      .logits_chunk_tokens(f.logits_chunk_tokens);
}

}  // namespace ulysses::model
