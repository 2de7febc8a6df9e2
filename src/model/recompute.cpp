#include "model/recompute.hpp"

#include <algorithm>
#include <map>

#include <ATen/core/ivalue.h>
#include <torch/autograd.h>
#include <torch/csrc/autograd/engine.h>

#include "core/error.hpp"

namespace ulysses::model {
namespace {

// What the backward needs besides the saved tensors: the forward of a chunk and where x lives.
struct Call : torch::CustomClassHolder {
  Call(ChunkForward f_, const Recompute& o, c10::Device d) : f(std::move(f_)), options(o), device(d) {}
  ChunkForward f;       // kept alive by the graph, with what it captured (layer, rope tables, plan, labels)
  Recompute options;
  c10::Device device;   // where x lives (and comes back to when offloaded)
};

// The chunks of x's rows (dim 0), or one chunk of all of x.
std::vector<Chunk> chunks_of(const torch::Tensor& x, const Chunking& c) {
  const std::int64_t n = x.dim() > 0 ? x.size(0) : 0;
  if (c.columns > 0) {
    std::vector<Chunk> out;
    for (std::int64_t i = 0; i < c.columns; ++i) out.push_back({i, 0, n});
    return out;
  }
  if (c.rows <= 0) return {Chunk{0, 0, n}};
  std::vector<Chunk> out;
  for (std::int64_t b = 0; b < n; b += c.rows)
    out.push_back({static_cast<std::int64_t>(out.size()), b, std::min(c.rows, n - b)});
  return out;
}

torch::Tensor rows_of(const torch::Tensor& t, const Chunk& c, const Chunking& how) {
  return how.rows > 0 ? t.narrow(0, c.first, c.rows) : t;
}

// Whether output i of the chunks is added over them (a loss over rows; the first output of chunks of columns) rather
// than concatenated.
bool summed(const Chunking& how, std::size_t i) {
  return how.columns > 0 ? i == 0 : how.sum_outputs || (how.sum_trailing && i > 0);
}

// Chunk c's share of the joined output i, y: all of y (one chunk; a summed output), its rows, or its columns (the last
// dim).
torch::Tensor share_of(const torch::Tensor& y, std::size_t i, const Chunk& c, const Chunking& how) {
  if (summed(how, i)) return y;
  if (how.columns <= 0) return rows_of(y, c, how);
  const std::int64_t width = y.size(-1) / how.columns;
  return y.narrow(-1, c.index * width, width);
}

// f on one chunk, inside the options' autocast.
torch::autograd::variable_list run_chunk(const Call& call, const Chunk& c, const torch::Tensor& x,
                                         const std::vector<torch::Tensor>& weights) {
  const AutocastScope autocast(call.options.precision, x.device());
  return call.f(c, x, weights);
}

// Chunk c's first stage (Recompute::ahead) issued on its side stream, inside the options' autocast; nothing pending
// without one. xc: the chunk's input (in backward its leaf, which f shares).
Ahead first_stage(const Call& call, const Chunk& c, const torch::Tensor& xc,
                  const std::vector<torch::Tensor>& weights) {
  const Recompute& o = call.options;
  if (!o.ahead) return {};
  std::vector<torch::Tensor> reads = weights;   // read on the side stream
  reads.push_back(xc);
  return o.ahead_stream->launch(
      [&] {
        const AutocastScope autocast(o.precision, xc.device());
        return o.ahead(c, xc, weights);
      },
      reads);
}

std::vector<torch::Tensor> taken(Ahead& first) { return first.pending() ? first.take() : std::vector<torch::Tensor>{}; }

// body(i, chunk, x_i) for each chunk in order, the chunk's first-stage results in its Chunk::ahead: chunk i + 1's
// input made (input(i + 1)) and its first stage issued (issue(i + 1, x)) before body runs chunk i.
template <typename Input, typename Issue, typename Body>
void pipelined(const std::vector<Chunk>& chunks, const Input& input, const Issue& issue, const Body& body) {
  if (chunks.empty()) return;
  torch::Tensor x_next = input(0);
  Ahead next = issue(0, x_next);
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    Chunk c = chunks[i];
    const torch::Tensor xc = x_next;
    c.ahead = taken(next);
    if (i + 1 < chunks.size()) {
      x_next = input(i + 1);
      next = issue(i + 1, x_next);
    }
    body(i, std::move(c), xc);
  }
}

// The input kept for backward: x itself, or (offload) nothing here and a copy in host memory, in o.kept — page-locked
// for a CUDA x; on CPU a separate buffer, so CPU runs exercise the same path. Copied, never converted.
torch::Tensor kept_input(const torch::Tensor& x, const std::optional<OffloadedInput>& o) {
  if (!o || !o->kept) return x;
  torch::Tensor host = o->host_memory->take(x.sizes(), x.scalar_type());
  // the copy out runs on the side stream; x's memory is held for it. Nothing on the compute stream reads `host`,
  // and the copy back runs on the same side stream, after it — as every copy into or out of o.host_memory does,
  // which is what lets it hand a buffer out again at once (host_buffers.hpp).
  static_cast<void>(o->copies->launch([&] { return std::vector<torch::Tensor>{host.copy_(x, /*non_blocking=*/true)}; },
                                      {x}));
  if (o->counts) o->counts->bytes += static_cast<std::int64_t>(host.nbytes());
  o->kept->host = host;
  return torch::Tensor();
}

// An offloaded input's copy back to `device`, issued on the side stream into a tensor made on the current one
// (side_stream.hpp: freed and reused in the compute stream's order).
Ahead copy_back(const KeptInput& kept, SideStream& copies, const c10::Device& device) {
  torch::Tensor x = SideStream::unfilled(torch::empty(kept.host.sizes(), kept.host.options().device(device)));
  return copies.launch([&] { return std::vector<torch::Tensor>{x.copy_(kept.host, /*non_blocking=*/true)}; });
}

// The input for the recomputation, on its device: the saved x, or the offloaded copy (fetched ahead, or now).
torch::Tensor restored(const torch::Tensor& saved, const std::optional<OffloadedInput>& o, const c10::Device& device) {
  if (!o || !o->kept) return saved;
  KeptInput& kept = *o->kept;
  ULY_CHECK(kept.host.defined(), "an offloaded layer input was not kept (backward ran twice?)");
  if (!kept.back.pending()) kept.back = copy_back(kept, *o->copies, device);
  torch::Tensor x = kept.back.take()[0];
  kept.host = torch::Tensor();   // a graph is back-propagated once
  return x;
}

// Backward of a layer: the copy back of the layer before it, to overlap this layer's recomputation.
void fetch_ahead(const std::optional<OffloadedInput>& o, const c10::Device& device) {
  if (!o || !o->fetch_ahead || !o->fetch_ahead->host.defined() || o->fetch_ahead->back.pending()) return;
  o->fetch_ahead->back = copy_back(*o->fetch_ahead, *o->copies, device);
  if (o->counts) ++o->counts->fetched_ahead;
}

// The units' parameters, gathered from their shards (or placeholders of their shapes), in order; nothing when not
// sharded.
std::vector<torch::Tensor> gathered(const std::optional<GatheredUnits>& g, bool placeholders = false) {
  std::vector<torch::Tensor> out;
  if (!g) return out;
  for (int u : g->units) {
    auto w = placeholders ? g->states->placeholders(u) : g->states->gather(u);
    out.insert(out.end(), w.begin(), w.end());
  }
  return out;
}

// Per gathered weight (gathered()'s order): 1 when it is trained, 0 for LoRA's frozen base.
std::vector<std::int64_t> gathered_trained(const std::optional<GatheredUnits>& g) {
  std::vector<std::int64_t> out;
  if (!g) return out;
  for (int u : g->units)
    for (bool t : g->states->trained(u)) out.push_back(t ? 1 : 0);
  return out;
}

// Hands each unit its slice of the gathered weights' gradients (reduce-scattered into its shards).
void scatter_gradients(const std::optional<GatheredUnits>& g, const std::vector<torch::Tensor>& grads) {
  if (!g) return;
  std::size_t next = 0;
  for (int u : g->units) {
    const auto first = grads.begin() + static_cast<std::ptrdiff_t>(next);
    next += g->states->gather_count(u);
    g->states->add_gradients(u, std::vector<torch::Tensor>(first, grads.begin() + static_cast<std::ptrdiff_t>(next)));
  }
}

// The chunks' outputs joined output by output as each chunk's come, so that no output holds every chunk's parts beside
// the joined tensor (head groups: the products [B, S/P, hidden] and the heads' outputs): one chunk's as they are; added
// (summed(): in place into a sum of its own, fp32 at least, so bf16 partial products are not rounded at each sum, then
// back in their dtype); columns written into their place in the joined output; rows concatenated at the end.
class Joined {
 public:
  explicit Joined(const Chunking& how) : how_(how) {}

