#include "model/lora.hpp"

#include <algorithm>
#include <cmath>

#include <torch/torch.h>

#include "core/error.hpp"

namespace ulysses::model {

double LoraOptions::scale() const {
  ULY_CHECK(rank > 0, "LoRA scale without a rank");
  return rslora ? alpha / std::sqrt(static_cast<double>(rank)) : alpha / static_cast<double>(rank);
}

bool LoraOptions::targets_module(const std::string& projection) const {
  return enabled() && std::find(targets.begin(), targets.end(), projection) != targets.end();
}

torch::Tensor project(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& bias, const Lora& lora,
                      double scale) {
  return with_adapter(at::linear(x, w, bias), x, lora, scale);   // [..., out]
}

torch::Tensor with_adapter(const torch::Tensor& y, const torch::Tensor& x, const Lora& lora, double scale) {
  if (!lora.a.defined()) return y;
  // PEFT: result + lora_B(lora_A(x)) * scaling, x cast to the adapter's dtype (bf16 copies under --precision bf16)
  return y + at::linear(at::linear(x.to(lora.a.scalar_type()), lora.a), lora.b) * scale;   // [..., r] -> [..., out]
}

LoraFactorImpl::LoraFactorImpl(std::int64_t rows, std::int64_t columns) {
  weight = register_parameter("weight", torch::zeros({rows, columns}));
}

void add_adapter(torch::nn::Linear& projection, const std::string& name, const LoraOptions& options) {
  if (!options.targets_module(name)) return;
  const std::int64_t out = projection->weight.size(0), in = projection->weight.size(1);
  projection->register_module("lora_A", LoraFactor(options.rank, in));
  projection->register_module("lora_B", LoraFactor(out, options.rank));
}

Lora adapter_of(const torch::nn::Linear& projection) {
  const auto children = projection->named_children();
  if (!children.contains("lora_A")) return {};
  return {children["lora_A"]->as<LoraFactorImpl>()->weight, children["lora_B"]->as<LoraFactorImpl>()->weight};
}

bool is_adapter_parameter(const std::string& name) {
  return name.ends_with(".lora_A.weight") || name.ends_with(".lora_B.weight");
}

void freeze_base(torch::nn::Module& model) {
  for (auto& item : model.named_parameters())
    if (!is_adapter_parameter(item.key())) item.value().requires_grad_(false);
}

}  // namespace ulysses::model
