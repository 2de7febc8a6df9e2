#include "train/evaluator.hpp"

#include <chrono>
#include <cmath>

#include "core/log.hpp"
#include "train/step.hpp"

namespace ulysses::train {

Evaluator::Evaluator(const TrainOptions& o, data::DataLoader* valid, const RankLayout& layout, int rank,
                     comm::Communicator& group, comm::Communicator& world, const c10::Device& device)
    : o_(o), valid_(valid), layout_(layout), rank_(rank), group_(group), world_(world), device_(device) {}

void Evaluator::run(model::CausalLm& model, std::int64_t step, Metrics* metrics) {
  const auto t0 = std::chrono::steady_clock::now();
  const LossTotals eval =
      evaluate(model, *valid_, o_.eval_sequences, layout_.dp(), layout_.dp_rank(rank_), group_, device_,
               DataAgreement{world_, rank_});
  if (rank_ == 0) {
    log_info("eval at step {}: loss {:.4f}, perplexity {:.3f} ({} target tokens)", step, eval.mean(),
             std::exp(eval.mean()), static_cast<std::int64_t>(eval.count));
    metrics->write_eval(step, eval.mean(), eval.count);
  }
  seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace ulysses::train
