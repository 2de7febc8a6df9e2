#include "model/recompute.hpp"

#include <ATen/core/ivalue.h>
#include <torch/autograd.h>

#include "core/error.hpp"

namespace ulysses::model {
namespace {

// What the backward needs besides the saved input: the layer and its call's other arguments.
struct LayerCall : torch::CustomClassHolder {
  LayerCall(std::shared_ptr<DecoderLayerImpl> l, std::shared_ptr<const RopeTables> r,
            std::shared_ptr<const AttentionPlan> p, const Recompute& o, c10::Device d)
      : layer(std::move(l)), rope(std::move(r)), plan(std::move(p)), options(o), device(d) {}
  std::shared_ptr<DecoderLayerImpl> layer;     // kept alive by the graph, like the rest
  std::shared_ptr<const RopeTables> rope;      // [B, S/P, 1, D] cos, sin
  std::shared_ptr<const AttentionPlan> plan;   // the whole sequence's documents
  Recompute options;
  c10::Device device;                          // where x lives (and comes back to when offloaded)
};

// The input kept for backward: x itself, or a copy in host memory (pinned for a CUDA x; on CPU a separate
// buffer, so CPU runs exercise the same path). Copied, never converted; synchronous.
torch::Tensor kept_input(const torch::Tensor& x, const Recompute& o) {
  if (!o.offload) return x;
  torch::Tensor host = torch::empty(x.sizes(), x.options().device(torch::kCPU).pinned_memory(x.is_cuda()));
  host.copy_(x);
  if (o.offloaded_bytes) *o.offloaded_bytes += static_cast<std::int64_t>(host.nbytes());
  return host;
}

struct RecomputedLayer : torch::autograd::Function<RecomputedLayer> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const c10::intrusive_ptr<LayerCall>& call) {
    ctx->save_for_backward({kept_input(x, call->options)});
    ctx->saved_data["call"] = c10::IValue::make_capsule(call);
    return call->layer->forward(x, *call->rope, *call->plan);   // no graph: Function::apply runs this without grad
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    const auto call = c10::static_intrusive_pointer_cast<LayerCall>(ctx->saved_data["call"].toCapsule());
    const torch::Tensor x =   // [B, S/P, hidden], back on its device
        ctx->get_saved_variables()[0].to(call->device).detach().requires_grad_(true);
    {
      const torch::AutoGradMode grad_mode(true);
      torch::Tensor y;
      {   // the forward again inside the model's autocast; its backward outside it, as the plain path's
        const AutocastScope autocast(call->options.precision, x.device());
        y = call->layer->forward(x, *call->rope, *call->plan);
      }
      torch::autograd::backward({y}, {grad_out[0]});
    }
    return {x.grad(), torch::Tensor()};   // and none for the call
  }
};

}  // namespace

torch::Tensor recomputed_layer(std::shared_ptr<DecoderLayerImpl> layer, const torch::Tensor& x,
                               std::shared_ptr<const RopeTables> rope, std::shared_ptr<const AttentionPlan> plan,
                               const Recompute& options) {
  ULY_CHECK(!torch::GradMode::is_enabled() || x.requires_grad(),
            "a recomputed layer's input must require grad, or its parameters would get no gradient");
  return RecomputedLayer::apply(
      x, c10::make_intrusive<LayerCall>(std::move(layer), std::move(rope), std::move(plan), options, x.device()));
}

}  // namespace ulysses::model
