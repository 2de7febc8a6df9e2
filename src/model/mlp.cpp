#include "model/mlp.hpp"

namespace ulysses::model {

MlpImpl::MlpImpl(const arch::MlpSpec& m, const LoraOptions& lora) : lora_scale_(lora.enabled() ? lora.scale() : 0) {
  auto linear = [](std::int64_t in, std::int64_t out) { return torch::nn::LinearOptions(in, out).bias(false); };
  const arch::GatedMlpNames& n = m.names;   // registered in transformers' order: gate, up, down (Mixtral's w1, w2, w3)
  gate_proj = register_module(n.gate, torch::nn::Linear(linear(m.hidden, m.intermediate)));
  if (n.down_before_up) down_proj = register_module(n.down, torch::nn::Linear(linear(m.intermediate, m.hidden)));
  up_proj = register_module(n.up, torch::nn::Linear(linear(m.hidden, m.intermediate)));
  if (!n.down_before_up) down_proj = register_module(n.down, torch::nn::Linear(linear(m.intermediate, m.hidden)));
  add_adapter(gate_proj, n.gate, lora);
  add_adapter(up_proj, n.up, lora);
  add_adapter(down_proj, n.down, lora);
}

MlpWeights MlpImpl::weights() const {
  return {gate_proj->weight,    up_proj->weight,    down_proj->weight,
          adapter_of(gate_proj), adapter_of(up_proj), adapter_of(down_proj), lora_scale_};
}

std::vector<torch::Tensor*> tensor_slots(MlpWeights& w) {
  return {&w.gate, &w.up, &w.down, &w.gate_lora.a, &w.gate_lora.b, &w.up_lora.a, &w.up_lora.b, &w.down_lora.a,
          &w.down_lora.b};
}

torch::Tensor mlp(const torch::Tensor& x, const MlpWeights& w) {
  const torch::Tensor none;
  auto gated = at::silu(project(x, w.gate, none, w.gate_lora, w.lora_scale)) *
               project(x, w.up, none, w.up_lora, w.lora_scale);              // [B, S/P, I]
  return project(gated, w.down, none, w.down_lora, w.lora_scale);           // [B, S/P, hidden]
}

}  // namespace ulysses::model