  void add(torch::autograd::variable_list outputs) {
    const bool first = joined_.empty();
    for (std::size_t i = 0; i < outputs.size(); ++i) {
      torch::Tensor& y = outputs[i];
      if (first) {
        dtypes_.push_back(y.scalar_type());
        joined_.push_back({columns(i) ? spread(y) : summed(how_, i) && chunked() ? sum_of(y) : y});
        continue;
      }
      std::vector<torch::Tensor>& j = joined_[i];
      if (summed(how_, i)) j[0].add_(y);   // in place: the sum and one chunk's output alive, no third tensor
      else if (columns(i)) j[0].narrow(-1, chunks_ * y.size(-1), y.size(-1)).copy_(y);
      else j.push_back(std::move(y));
    }
    ++chunks_;
  }

  torch::autograd::variable_list finish() {
    torch::autograd::variable_list out;
    for (std::size_t i = 0; i < joined_.size(); ++i)
      out.push_back(joined_[i].size() == 1 ? joined_[i][0].to(dtypes_[i]) : at::cat(joined_[i], 0));   // rows: cat
    return out;
  }

 private:
  bool columns(std::size_t i) const { return how_.columns > 1 && !summed(how_, i); }
  bool chunked() const { return how_.columns > 1 || how_.rows > 0; }
  // the first chunk's summed output as the sum's own tensor, fp32 at least (a copy: f's output is never written)
  static torch::Tensor sum_of(const torch::Tensor& y) {
    return y.to(c10::promoteTypes(y.scalar_type(), torch::kFloat), /*non_blocking=*/false, /*copy=*/true);
  }
  // the first chunk's columns y [..., w] in the joined output [..., w·columns], the others' still to come
  torch::Tensor spread(const torch::Tensor& y) const {
    std::vector<std::int64_t> sizes = y.sizes().vec();
    sizes.back() *= how_.columns;
    torch::Tensor all = torch::empty(sizes, y.options());
    all.narrow(-1, 0, y.size(-1)).copy_(y);
    return all;
  }

