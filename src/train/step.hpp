// The gradient of one optimizer step, exact at any SP × DP layout.
//
// Runs grad_accum micro-batches forward and backward (each rank back-propagates the SUM of its token
// losses; the Ulysses all-to-all backward carries the cross-rank terms), then sums loss, label count and
// gradients over the grad group (SP × DP; reduce-scattered into shards when sharded) and divides by the
// global count: on return the gradient each rank holds (every parameter's, or its shards') is that of
// loss = Σ token losses / Σ valid labels, the same as any other layout's.
//
// A mixture of experts adds its load-balancing loss (model/moe.hpp: one value per forward, over the SP group's real
// tokens of that micro-batch, the same at any SP degree): the step's aux_loss is its mean over the step's forwards
// (grad_accum on each of the DP replicas: SP=2 × DP=2 and SP=1 × grad_accum 2 run the same forwards), and where the
// config trains it the gradient is that of loss + coef · aux_loss. Each rank back-propagates its share of each
// forward's value, scaled so that the division by the global label count leaves coef / forwards: that count is taken
// before the first backward (the step's micro-batches are read first).
#pragma once

#include <optional>
#include <stdexcept>
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
  double aux_sum = 0;           // MoE: Σ of the step's forwards' load-balancing losses (each counted once)
  double forwards = 0;          // the forwards of the step over every replica (MoE only)
  double mean() const { return count > 0 ? sum / count : 0.0; }
  double aux_loss() const { return forwards > 0 ? aux_sum / forwards : 0.0; }
};

// One micro-batch through the model on `device` (document ids stay on the host, where the attention plan is made).
model::CausalLmOutput forward_micro_batch(model::CausalLm& model, const data::MicroBatch& mb, const c10::Device& device);

// Where the ranks agree on each micro-batch's data before they run it: the run's world (MPI, CPU tensors) and this
// rank. A micro-batch that any rank's loader refuses (a shard truncated since it was opened, an id past the
// vocabulary: data/loader.hpp) is said by the lowest such rank (all_ranks.hpp), and every rank throws DataRefused
// before a collective of its forward could leave the others waiting.
struct DataAgreement {
  comm::Communicator& world;
  int rank;
};

class DataRefused : public std::runtime_error {
 public:
  DataRefused() : std::runtime_error("a micro-batch's data was refused (its line is above)") {}
};

// The model and its states live on `device`; the inputs are moved there. The model runs in its own precision
// (ModelOptions). Without `agree` (one process' tests) a loader's refusal is this rank's BadInput.
LossTotals compute_gradients(model::CausalLm& model, data::DataLoader& loader, std::int64_t grad_accum,
                             ModelStates& states, const c10::Device& device,
                             std::optional<DataAgreement> agree = std::nullopt);

// Evaluation: Σ token losses and the label count over the first `sequences` sequences of `loader`'s split (all of
// them when 0), without gradients, summed over `group` (SP × DP) — the same contract as training's loss, so the
// result is the same at any layout. `loader` has micro-batch 1 and no accumulation; every rank runs the same
// number of forwards (the sharded units' all-gathers are collective) and a rank past the end adds nothing.
LossTotals evaluate(model::CausalLm& model, data::DataLoader& loader, std::int64_t sequences, std::int64_t dp,
                    std::int64_t dp_rank, comm::Communicator& group, const c10::Device& device,
                    std::optional<DataAgreement> agree = std::nullopt);

}  // namespace ulysses::train
