#include "train/step.hpp"

#include <algorithm>

#include <torch/csrc/autograd/generated/variable_factories.h>


namespace ulysses::train {
namespace {

torch::Tensor as_tensor(const std::vector<std::int64_t>& v, std::int64_t rows, std::int64_t cols) {
  return torch::tensor(v, torch::kInt64).view({rows, cols});
}

}  // namespace

LossTotals compute_gradients(model::CausalLm& model, data::DataLoader& loader, std::int64_t grad_accum,
                             ModelStates& states, const c10::Device& device) {
  double local_sum = 0, local_count = 0;
  for (std::int64_t micro = 0; micro < grad_accum; ++micro) {
    data::MicroBatch mb = loader.micro_batch(micro);
    const std::int64_t B = mb.batch, L = mb.local_len, S = mb.seq_len;
    const model::CausalLmOutput out =
        model->forward(as_tensor(mb.input_ids, B, L).to(device), as_tensor(mb.positions, B, L).to(device),
                       as_tensor(mb.doc_ids, B, S), as_tensor(mb.labels, B, L).to(device));
    out.loss_sum.backward();   // every rank, even with no valid label: the all-to-all backward is collective
    local_sum += out.loss_sum.item<double>();
    local_count += static_cast<double>(out.valid_count.item<std::int64_t>());
  }
  torch::Tensor totals = torch::tensor({local_sum, local_count}, torch::kFloat64).to(device);   // [2]
  comm::Communicator& world = states.grad_group();
  if (world.size() > 1) world.all_reduce_sum(totals);
  totals = totals.cpu();
  LossTotals t{totals[0].item<double>(), totals[1].item<double>()};
  states.finish_gradients(std::max(t.count, 1.0));
  return t;
}

}  // namespace ulysses::train