  const Chunking& how_;
  std::int64_t chunks_ = 0;                         // chunks added so far
  std::vector<c10::ScalarType> dtypes_;             // per output: the chunks' dtype
  std::vector<std::vector<torch::Tensor>> joined_;  // per output: its sum, its columns' tensor, or its rows' parts
};

// Hands its output the gradient it holds, once, and holds it no longer: the root of a one-chunk recomputation's
// backward (the engine's own root gradients stay held by its caller until the whole backward returns; this one is
// freed as soon as the nodes after it have read it: a layer's output gradient, [B, S/P, hidden], once the MLP's
// backward ran). Its own gradient is ignored: the engine hands it an expanded zero.
struct HandedGradient : torch::autograd::Function<HandedGradient> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& y, torch::Tensor dy) {
    ctx->saved_data["dy"] = std::move(dy);
    return y.view_as(y);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 const torch::autograd::variable_list& /*zero*/) {
    torch::Tensor dy = ctx->saved_data["dy"].toTensor();
    ctx->saved_data.erase("dy");
    return {dy, torch::Tensor()};
  }
};

// One chunk's recomputation and back-propagation: dx_c (undefined unless x is floating) in x_c's .grad, the weights'
// gradients summed into the leaves' .grad (and, with neither handed-in nor gathered weights, the module's own).
// xc: the chunk's rows of x as a leaf (floating x) of its own. dy: the outputs' gradients — the only chunk's are its
// own (`only`): taken from dy and handed over (HandedGradient), so that nothing here holds them through the backward.
// kept: the kept outputs, by output index.
torch::Tensor back_propagate_chunk(const Call& call, Chunk c, const torch::Tensor& xc,
                                   const std::vector<torch::Tensor>& leaves, torch::autograd::variable_list& dy,
                                   bool only, const std::map<std::size_t, torch::Tensor>& kept) {
  const Chunking& how = call.options.chunking;
  for (const auto& [i, y] : kept) c.kept.push_back(share_of(y, i, c, how).detach());   // data: the node is y's grad_fn
  const torch::AutoGradMode grad_mode(true);
  torch::autograd::variable_list outputs = run_chunk(call, c, xc, leaves);   // its backward outside autocast
  torch::autograd::edge_list roots;
  torch::autograd::variable_list dys;
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    if (!dy[i].defined() || !outputs[i].requires_grad()) continue;
    if (!only) {
      roots.push_back(torch::autograd::impl::gradient_edge(outputs[i]));
      dys.push_back(share_of(dy[i], i, c, how));
      continue;
    }
    const torch::Tensor handed = HandedGradient::apply(outputs[i], std::move(dy[i]));
    roots.push_back(torch::autograd::impl::gradient_edge(handed));
    dys.push_back(torch::zeros({}, handed.options()).expand(handed.sizes()));   // no bytes: ignored
  }
  // The outputs' values are not needed by their backward: freed before it runs (a layer's output, a head group's
  // o_proj product: [B, S/P, hidden] each), where torch::autograd::backward(outputs, …) would hold them throughout.
  outputs.clear();
  if (!roots.empty())
    torch::autograd::Engine::get_default_engine().execute(roots, dys, /*keep_graph=*/false, /*create_graph=*/false,
                                                          /*accumulate_grad=*/true);
  return xc.grad();
}

