#include "train/grad_sync.hpp"

#include <cmath>

#include <torch/csrc/autograd/generated/variable_factories.h>
#include <torch/csrc/autograd/grad_mode.h>
#include <ATen/ops/_foreach_div.h>
#include <ATen/ops/_foreach_mul.h>
#include <ATen/ops/_foreach_norm.h>
#include <ATen/ops/stack.h>

namespace ulysses::train {

namespace {

// One all-reduce over the concatenation of `grads`, then each gradient = its part of the sum / count.
void reduce_bucket(const std::vector<torch::Tensor>& grads, comm::Communicator& grad_group, double global_count,
                   c10::ScalarType dtype) {
  std::vector<torch::Tensor> flat;
  for (const auto& g : grads) flat.push_back(g.reshape(-1));
  torch::Tensor buffer = torch::cat(flat).to(dtype);   // [Σ numel]
  grad_group.all_reduce_sum(buffer);
  buffer.div_(global_count);
  std::int64_t offset = 0;
  for (const auto& g : grads) {
    const std::int64_t n = g.numel();
    g.copy_(buffer.narrow(0, offset, n).view_as(g));
    offset += n;
  }
}

}  // namespace

void reduce_gradients(const std::vector<torch::Tensor>& params, comm::Communicator& grad_group, double global_count,
                      c10::ScalarType reduce_dtype, std::int64_t bucket_elements) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> grads;
  for (const auto& p : params) {
    if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
    grads.push_back(p.grad());
  }
  if (grad_group.size() == 1) {   // nothing to exchange: scale in place
    at::_foreach_div_(grads, global_count);
    return;
  }
  std::vector<torch::Tensor> bucket;
  std::int64_t elements = 0;
  for (const auto& g : grads) {
    if (!bucket.empty() && elements + g.numel() > bucket_elements) {
      reduce_bucket(bucket, grad_group, global_count, reduce_dtype);
      bucket.clear();
      elements = 0;
    }
    bucket.push_back(g);
    elements += g.numel();
  }
  if (!bucket.empty()) reduce_bucket(bucket, grad_group, global_count, reduce_dtype);
}

double clip_grad_norm(const std::vector<torch::Tensor>& params, double max_norm) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> grads;
  for (const auto& p : params)
    if (p.grad().defined()) grads.push_back(p.grad());
  if (grads.empty()) return 0;
  const std::vector<torch::Tensor> norms = at::_foreach_norm(grads, 2);   // one [] per parameter
  const double norm = torch::stack(norms).to(torch::kFloat64).norm().item<double>();
  if (max_norm > 0) {
    const double coef = max_norm / (norm + 1e-6);
    if (coef < 1) at::_foreach_mul_(grads, coef);
  }
  return norm;
}

}  // namespace ulysses::train
