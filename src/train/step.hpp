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
  double mean() const { return count > 0 ? sum / count : 0.0; }
};

// The model and its states live on `device`; the inputs are moved there (document ids stay on the host,
// where the attention plan is made). The model runs in its own precision (ModelOptions).
LossTotals compute_gradients(model::CausalLm& model, data::DataLoader& loader, std::int64_t grad_accum,
                             ModelStates& states, const c10::Device& device);

}  // namespace ulysses::train