struct Recomputed : torch::autograd::Function<Recomputed> {
  // anchor: a tensor that requires grad, so the outputs do (and backward runs) even when x is token ids
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                                                const torch::Tensor& /*anchor*/, at::TensorList handed_in,
                                                const c10::intrusive_ptr<Call>& call) {
    const Recompute& o = call->options;
    // an output nothing downstream read (head groups: the kept heads' output, [B, S/P, H·D]) gets no gradient, not a
    // whole tensor of zeros: backward skips undefined ones
    ctx->set_materialize_grads(false);
    std::vector<torch::Tensor> saved{kept_input(x, o.offload)};
    saved.insert(saved.end(), handed_in.begin(), handed_in.end());
    ctx->saved_data["call"] = c10::IValue::make_capsule(call);
    ctx->saved_data["handed_in"] = static_cast<std::int64_t>(handed_in.size());
    std::vector<std::int64_t> trained;   // per handed-in, then gathered weight: 1 when it gets a gradient (not LoRA's
    for (const torch::Tensor& w : handed_in) trained.push_back(w.requires_grad());   // frozen base)
    for (std::int64_t t : gathered_trained(o.gathered)) trained.push_back(t);
    ctx->saved_data["trained"] = trained;
    std::vector<torch::Tensor> weights(handed_in.begin(), handed_in.end());
    const std::vector<torch::Tensor> units = gathered(o.gathered);
    weights.insert(weights.end(), units.begin(), units.end());
    if (o.gathered) o.gathered->states->prefetch(o.gathered->prefetch_forward);
    Joined outputs(o.chunking);   // no graph: Function::apply runs this without grad
    const std::vector<Chunk> chunks = chunks_of(x, o.chunking);
    pipelined(
        chunks, [&](std::size_t i) { return rows_of(x, chunks[i], o.chunking); },
        [&](std::size_t i, const torch::Tensor& xi) { return first_stage(*call, chunks[i], xi, weights); },
        [&](std::size_t, const Chunk& c, const torch::Tensor& xc) {
          outputs.add(run_chunk(*call, c, xc, weights));
        });
    torch::autograd::variable_list y = outputs.finish();
    for (std::size_t i = 0; o.keep_outputs && i < y.size(); ++i)   // saved as outputs: no reference cycle
      if (!summed(o.chunking, i)) saved.push_back(y[i]);
    ctx->save_for_backward(saved);
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list& grad_out) {   // taken: see below
    const auto call = c10::static_intrusive_pointer_cast<Call>(ctx->saved_data["call"].toCapsule());
    const Recompute& o = call->options;
    const std::vector<torch::Tensor> saved = ctx->get_saved_variables();
    const torch::Tensor x = restored(saved[0], o.offload, call->device);   // on its device
    fetch_ahead(o.offload, call->device);   // after this input's own copy back, which the recomputation waits for
    // the leaves whose .grad sums the chunks' weight gradients: the handed-in weights, then the gathered units'
    const auto handed_in_end = saved.begin() + 1 + ctx->saved_data["handed_in"].toInt();
    std::vector<torch::Tensor> leaves(saved.begin() + 1, handed_in_end);
    std::map<std::size_t, torch::Tensor> kept;   // keep_outputs: the joined outputs that are not sums, by index
    auto kept_at = handed_in_end;
    for (std::size_t i = 0; o.keep_outputs && i < grad_out.size(); ++i)   // one gradient slot per output
      if (!summed(o.chunking, i)) kept[i] = *kept_at++;
    const std::vector<torch::Tensor> units = gathered(o.gathered, o.gathered && !o.gathered->weights_in_backward);
    leaves.insert(leaves.end(), units.begin(), units.end());
    if (o.gathered) o.gathered->states->prefetch(o.gathered->prefetch_backward);
    const std::vector<std::int64_t> trained = ctx->saved_data["trained"].toIntVector();
    ULY_CHECK(trained.size() == leaves.size(), "{} weights, {} marked trained or not", leaves.size(), trained.size());
    for (std::size_t i = 0; i < leaves.size(); ++i)   // a frozen weight: no gradient computed
      leaves[i] = leaves[i].detach().requires_grad_(trained[i] != 0);
    const std::vector<Chunk> chunks = chunks_of(x, o.chunking);
    // [N, ...]: one chunk's gradient as it is; several chunks' of rows each written into its rows; of columns, summed
    const bool rows = chunks.size() > 1 && o.chunking.columns <= 0;
    torch::Tensor dx = rows && x.is_floating_point() ? torch::empty_like(x) : torch::Tensor();
    // each chunk's rows of x as a leaf of its own, [rows, ...]
    const auto leaf = [&](std::size_t i) {
      return rows_of(x, chunks[i], o.chunking).detach().requires_grad_(x.is_floating_point());
    };
    const auto issue = [&](std::size_t i, const torch::Tensor& xi) {
      const torch::AutoGradMode grad_mode(true);   // the first stage records its graph, as f does
      return first_stage(*call, chunks[i], xi, leaves);
    };
    pipelined(chunks, leaf, issue, [&](std::size_t i, Chunk c, const torch::Tensor& xc) {
      // one chunk: its gradients are moved out of grad_out — the engine's own list, given by reference — so they are
      // freed once read; several chunks share them
      const bool only = chunks.size() == 1;
      const torch::Tensor dxc = back_propagate_chunk(*call, std::move(c), xc, leaves, grad_out, only, kept);
      if (!rows) dx = dx.defined() && dxc.defined() ? dx.add_(dxc) : dxc;
      else if (dxc.defined()) dx.narrow(0, chunks[i].first, chunks[i].rows).copy_(dxc);
    });
    for (auto& w : leaves) w = w.grad();   // the gathered weights are freed before their gradients are reduced (a
                                           // frozen weight's is undefined)
    const auto handed_end = leaves.begin() + ctx->saved_data["handed_in"].toInt();
    scatter_gradients(o.gathered, {handed_end, leaves.end()});
    torch::autograd::variable_list grads{dx, torch::Tensor()};   // x, the anchor
    grads.insert(grads.end(), leaves.begin(), handed_end);         // the handed-in weights
    grads.emplace_back();                                          // the call
    return grads;
  }
};

}  // namespace

