// The routed-expert MLP (arch::MlpKind::kRoutedExperts) exactly as transformers 4.57 computes it
// (MixtralSparseMoeBlock, Qwen2MoeSparseMoeBlock, Qwen3MoeSparseMoeBlock), and the statistics of its routing that
// the load-balancing loss is formed from (train/router_loss.hpp):
//   logits = x·routerᵀ [N, E] (x's dtype); p = softmax(logits) in fp32; (w, e) = top-k of p [N, k];
//   w /= Σ w (normalize_top_k); w in x's dtype;
//   y = Σ over the experts hit, in ascending order: index_add of expert_e(x[tokens of e]) · w[those picks]
//       [+ sigmoid(x·shared_gateᵀ) · shared_expert(x)]
// Each expert runs on the tokens routed to it only (a gather, its dense gated MLP, a scatter-add): no dense
// all-experts product. Like mlp(), a function of its input and a struct of weights, so that gathered shards and
// TiledMLP's tiles (tiled_mlp.hpp) call it with their views.
//
// Shape letters: N tokens, E experts, k picks per token, I an expert's intermediate size.
#pragma once

#include <cstdint>
#include <vector>

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include "arch/layer_spec.hpp"
#include "model/mlp.hpp"

namespace ulysses::model {

struct MoeWeights {
  torch::Tensor router;              // [E, hidden]
  std::vector<MlpWeights> experts;   // E, each [I, hidden] (gate, up) and [hidden, I] (down)
  MlpWeights shared;                 // the shared expert's; undefined tensors when there is none
  torch::Tensor shared_gate;         // [1, hidden]; undefined when there is no shared expert
};

// The tensors of MoeWeights in one fixed order (router, each expert's slots, the shared expert's, its gate).
std::vector<torch::Tensor*> tensor_slots(MoeWeights& w);

// A routing's statistics over the real (not padding) tokens, summed over tokens (and, in the model's output, over
// the sparse layers): load_balancing_loss_func's ingredients.
struct RouterStats {
  torch::Tensor probability_sum;   // [E] fp32: Σ softmax(logits) — differentiable in the router's weights
  torch::Tensor selections;        // [E] fp64: how many of the tokens' top-k picks are each expert (no gradient)
  std::int64_t tokens = 0;         // the tokens (× layers) these sums are over
};

// transformers' load_balancing_loss_func over one forward's tokens, from the statistics of this rank (`local`, with
// its graph) and of its whole SP group (`group`: the same sums over every rank's tokens, detached):
//   value = E · Σ_e (selections_e / N) · (probability_sum_e / N),  N = the group's tokens × sparse layers
// (the top-k picks of every sparse layer and token pooled, as the function concatenates the layers' logits; padding
// excluded, as its attention mask does). The selections carry no gradient, so the value is linear in the
// probabilities: term = E · Σ_e (group selections_e / N²) · local probability_sum_e is this rank's share, and the
// shares of the group's ranks add up to the value — each rank back-propagates its own (train/step.cpp).
struct RouterLoss {
  double value = 0;     // the function's value, before the coefficient
  torch::Tensor term;   // [] fp32: this rank's share, differentiable in its routers
};
RouterLoss router_loss(const RouterStats& local, const RouterStats& group);

struct MoeOutput {
  torch::Tensor y;     // [N, hidden] in x's dtype
  RouterStats stats;   // tokens: real's count
};

// x [N, hidden], m the layer's MLP spec, real [N] bool (undefined: every token real) -> the routed MLP's output and
// its routing statistics. router_gradient false: the statistics are computed without a graph.
MoeOutput moe_mlp(const torch::Tensor& x, const MoeWeights& w, const arch::MlpSpec& m, const torch::Tensor& real,
                  bool router_gradient);

// The sparse block as transformers registers it: gate (the router), experts.0 …, [shared_expert, shared_expert_gate].
// The experts carry no LoRA adapters (their projections are not LoRA targets: arch/layer_spec.cpp).
struct RoutedMlpImpl : torch::nn::Module {
  explicit RoutedMlpImpl(const arch::MlpSpec& m);
  MoeWeights weights() const;   // its own parameters

  torch::nn::Linear gate{nullptr};
  torch::nn::ModuleList experts{nullptr};
  Mlp shared_expert{nullptr};
  torch::nn::Linear shared_expert_gate{nullptr};
};
TORCH_MODULE(RoutedMlp);

}  // namespace ulysses::model
