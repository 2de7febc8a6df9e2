#include "model/recompute.hpp"

#include <ATen/core/ivalue.h>
#include <torch/autograd.h>

#include "core/error.hpp"

namespace ulysses::model {
namespace {

// What the backward needs besides the saved input: the unit's forward and where x lives.
struct UnitCall : torch::CustomClassHolder {
  UnitCall(UnitForward f_, const Recompute& o, c10::Device d) : f(std::move(f_)), options(o), device(d) {}
  UnitForward f;        // kept alive by the graph, with what it captured (layer, rope tables, plan, labels)
  Recompute options;
  c10::Device device;   // where x lives (and comes back to when offloaded)
};

// The input kept for backward: x itself, or (offload) nothing here and a copy in host memory, in o.offload —
// page-locked for a CUDA x; on CPU a separate buffer, so CPU runs exercise the same path. Copied, never converted.
torch::Tensor kept_input(const torch::Tensor& x, const Recompute& o) {
  if (!o.offload) return x;
  torch::Tensor host = o.host_memory->take(x.sizes(), x.scalar_type());
  // the copy out runs on the side stream; x's memory is held for it. Nothing on the compute stream reads `host`,
  // and the copy back runs on the same side stream, after it — as every copy into or out of o.host_memory does,
  // which is what lets it hand a buffer out again at once (host_buffers.hpp).
  static_cast<void>(o.copies->launch([&] { return std::vector<torch::Tensor>{host.copy_(x, /*non_blocking=*/true)}; },
                                     {x}));
  if (o.counts) o.counts->bytes += static_cast<std::int64_t>(host.nbytes());
  o.offload->host = host;
  return torch::Tensor();
}

// An offloaded input's copy back to `device`, issued on the side stream into a tensor made on the current one
// (side_stream.hpp: freed and reused in the compute stream's order).
Ahead copy_back(const KeptInput& kept, SideStream& copies, const c10::Device& device) {
  torch::Tensor x = SideStream::unfilled(torch::empty(kept.host.sizes(), kept.host.options().device(device)));
  return copies.launch([&] { return std::vector<torch::Tensor>{x.copy_(kept.host, /*non_blocking=*/true)}; });
}

// The input for the recomputation, on its device: the saved x, or the offloaded copy (fetched ahead, or now).
torch::Tensor restored(const torch::Tensor& saved, const Recompute& o, const c10::Device& device) {
  if (!o.offload) return saved;
  KeptInput& kept = *o.offload;
  ULY_CHECK(kept.host.defined(), "an offloaded layer input was not kept (backward ran twice?)");
  if (!kept.back.pending()) kept.back = copy_back(kept, *o.copies, device);
  torch::Tensor x = kept.back.take()[0];
  kept.host = torch::Tensor();   // a graph is back-propagated once
  return x;
}

// Backward of a layer: the copy back of the layer before it, to overlap this layer's recomputation.
void fetch_ahead(const Recompute& o, const c10::Device& device) {
  if (!o.fetch_ahead || !o.fetch_ahead->host.defined() || o.fetch_ahead->back.pending()) return;
  o.fetch_ahead->back = copy_back(*o.fetch_ahead, *o.copies, device);
  if (o.counts) ++o.counts->fetched_ahead;
}

// The units' parameters, gathered from their shards (or placeholders of their shapes), in order; nothing when
// not sharded.
std::vector<torch::Tensor> gathered(const Recompute& o, bool placeholders = false) {
  std::vector<torch::Tensor> out;
  if (!o.states) return out;
  for (int u : o.units) {
    auto w = placeholders ? o.states->placeholders(u) : o.states->gather(u);
    out.insert(out.end(), w.begin(), w.end());
  }
  return out;
}

// Hands each unit its slice of the gathered weights' gradients (reduce-scattered into its shards).
void scatter_gradients(const Recompute& o, const std::vector<torch::Tensor>& grads) {
  if (!o.states) return;
  std::size_t next = 0;
  for (int u : o.units) {
    const auto first = grads.begin() + static_cast<std::ptrdiff_t>(next);
    next += o.states->gather_count(u);
    o.states->add_gradients(u, std::vector<torch::Tensor>(first, grads.begin() + static_cast<std::ptrdiff_t>(next)));
  }
}

struct RecomputedUnit : torch::autograd::Function<RecomputedUnit> {
  // anchor: a tensor that requires grad, so the outputs do (and backward runs) even when x is token ids
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                                                const torch::Tensor& /*anchor*/,
                                                const c10::intrusive_ptr<UnitCall>& call) {
    ctx->save_for_backward({kept_input(x, call->options)});
    ctx->saved_data["call"] = c10::IValue::make_capsule(call);
    const std::vector<torch::Tensor> weights = gathered(call->options);
    if (call->options.states) call->options.states->prefetch(call->options.prefetch_forward);
    return call->f(x, weights);   // no graph: Function::apply runs this without grad
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    const auto call = c10::static_intrusive_pointer_cast<UnitCall>(ctx->saved_data["call"].toCapsule());
    const Recompute& o = call->options;
    const torch::Tensor input = restored(ctx->get_saved_variables()[0], o, call->device);   // on its device
    fetch_ahead(o, call->device);   // after this layer's own copy back, which the recomputation waits for
    const torch::Tensor x = input.detach().requires_grad_(input.is_floating_point());
    std::vector<torch::Tensor> leaves = gathered(o, !o.weights_in_backward);
    if (o.states) o.states->prefetch(o.prefetch_backward);
    for (auto& w : leaves) w = w.detach().requires_grad_(true);   // their .grad: the unit's whole gradients
    {
      const torch::AutoGradMode grad_mode(true);
      torch::autograd::variable_list outputs;
      {   // the forward again inside the model's autocast; its backward outside it, as the plain path's
        const AutocastScope autocast(o.precision, x.device());
        outputs = call->f(x, leaves);
      }
      torch::autograd::variable_list ys, dys;
      for (std::size_t i = 0; i < outputs.size(); ++i)
        if (grad_out[i].defined() && outputs[i].requires_grad()) {
          ys.push_back(outputs[i]);
          dys.push_back(grad_out[i]);
        }
      torch::autograd::backward(ys, dys);
    }
    for (auto& w : leaves) w = w.grad();   // the gathered weights are freed before the gradients are reduced
    scatter_gradients(o, leaves);
    return {x.is_floating_point() ? x.grad() : torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::autograd::variable_list recomputed(UnitForward f, const torch::Tensor& x, const Recompute& options) {
  ULY_CHECK(!torch::GradMode::is_enabled() || !x.is_floating_point() || x.requires_grad(),
            "a recomputed unit's input must require grad, or its parameters would get no gradient");
  ULY_CHECK(!options.offload || (options.copies && options.host_memory),
            "checkpoint offload needs a side stream for its copies and host memory for them");
  const torch::Tensor anchor = torch::empty({0}).requires_grad_(torch::GradMode::is_enabled());
  Recompute o = options;
  if (!torch::GradMode::is_enabled()) o.offload = nullptr;   // no backward will want x (evaluation): no copy
  return RecomputedUnit::apply(x, anchor, c10::make_intrusive<UnitCall>(std::move(f), o, x.device()));
}

}  // namespace ulysses::model