torch::autograd::variable_list recomputed(ChunkForward f, const torch::Tensor& x,
                                          const std::vector<torch::Tensor>& weights, const Recompute& options) {
  ULY_CHECK(!torch::GradMode::is_enabled() || !x.is_floating_point() || x.requires_grad(),
            "a recomputed unit's input must require grad, or its parameters would get no gradient");
  ULY_CHECK(!options.offload || (options.offload->copies && options.offload->host_memory),
            "checkpoint offload needs a side stream for its copies and host memory for them");
  ULY_CHECK(options.chunking.rows == 0 || x.dim() > 0, "chunks of rows need an input with rows");
  ULY_CHECK(options.chunking.columns <= 0 || (options.chunking.rows == 0 && !options.chunking.sum_outputs &&
                                                !options.chunking.sum_trailing),
            "chunks of columns take all rows (their first outputs added, the others concatenated)");
  ULY_CHECK(!options.ahead == !options.ahead_stream, "a first stage issued ahead needs its side stream, and only it");
  const torch::Tensor anchor = torch::empty({0}).requires_grad_(torch::GradMode::is_enabled());
  Recompute o = options;
  if (!torch::GradMode::is_enabled()) o.offload.reset();   // no backward will want x (evaluation): no copy
  return Recomputed::apply(x, anchor, at::TensorList(weights),
                           c10::make_intrusive<Call>(std::move(f), o, x.device()));
}

std::vector<torch::Tensor> SlotMask::take(const std::vector<torch::Tensor*>& slots) {
  std::vector<torch::Tensor> defined;
  present_.clear();
  for (const torch::Tensor* t : slots) {
    present_.push_back(t->defined());
    if (t->defined()) defined.push_back(*t);
  }
  return defined;
}

void SlotMask::put(const std::vector<torch::Tensor*>& slots, const std::vector<torch::Tensor>& ws,
                   std::size_t first) const {
  ULY_CHECK(slots.size() == present_.size(), "{} slots for a mask of {}", slots.size(), present_.size());
  for (std::size_t i = 0; i < slots.size(); ++i)
    if (present_[i]) {
      ULY_CHECK(first < ws.size(), "slot mask: {} tensors are too few", ws.size());
      *slots[i] = ws[first++];
    }
}

}  // namespace ulysses::model
