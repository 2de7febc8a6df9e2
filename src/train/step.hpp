// The gradient of one optimizer step, exact at any SP × DP layout.
//
// Runs grad_accum micro-batches forward and backward (each rank back-propagates the SUM of its token
// losses; the Ulysses all-to-all backward carries the cross-rank terms), then sums loss, label count and
// gradients over the grad group (SP × DP; reduce-scattered into shards when sharded) and divides by the
// global count: on return the gradient each rank holds (every parameter's, or its shards') is that of
// loss = Σ token losses / Σ valid labels, the same as any other layout's.
#pragma once

#include <vector>

#include <torch/types.h>

#include "comm/communicator.hpp"
#include "data/loader.hpp"
#include "model/causal_lm.hpp"
#include "train/model_states.hpp"

namespace ulysses::train {

struct LossTotals {
  double sum = 0, count = 0;
  double attention_pairs = 0;   // Σ d² over the documents of every sequence of the step (each counted once)
  double mean() const { return count > 0 ? sum / count : 0.0; }
};

// One micro-batch through the model on `device` (document ids stay on the host, where the attention plan is made).
model::CausalLmOutput forward_micro_batch(model::CausalLm& model, const data::MicroBatch& mb, const c10::Device& device);

// The model and its states live on `device`; the inputs are moved there. The model runs in its own precision
// (ModelOptions).
LossTotals compute_gradients(model::CausalLm& model, data::DataLoader& loader, std::int64_t grad_accum,
                             ModelStates& states, const c10::Device& device);

// Evaluation: Σ token losses and the label count over the first `sequences` sequences of `loader`'s split (all of
// them when 0), without gradients, summed over `group` (SP × DP) — the same contract as training's loss, so the
// result is the same at any layout. `loader` has micro-batch 1 and no accumulation; every rank runs the same
// number of forwards (the sharded units' all-gathers are collective) and a rank past the end adds nothing.
LossTotals evaluate(model::CausalLm& model, data::DataLoader& loader, std::int64_t sequences, std::int64_t dp,
                    std::int64_t dp_rank, comm::Communicator& group, const c10::Device& device);

}  // namespace ulysses::train
