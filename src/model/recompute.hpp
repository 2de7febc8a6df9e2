// Activation checkpointing at decoder-layer granularity: a layer's forward keeps only its input; backward
// runs the layer again (inside the model's autocast scope, with its all-to-alls — every rank recomputes the
// same layers in the same order, so the collectives still match) and back-propagates through that copy.
//
//   forward:  y = layer(x) under no-grad; saved: x [B, S/P, hidden] only
//   backward: x' = x (detached, requires grad); y' = layer(x') with grad; backward(y', dy) → dx = x'.grad;
//             the layer's parameter gradients accumulate into their .grad as in the plain path
//
// Exact: the recomputation repeats the same deterministic operations, so the gradients equal the plain
// path's bit for bit (tested on CPU in fp32 and bf16). The layer, the rope tables and the attention plan are
// shared with the graph, not copied. x must require grad (it does: the embeddings are trained; checked).
// The parameters' gradients accumulate into their .grad (they are not inputs of the Function), so the
// recomputation uses the layer's own weights: weights gathered from shards will need them as inputs.
//
// Checkpoint offload: the kept input goes to host memory (pinned when it is on a GPU) and comes back for the
// recomputation. Exact (a copy). Synchronous for now: no side stream and no prefetch of the next layer yet.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "model/causal_lm.hpp"
#include "model/precision.hpp"

namespace ulysses::model {

struct Recompute {
  Precision precision = Precision::kFp32;             // the model's, re-entered for the recomputation
  bool offload = false;                               // keep x in host memory
  std::shared_ptr<std::atomic<std::int64_t>> offloaded_bytes;   // counts what offload copied (may be null)
};

// layer(x, rope, plan) with only x kept for backward (on the host when options.offload).
torch::Tensor recomputed_layer(std::shared_ptr<DecoderLayerImpl> layer, const torch::Tensor& x,
                               std::shared_ptr<const RopeTables> rope, std::shared_ptr<const AttentionPlan> plan,
                               const Recompute& options);

}  // namespace ulysses::model
