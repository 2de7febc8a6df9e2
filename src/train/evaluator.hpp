// Evaluator: --eval-every's validation loss — when it is due (every N steps and at the last one), the evaluation
// itself (train/step.hpp's evaluate: every rank, the run's SP × DP layout, no gradients), rank 0's log line and
// metrics line, and how long it took (the deadline counts the next step's evaluation).
#pragma once

#include <cstdint>
#include <optional>

#include "comm/communicator.hpp"
#include "core/rank_layout.hpp"
#include "data/loader.hpp"
#include "model/causal_lm.hpp"
#include "train/options.hpp"
#include "train/report.hpp"

namespace ulysses::train {

class Evaluator {
 public:
  // valid: the validation split (null when --eval-every is 0); group: where the loss is summed (SP × DP); world:
  // where the ranks agree on each micro-batch's data (train/step.hpp: DataRefused).
  Evaluator(const TrainOptions& o, data::DataLoader* valid, const RankLayout& layout, int rank,
            comm::Communicator& group, comm::Communicator& world, const c10::Device& device);

  bool due(std::int64_t step) const {
    return valid_ && o_.eval_every > 0 && (step % o_.eval_every == 0 || step == o_.steps);
  }
  // Collective: evaluates `model` after `step`; rank 0 logs it and writes it to metrics.
  void run(model::CausalLm& model, std::int64_t step, Metrics* metrics);
  double seconds() const { return seconds_; }   // the last evaluation's

 private:
  const TrainOptions& o_;
  data::DataLoader* valid_;
  const RankLayout& layout_;
  int rank_;
  comm::Communicator& group_;
  comm::Communicator& world_;
  c10::Device device_;
  double seconds_ = 0;
};

}  // namespace ulysses::train
