#include "train/step.hpp"

#include <algorithm>

#include <torch/csrc/autograd/generated/variable_factories.h>
#include <torch/csrc/autograd/grad_mode.h>

#include "train/all_ranks.hpp"

namespace ulysses::train {
namespace {

torch::Tensor as_tensor(const std::vector<std::int64_t>& v, std::int64_t rows, std::int64_t cols) {
  return torch::tensor(v, torch::kInt64).view({rows, cols});
}

LossTotals sum_over(comm::Communicator& group, const LossTotals& local, const c10::Device& device) {
  torch::Tensor totals = torch::tensor({local.sum, local.count, local.attention_pairs, local.aux_sum, local.forwards},
                                       torch::kFloat64).to(device);   // [5]
  if (group.size() > 1) group.all_reduce_sum(totals);
  totals = totals.cpu();
  return {totals[0].item<double>(), totals[1].item<double>(), totals[2].item<double>(), totals[3].item<double>(),
          totals[4].item<double>()};
}

// Micro-batch `micro` of the loader's step, agreed on by every rank when `agree` is given.
data::MicroBatch read_micro_batch(data::DataLoader& loader, std::int64_t micro,
                                  const std::optional<DataAgreement>& agree) {
  if (!agree) return loader.micro_batch(micro);
  data::MicroBatch mb;
  if (bad_input_on_any_rank(agree->world, agree->rank, [&] { mb = loader.micro_batch(micro); })) throw DataRefused();
  return mb;
}

// The step's label count over the grad group, before any backward (its micro-batches, read here, are returned).
double step_label_count(std::vector<data::MicroBatch>& batches, data::DataLoader& loader, std::int64_t grad_accum,
                        comm::Communicator& group, const c10::Device& device,
                        const std::optional<DataAgreement>& agree) {
  LossTotals local;
  for (std::int64_t micro = 0; micro < grad_accum; ++micro) {
    batches.push_back(read_micro_batch(loader, micro, agree));
    local.count += static_cast<double>(batches.back().valid_labels());
  }
  return sum_over(group, local, device).count;
}

}  // namespace

model::CausalLmOutput forward_micro_batch(model::CausalLm& model, const data::MicroBatch& mb, const c10::Device& device) {
  const std::int64_t B = mb.batch, L = mb.local_len, S = mb.seq_len;
  const torch::Tensor real = mb.real.empty() ? torch::Tensor()   // [B, L] bool
                                             : torch::tensor(mb.real, torch::kUInt8).view({B, L}).to(torch::kBool);
  return model->forward(as_tensor(mb.input_ids, B, L).to(device), as_tensor(mb.positions, B, L).to(device),
                        as_tensor(mb.doc_ids, B, S), as_tensor(mb.labels, B, L).to(device), /*keep_logits=*/false,
                        real.defined() ? real.to(device) : real);
}

LossTotals compute_gradients(model::CausalLm& model, data::DataLoader& loader, std::int64_t grad_accum,
                             ModelStates& states, const c10::Device& device, std::optional<DataAgreement> agree) {
  LossTotals local;
  const arch::MoeConfig& moe = model->config().moe;
  const double sp = loader.sp_degree(), forwards = static_cast<double>(grad_accum * states.grad_group().size()) / sp;
  std::vector<data::MicroBatch> batches;   // the router loss' weight needs the step's label count first
  const double router_weight =
      moe.router_loss ? moe.router_aux_loss_coef *
                            std::max(step_label_count(batches, loader, grad_accum, states.grad_group(), device, agree),
                                     1.0) / forwards
                      : 0.0;
  for (std::int64_t micro = 0; micro < grad_accum; ++micro) {
    const data::MicroBatch mb = batches.empty() ? read_micro_batch(loader, micro, agree)
                                                : std::move(batches[static_cast<std::size_t>(micro)]);
    const model::CausalLmOutput out = forward_micro_batch(model, mb, device);
    torch::Tensor objective = out.loss_sum;
    if (out.router) {   // each SP rank holds the forward's value: each counts its share of it once
      local.aux_sum += out.router->value / sp;
      local.forwards += 1 / sp;
      if (moe.router_loss) objective = objective + router_weight * out.router->term;
    }
    objective.backward();      // every rank, even with no valid label: the all-to-all backward is collective
    states.take_gradients();   // replicated bf16: into the fp32 masters' gradients, each micro-batch's
    local.sum += out.loss_sum.item<double>();
    local.count += static_cast<double>(out.valid_count.item<std::int64_t>());
    local.attention_pairs +=   // the SP group's ranks share the sequence: each counts its share
        mb.attention_pairs(model->config().sliding_window) / loader.sp_degree();
  }
  const LossTotals t = sum_over(states.grad_group(), local, device);
  states.finish_gradients(std::max(t.count, 1.0));
  return t;
}

LossTotals evaluate(model::CausalLm& model, data::DataLoader& loader, std::int64_t sequences, std::int64_t dp,
                    std::int64_t dp_rank, comm::Communicator& group, const c10::Device& device,
                    std::optional<DataAgreement> agree) {
  torch::NoGradGuard no_grad;
  const std::int64_t total = sequences > 0 ? std::min(sequences, loader.num_sequences()) : loader.num_sequences();
  LossTotals local;
  loader.set_cursor(0);
  for (std::int64_t first = 0; first < total; first += dp) {   // DP rank d reads entry first + d
    const model::CausalLmOutput out = forward_micro_batch(model, read_micro_batch(loader, 0, agree), device);
    if (first + dp_rank < total) {
      local.sum += out.loss_sum.item<double>();
      local.count += static_cast<double>(out.valid_count.item<std::int64_t>());
    }
    loader.advance_step();
  }
  return sum_over(group, local, device);
}

}  // namespace ulysses::train
