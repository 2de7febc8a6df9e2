#include "train/model_states.hpp"

#include <torch/csrc/autograd/grad_mode.h>

#include "core/error.hpp"
#include "train/grad_sync.hpp"

namespace ulysses::train {
namespace {

constexpr const char* kMoments[] = {"exp_avg.", "exp_avg_sq."};

std::vector<torch::Tensor> tensors_of(const NamedTensors& named) {
  std::vector<torch::Tensor> out;
  for (const auto& [name, t] : named) out.push_back(t);
  return out;
}

}  // namespace

void ModelStates::hold_frozen_in_compute_dtype(model::CausalLm& model) {
  if (model->sharded_states() || model->options().precision() != model::Precision::kBf16) return;
  torch::NoGradGuard no_grad;
  for (auto& p : model->parameters())
    if (!p.requires_grad() && p.scalar_type() != torch::kBFloat16) p.set_data(p.detach().to(torch::kBFloat16));
}

ModelStates::ModelStates(model::CausalLm model, comm::Communicator& grad_group, AdamWOptions adamw)
    : model_(std::move(model)), grad_group_(grad_group) {
  if (const auto& states = model_->sharded_states()) {
    std::vector<bool> decay;
    for (const auto& g : states->groups()) {
      if (!g.trained) continue;   // LoRA's frozen base
      trained_.emplace_back(g.name, g.master);
      decay.push_back(g.decay);
    }
    optimizer_ = std::make_unique<AdamW>(trained_, adamw, decay);
    return;
  }
  const bool copies = model_->options().precision() == model::Precision::kBf16;
  hold_frozen_in_compute_dtype(model_);
  for (const auto& item : model_->named_parameters()) {
    torch::Tensor p = item.value();
    if (!p.requires_grad()) continue;   // LoRA's frozen base: not trained
    if (!copies) {
      trained_.emplace_back(item.key(), p);
      continue;
    }
    torch::NoGradGuard no_grad;
    torch::Tensor master = p.detach().requires_grad_(true);   // keeps the fp32 values; p becomes their bf16 copy
    p.set_data(master.detach().to(torch::kBFloat16));
    trained_.emplace_back(item.key(), master);
    copies_.push_back(p);
  }
  optimizer_ = std::make_unique<AdamW>(trained_, adamw);
}

void ModelStates::take_gradients() {
  torch::NoGradGuard no_grad;
  for (std::size_t i = 0; i < copies_.size(); ++i) {
    torch::Tensor& copy = copies_[i];
    if (!copy.grad().defined()) continue;
    torch::Tensor& master = trained_[i].second;
    if (master.grad().defined()) master.mutable_grad().add_(copy.grad());
    else master.mutable_grad() = copy.grad().to(torch::kFloat);
    copy.mutable_grad() = torch::Tensor();
  }
}

void ModelStates::finish_gradients(double global_count) {
  if (sharded()) {
    model_->sharded_states()->finish_gradients(global_count);
    return;
  }
  take_gradients();
  reduce_gradients(tensors_of(trained_), grad_group_, global_count, model_->options().reduce_dtype());
}

void ModelStates::refresh_copy(std::size_t i) {
  torch::NoGradGuard no_grad;
  if (i < copies_.size()) copies_[i].detach().copy_(trained_[i].second.detach());
}

double ModelStates::clip(double max_norm) {
  return sharded() ? model_->sharded_states()->grad_norm(max_norm) : clip_grad_norm(tensors_of(trained_), max_norm);
}

void ModelStates::step(double lr) {
  optimizer_->step(lr);
  drop_gradients();
  for (std::size_t i = 0; i < copies_.size(); ++i) refresh_copy(i);
  if (sharded()) model_->sharded_states()->refresh();
}

void ModelStates::drop_gradients() {
  for (auto& [name, t] : trained_) t.mutable_grad() = torch::Tensor();
}

std::vector<std::pair<std::string, torch::Tensor>> ModelStates::whole_gradients() {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  if (!sharded()) {
    for (const auto& [name, t] : trained_) out.emplace_back(name, t.grad().clone());
    return out;
  }
  model_->sharded_states()->for_each_whole([](const model::ShardedStates::Group& g) { return g.master.grad(); },
                                           [&](const std::string& name, const torch::Tensor& whole) {
                                             out.emplace_back(name, whole.clone());
                                           });
  return out;
}

std::vector<ModelStates::Whole> ModelStates::whole_list(Part part) const {
  std::vector<Whole> weights;
  if (sharded()) {
    for (const auto& p : model_->sharded_states()->whole_order()) weights.push_back({p.name, p.shape});
  } else {
    for (const auto& [name, t] : trained_) weights.push_back({name, t.sizes().vec()});
  }
  if (part == Part::kWeights) return weights;
  std::vector<Whole> out;
  for (const char* prefix : kMoments)
    for (const auto& w : weights) out.push_back({prefix + w.name, w.shape});
  return out;
}

void ModelStates::for_each_whole(Part part, const std::function<void(const std::string&, const torch::Tensor&)>& fn) {
  using Group = model::ShardedStates::Group;
  if (!sharded()) {
    for (const auto& [name, t] : part == Part::kWeights ? trained_ : optimizer_->state()) fn(name, t);
    return;
  }
  const auto& states = *model_->sharded_states();
  if (part == Part::kWeights) {
    states.for_each_whole([](const Group& g) { return g.master; }, fn);
    return;
  }
  for (int m = 0; m < 2; ++m)
    states.for_each_whole(
        [&](const Group& g) { auto [avg, sq] = optimizer_->moments(g.name); return m == 0 ? avg : sq; },
        [&](const std::string& name, const torch::Tensor& whole) { fn(kMoments[m] + name, whole); });
}

std::pair<std::string, bool> ModelStates::split_moment(const std::string& name) const {
  for (int m = 0; m < 2; ++m)
    if (name.starts_with(kMoments[m])) return {name.substr(std::string(kMoments[m]).size()), m == 1};
  ULY_CHECK(false, "{} is not an optimizer state name", name);
  return {};
}

std::pair<std::int64_t, std::int64_t> ModelStates::held(Part part, const std::string& name) const {
  const std::string param = part == Part::kWeights ? name : split_moment(name).first;
  if (sharded()) return model_->sharded_states()->held(param);
  for (const auto& [n, t] : trained_)
    if (n == param) return {0, t.numel()};
  ULY_CHECK(false, "no parameter named {}", param);
  return {};
}

void ModelStates::load_held(Part part, const std::string& name, const torch::Tensor& values) {
  torch::NoGradGuard no_grad;
  using Group = model::ShardedStates::Group;
  const auto [first, count] = held(part, name);
  ULY_CHECK(values.numel() == count, "{}: {} values for the {} elements this rank holds", name, values.numel(), count);
  const bool squared = part == Part::kOptimizer && split_moment(name).second;
  const std::string param = part == Part::kWeights ? name : split_moment(name).first;
  if (sharded()) {
    model_->sharded_states()->load(param, first, values, [&](const Group& g) {
      if (part == Part::kWeights) return g.master;
      auto [avg, sq] = optimizer_->moments(g.name);
      return squared ? sq : avg;
    });
    return;
  }
  if (part == Part::kOptimizer) {
    auto [avg, sq] = optimizer_->moments(param);
    (squared ? sq : avg).copy_(values.view_as(avg));
    return;
  }
  for (std::size_t i = 0; i < trained_.size(); ++i)
    if (trained_[i].first == param) {
      trained_[i].second.copy_(values.view_as(trained_[i].second));
      refresh_copy(i);
    }
}

}  // namespace ulysses::train
