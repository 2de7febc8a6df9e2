#include "model/moe.hpp"

#include <torch/nn/functional/activation.h>

#include "core/error.hpp"

namespace ulysses::model {
namespace {

torch::nn::LinearOptions linear(std::int64_t in, std::int64_t out) {
  return torch::nn::LinearOptions(in, out).bias(false);
}

// Each expert's spec: a dense gated MLP of the expert's size, under the routed spec's names.
arch::MlpSpec expert_spec(const arch::MlpSpec& m, std::int64_t intermediate, arch::GatedMlpNames names) {
  arch::MlpSpec e;
  e.hidden = m.hidden;
  e.intermediate = intermediate;
  e.names = std::move(names);
  return e;
}

// The routed experts' sum over x [N, hidden]: picks [N, k] (expert ids) with their weights [N, k] in x's dtype.
torch::Tensor routed_sum(const torch::Tensor& x, const std::vector<MlpWeights>& experts, const torch::Tensor& picks,
                         const torch::Tensor& weights) {
  const std::int64_t k = picks.size(1), E = static_cast<std::int64_t>(experts.size());
  const torch::Tensor flat = picks.reshape({-1});                                     // [N*k]: token t's at t*k …
  const torch::Tensor order = flat.argsort(/*stable=*/true);                          // [N*k]: by expert, then token
  const torch::Tensor token = order.div(k, "floor");                                  // [N*k]
  const torch::Tensor weight = weights.reshape({-1}).index_select(0, order);          // [N*k]
  const torch::Tensor counts = flat.bincount({}, E).cpu();                            // [E] picks per expert
  torch::Tensor y = torch::zeros_like(x);                                             // [N, hidden]
  std::int64_t first = 0;
  for (std::int64_t e = 0; e < E; ++e) {
    const std::int64_t n = counts[e].item<std::int64_t>();
    if (n == 0) continue;
    const torch::Tensor tokens = token.narrow(0, first, n);                           // [n], ascending
    const torch::Tensor out = mlp(x.index_select(0, tokens), experts[static_cast<std::size_t>(e)]) *
                              weight.narrow(0, first, n).unsqueeze(1);                 // [n, hidden]
    y.index_add_(0, tokens, out.to(x.scalar_type()));
    first += n;
  }
  return y;
}

RouterStats stats_of(const torch::Tensor& probabilities, const torch::Tensor& picks, const torch::Tensor& real,
                     std::int64_t experts) {
  RouterStats s;
  const torch::Tensor p = real.defined() ? probabilities.index({real}) : probabilities;   // [n, E] fp32
  const torch::Tensor e = real.defined() ? picks.index({real}) : picks;                   // [n, k]
  s.probability_sum = p.sum(0);                                                           // [E]
  s.selections = e.reshape({-1}).bincount({}, experts).to(torch::kFloat64);               // [E]
  s.tokens = p.size(0);
  return s;
}

}  // namespace

std::vector<torch::Tensor*> tensor_slots(MoeWeights& w) {
  std::vector<torch::Tensor*> out{&w.router};
  for (MlpWeights& e : w.experts)
    for (torch::Tensor* t : tensor_slots(e)) out.push_back(t);
  for (torch::Tensor* t : tensor_slots(w.shared)) out.push_back(t);
  out.push_back(&w.shared_gate);
  return out;
}

MoeOutput moe_mlp(const torch::Tensor& x, const MoeWeights& w, const arch::MlpSpec& m, const torch::Tensor& real,
                  bool router_gradient) {
  ULY_CHECK(x.dim() == 2 && static_cast<std::int64_t>(w.experts.size()) == m.experts,
            "routed MLP: x [N, hidden] and {} experts (got {} dims, {} experts)", m.experts, x.dim(), w.experts.size());
  const torch::Tensor logits = project(x, w.router, {}, {}, 0);                       // [N, E], x's dtype
  const torch::Tensor probabilities = at::softmax(logits, 1, torch::kFloat);          // [N, E] fp32
  auto [top, picks] = probabilities.topk(m.top_k, -1);                                // [N, k] each
  if (m.normalize_top_k) top = top / top.sum(-1, /*keepdim=*/true);
  MoeOutput out;
  out.y = routed_sum(x, w.experts, picks, top.to(x.scalar_type()));                   // [N, hidden]
  if (w.shared_gate.defined())
    out.y = out.y + at::sigmoid(project(x, w.shared_gate, {}, {}, 0)) * mlp(x, w.shared);   // [N, 1] · [N, hidden]
  out.stats = stats_of(router_gradient ? probabilities : probabilities.detach(), picks, real, m.experts);
  return out;
}

RouterLoss router_loss(const RouterStats& local, const RouterStats& group) {
  ULY_CHECK(group.tokens > 0 && local.probability_sum.defined(), "router loss: no routed tokens ({})", group.tokens);
  const double n = static_cast<double>(group.tokens), experts = static_cast<double>(local.probability_sum.size(0));
  const torch::Tensor fraction = group.selections.to(torch::kFloat64) / n;                              // [E]
  RouterLoss out;
  out.value = experts * (fraction * group.probability_sum.to(torch::kFloat64) / n).sum().item<double>();
  out.term = (experts / n) * (fraction.to(local.probability_sum.scalar_type()) * local.probability_sum).sum();
  return out;
}

RoutedMlpImpl::RoutedMlpImpl(const arch::MlpSpec& m) {
  ULY_CHECK(m.routed(), "a routed MLP module for a dense MLP spec");
  gate = register_module("gate", torch::nn::Linear(linear(m.hidden, m.experts)));
  experts = register_module("experts", torch::nn::ModuleList());
  for (std::int64_t e = 0; e < m.experts; ++e) experts->push_back(Mlp(expert_spec(m, m.intermediate, m.names)));
  if (m.shared_intermediate == 0) return;
  shared_expert = register_module("shared_expert", Mlp(expert_spec(m, m.shared_intermediate, {})));
  shared_expert_gate = register_module("shared_expert_gate", torch::nn::Linear(linear(m.hidden, 1)));
}

MoeWeights RoutedMlpImpl::weights() const {
  MoeWeights w;
  w.router = gate->weight;
  for (std::size_t e = 0; e < experts->size(); ++e) w.experts.push_back(experts->ptr<MlpImpl>(e)->weights());
  if (shared_expert) {
    w.shared = shared_expert->weights();
    w.shared_gate = shared_expert_gate->weight;
  }
  return w;
}

}  // namespace ulysses::model
