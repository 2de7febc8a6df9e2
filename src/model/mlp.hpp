// The dense gated MLP (arch::MlpKind::kDenseGated) exactly as transformers 4.57 computes it (LlamaMLP):
// down(silu(gate x) * up x), each projection with its LoRA adapter. Its forward is a function of its input and a
// struct of weight tensors: the module passes its own parameters, and code that holds them elsewhere (gathered shards,
// a tile's recomputation) calls the same function with views.
#pragma once

#include <vector>

#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include "arch/layer_spec.hpp"
#include "model/lora.hpp"

namespace ulysses::model {

struct MlpWeights {
  torch::Tensor gate, up;   // [I, hidden]
  torch::Tensor down;       // [hidden, I]
  Lora gate_lora, up_lora, down_lora;   // LoRA adapters (lora.hpp), undefined where none
  double lora_scale = 0;
};

// down(silu(gate x) * up x), no biases, each projection with its adapter: [B, S/P, hidden] -> [B, S/P, hidden].
torch::Tensor mlp(const torch::Tensor& x, const MlpWeights& w);

// The tensors of MlpWeights in one fixed order (the projections, then the adapters' a and b), for code that hands
// them on as a list and back.
std::vector<torch::Tensor*> tensor_slots(MlpWeights& w);

struct MlpImpl : torch::nn::Module {
  // m: a dense gated MLP (or one expert of a routed one), its projections registered under m.names
  explicit MlpImpl(const arch::MlpSpec& m, const LoraOptions& lora = {});
  MlpWeights weights() const;   // its own parameters
  torch::Tensor forward(const torch::Tensor& x) { return mlp(x, weights()); }

  torch::nn::Linear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};

 private:
  double lora_scale_ = 0;
};
TORCH_MODULE(Mlp);

}  // namespace ulysses::model
