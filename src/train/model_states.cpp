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

ModelStates::ModelStates(model::CausalLm model, comm::Communicator& grad_group, AdamWOptions adamw)
    : model_(std::move(model)), grad_group_(grad_group) {
  if (const auto& states = model_->sharded_states()) {
    std::vector<bool> decay;
    for (const auto& g : states->groups()) {
      trained_.emplace_back(g.name, g.master);
      decay.push_back(g.decay);
    }
    optimizer_ = std::make_unique<AdamW>(trained_, adamw, decay);
    return;
  }
  for (const auto& item : model_->named_parameters()) trained_.emplace_back(item.key(), item.value());
  optimizer_ = std::make_unique<AdamW>(trained_, adamw);
}

void ModelStates::finish_gradients(double global_count) {
  if (sharded()) model_->sharded_states()->finish_gradients(global_count);
  else reduce_gradients(tensors_of(trained_), grad_group_, global_count);
}

double ModelStates::clip(double max_norm) {
  return sharded() ? model_->sharded_states()->grad_norm(max_norm) : clip_grad_norm(tensors_of(trained_), max_norm);
}

void ModelStates::step(double lr) {
  optimizer_->step(lr);
  for (auto& [name, t] : trained_) t.mutable_grad() = torch::Tensor();
  if (sharded()) model_->sharded_states()->refresh();
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
  torch::Tensor target;
  if (part == Part::kWeights) {
    for (auto& [n, t] : trained_)
      if (n == param) target = t;
  } else {
    auto [avg, sq] = optimizer_->moments(param);
    target = squared ? sq : avg;
  }
  target.copy_(values.view_as(target));
}

}  // namespace ulysses::train
