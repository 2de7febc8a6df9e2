#include "train/grad_sync.hpp"

#include <cmath>

#include <torch/csrc/autograd/generated/variable_factories.h>
#include <torch/csrc/autograd/grad_mode.h>

namespace ulysses::train {

void reduce_gradients(const std::vector<torch::Tensor>& params, comm::Communicator& grad_group, double global_count) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> flat;
  for (const auto& p : params) {
    if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
    flat.push_back(p.grad().reshape(-1));
  }
  torch::Tensor buffer = torch::cat(flat);   // [total params]
  if (grad_group.size() > 1) grad_group.all_reduce_sum(buffer);
  buffer.div_(global_count);
  std::int64_t offset = 0;
  for (const auto& p : params) {
    const std::int64_t n = p.numel();
    p.grad().copy_(buffer.narrow(0, offset, n).view_as(p));
    offset += n;
  }
}

double clip_grad_norm(const std::vector<torch::Tensor>& params, double max_norm) {
  torch::NoGradGuard no_grad;
  double sq = 0;
  for (const auto& p : params)
    if (p.grad().defined()) sq += p.grad().to(torch::kFloat64).pow(2).sum().item<double>();
  const double norm = std::sqrt(sq);
  if (max_norm > 0) {
    const double coef = max_norm / (norm + 1e-6);
    if (coef < 1)
      for (const auto& p : params)
        if (p.grad().defined()) p.grad().mul_(coef);
  }
  return norm;
}

}  // namespace ulysses::train
