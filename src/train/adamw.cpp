#include "train/adamw.hpp"

#include <cmath>

#include <torch/csrc/autograd/generated/variable_factories.h>
#include <torch/csrc/autograd/grad_mode.h>
#include <ATen/ops/_foreach_add.h>
#include <ATen/ops/_foreach_addcdiv.h>
#include <ATen/ops/_foreach_addcmul.h>
#include <ATen/ops/_foreach_div.h>
#include <ATen/ops/_foreach_lerp.h>
#include <ATen/ops/_foreach_mul.h>
#include <ATen/ops/_foreach_sqrt.h>

#include "core/error.hpp"

namespace ulysses::train {

namespace {

std::vector<bool> matrices_decay(const NamedTensors& params) {
  std::vector<bool> out;
  for (const auto& [name, p] : params) out.push_back(p.dim() >= 2);
  return out;
}

}  // namespace

AdamW::AdamW(const NamedTensors& params, AdamWOptions options) : AdamW(params, options, matrices_decay(params)) {}

AdamW::AdamW(const NamedTensors& params, AdamWOptions options, const std::vector<bool>& decay) : o_(options) {
  ULY_CHECK(decay.size() == params.size(), "AdamW: {} decay flags for {} tensors", decay.size(), params.size());
  for (std::size_t i = 0; i < params.size(); ++i) {
    const auto& [name, p] = params[i];
    slots_.push_back({name, p, torch::zeros_like(p, torch::kFloat32), torch::zeros_like(p, torch::kFloat32), decay[i]});
  }
}

void AdamW::step(double lr) {
  ++steps_;
  std::vector<const Slot*> batch;   // tensors of at most kStepBatchElements together (one alone may exceed it)
  std::int64_t elements = 0;
  for (const auto& s : slots_) {
    if (!s.param.grad().defined()) continue;
    if (!batch.empty() && elements + s.param.numel() > kStepBatchElements) {
      update(batch, lr);
      batch.clear();
      elements = 0;
    }
    batch.push_back(&s);
    elements += s.param.numel();
  }
  if (!batch.empty()) update(batch, lr);
}

void AdamW::update(const std::vector<const Slot*>& slots, double lr) const {
  torch::NoGradGuard no_grad;
  const double bc1 = 1 - std::pow(o_.beta1, static_cast<double>(steps_));
  const double bc2_sqrt = std::sqrt(1 - std::pow(o_.beta2, static_cast<double>(steps_)));
  // The multi-tensor ("foreach") form of torch.optim.AdamW: one kernel per operation over the batch.
  std::vector<torch::Tensor> params, grads, exp_avgs, exp_avg_sqs, decayed;
  for (const Slot* s : slots) {
    params.push_back(s->param);
    grads.push_back(s->param.grad());
    exp_avgs.push_back(s->exp_avg);
    exp_avg_sqs.push_back(s->exp_avg_sq);
    if (s->decay) decayed.push_back(s->param);
  }
  if (o_.weight_decay != 0 && !decayed.empty()) at::_foreach_mul_(decayed, 1 - lr * o_.weight_decay);
  at::_foreach_lerp_(exp_avgs, grads, 1 - o_.beta1);
  at::_foreach_mul_(exp_avg_sqs, o_.beta2);
  at::_foreach_addcmul_(exp_avg_sqs, grads, grads, 1 - o_.beta2);
  std::vector<torch::Tensor> denom = at::_foreach_sqrt(exp_avg_sqs);   // the batch's one temporary
  at::_foreach_div_(denom, bc2_sqrt);
  at::_foreach_add_(denom, o_.eps);
  at::_foreach_addcdiv_(params, exp_avgs, denom, -lr / bc1);
}

NamedTensors AdamW::state() const {
  NamedTensors out;
  for (const auto& s : slots_) out.emplace_back("exp_avg." + s.name, s.exp_avg);
  for (const auto& s : slots_) out.emplace_back("exp_avg_sq." + s.name, s.exp_avg_sq);
  return out;
}

std::pair<torch::Tensor, torch::Tensor> AdamW::moments(const std::string& name) const {
  for (const auto& s : slots_)
    if (s.name == name) return {s.exp_avg, s.exp_avg_sq};
  ULY_CHECK(false, "AdamW has no tensor named {}", name);
  return {};
}

}  // namespace ulysses::train
