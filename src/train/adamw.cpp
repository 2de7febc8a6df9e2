#include "train/adamw.hpp"

#include <cmath>
#include <map>

#include <torch/csrc/autograd/generated/variable_factories.h>
#include <torch/csrc/autograd/grad_mode.h>

#include "core/error.hpp"

namespace ulysses::train {

AdamW::AdamW(const NamedTensors& params, AdamWOptions options) : o_(options) {
  for (const auto& [name, p] : params)
    slots_.push_back({name, p, torch::zeros_like(p, torch::kFloat32), torch::zeros_like(p, torch::kFloat32),
                      p.dim() >= 2});
}

void AdamW::step(double lr) {
  torch::NoGradGuard no_grad;
  ++steps_;
  const double bc1 = 1 - std::pow(o_.beta1, static_cast<double>(steps_));
  const double bc2_sqrt = std::sqrt(1 - std::pow(o_.beta2, static_cast<double>(steps_)));
  for (auto& s : slots_) {
    const torch::Tensor& g = s.param.grad();
    if (!g.defined()) continue;
    if (s.decay && o_.weight_decay != 0) s.param.mul_(1 - lr * o_.weight_decay);
    s.exp_avg.lerp_(g, 1 - o_.beta1);
    s.exp_avg_sq.mul_(o_.beta2).addcmul_(g, g, 1 - o_.beta2);
    torch::Tensor denom = (s.exp_avg_sq.sqrt() / bc2_sqrt).add_(o_.eps);
    s.param.addcdiv_(s.exp_avg, denom, -lr / bc1);
  }
}

NamedTensors AdamW::state() const {
  NamedTensors out;
  for (const auto& s : slots_) out.emplace_back("exp_avg." + s.name, s.exp_avg);
  for (const auto& s : slots_) out.emplace_back("exp_avg_sq." + s.name, s.exp_avg_sq);
  return out;
}

void AdamW::load_state(const NamedTensors& state, std::int64_t steps, const std::string& where) {
  std::map<std::string, torch::Tensor> by_name(state.begin(), state.end());
  torch::NoGradGuard no_grad;
  for (auto& s : slots_) {
    const std::pair<std::string, torch::Tensor*> targets[] = {{"exp_avg." + s.name, &s.exp_avg},
                                                              {"exp_avg_sq." + s.name, &s.exp_avg_sq}};
    for (const auto& [key, dst] : targets) {
      auto it = by_name.find(key);
      if (it == by_name.end()) throw BadInput(fmt::format("{}: optimizer state {} is missing", where, key));
      if (!it->second.sizes().equals(dst->sizes()))
        throw BadInput(fmt::format("{}: optimizer state {} has {} elements, the parameter {}", where, key,
                                   it->second.numel(), dst->numel()));
      dst->copy_(it->second);
    }
  }
  steps_ = steps;
}

}  // namespace ulysses::train
