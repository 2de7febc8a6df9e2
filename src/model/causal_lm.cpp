#include "model/causal_lm.hpp"

#include <algorithm>

#include <ATen/core/Reduction.h>
#include <fmt/ostream.h>
#include <torch/csrc/autograd/generated/variable_factories.h>
#include <torch/csrc/autograd/grad_mode.h>

#include "core/error.hpp"
#include "model/recompute.hpp"
#include "model/tiled_loss.hpp"
#include "model/tiled_mlp.hpp"

namespace ulysses::model {

DecoderLayerImpl::DecoderLayerImpl(const arch::LayerSpec& layer, const SequenceParallel& sp, const ModelOptions& options,
                                   std::shared_ptr<SharedSideStream> heads_ahead)
    : options_(options), spec_(layer.mlp) {
  const HeadGroups groups{options.attention_head_groups(), options.precision(), std::move(heads_ahead)};
  ULY_CHECK(layer.input_norm.kind == arch::NormKind::kRms && layer.post_attention_norm.kind == arch::NormKind::kRms,
            "layer {}: a block kind this model has no module for", layer.index);
  // registered in the order of the spec's blocks: transformers' named_parameters() order
  self_attn = register_module("self_attn", Attention(layer, sp, groups, options.lora()));
  const std::string& mlp_module = layer.blocks[1].module;   // "mlp", or Mixtral's "block_sparse_moe"
  if (spec_.routed()) moe = register_module(mlp_module, RoutedMlp(layer.mlp));
  else mlp = register_module(mlp_module, Mlp(layer.mlp, options.lora()));
  input_layernorm = register_module("input_layernorm", RMSNorm(layer.input_norm));
  post_attention_layernorm = register_module("post_attention_layernorm", RMSNorm(layer.post_attention_norm));
}

DecoderLayerWeights DecoderLayerImpl::weights() const {
  return {input_layernorm->weight, self_attn->weights(), post_attention_layernorm->weight,
          mlp ? mlp->weights() : MlpWeights{}, moe ? moe->weights() : MoeWeights{}};
}

namespace {

template <typename Fn>
void for_each_tensor(DecoderLayerWeights& w, Fn&& fn) {
  fn(w.input_norm);
  for (torch::Tensor* t : tensor_slots(w.attention)) fn(*t);
  fn(w.post_attention_norm);
  for (torch::Tensor* t : tensor_slots(w.mlp)) fn(*t);
  for (torch::Tensor* t : tensor_slots(w.moe)) fn(*t);
}

// Parameters become placeholders of the same shapes (every stride 0: one element of storage each), so the
// module keeps its names and shapes, not its values. (A meta tensor cannot replace a CPU parameter's data.)
void to_placeholders(torch::nn::Module& m) {
  for (auto& p : m.parameters())
    p.set_data(at::empty_strided(p.sizes(), std::vector<std::int64_t>(p.sizes().size(), 0), p.options()));
}

}  // namespace

DecoderLayerWeights DecoderLayerImpl::weights(const std::vector<torch::Tensor>& in_parameter_order) const {
  const std::vector<torch::Tensor> own = parameters();
  ULY_CHECK(own.size() == in_parameter_order.size(), "decoder layer: {} tensors for {} parameters",
            in_parameter_order.size(), own.size());
  DecoderLayerWeights w = weights();
  for_each_tensor(w, [&](torch::Tensor& t) {
    if (!t.defined()) return;
    const auto it = std::find_if(own.begin(), own.end(), [&](const torch::Tensor& p) { return p.is_same(t); });
    ULY_CHECK(it != own.end(), "decoder layer: a weight that is not one of its parameters");
    t = in_parameter_order[static_cast<std::size_t>(it - own.begin())];
  });
  return w;
}

torch::autograd::variable_list DecoderLayerImpl::run(const torch::Tensor& x, const RopeTables& rope,
                                                     const AttentionPlan& plan, const Routing& routing,
                                                     const DecoderLayerWeights& w) {
  const double eps = post_attention_layernorm->eps;
  const std::int64_t tile = options_.mlp_tile_tokens();
  const auto attended = self_attn->forward_normed(x, w.input_norm, rope, plan, w.attention);
  auto h = x + attended;                                                                    // [B, S/P, hidden]
  const torch::Tensor rows = h.reshape({-1, h.size(-1)});                                   // [B*S/P, hidden]
  if (spec_.routed()) {   // {[B, S/P, hidden], Σ probabilities [E], selections [E]}
    if (tile > 0) {
      auto out = tiled_moe_block(rows, w.post_attention_norm, eps, w.moe, spec_, routing.real, routing.router_gradient,
                                 tile, options_.precision());
      out[0] = out[0].view(h.sizes());
      return out;
    }
    const MoeOutput out = moe_mlp(rms_norm_for_matmul(rows, w.post_attention_norm, eps), w.moe, spec_, routing.real,
                                  routing.router_gradient);
    return {h + out.y.view(h.sizes()), out.stats.probability_sum, out.stats.selections};
  }
  if (tile > 0)   // [B*S/P, hidden] in tiles -> [B, S/P, hidden]
    return {tiled_mlp_block(rows, w.post_attention_norm, eps, w.mlp, tile, options_.precision()).view(h.sizes())};
  return {h + model::mlp(rms_norm_for_matmul(h, w.post_attention_norm, eps), w.mlp)};       // [B, S/P, hidden]
}

DecoderImpl::DecoderImpl(const ModelConfig& c, const SequenceParallel& sp, const ModelOptions& options,
                         bool placeholder_parameters)
    : rope_(rope_frequencies(arch::layer_spec(c, 0).attention.rope)), sp_(sp), sliding_window_(c.sliding_window),
      ring_(sp.ring_degree() > 1),
      fp32_residual_(options.fp32_residual()),
      frozen_embeddings_(options.lora().enabled()), runner_(options, c.num_layers) {
  embed_tokens = register_module(
      "embed_tokens", torch::nn::Embedding(torch::nn::EmbeddingOptions(c.vocab_size, c.hidden_size)
                                               .padding_idx(c.pad_token_id)));
  if (placeholder_parameters) to_placeholders(*embed_tokens);
  layers = register_module("layers", torch::nn::ModuleList());
  // every layer's head groups issue their next group's projections and all-to-all ahead, on one stream
  const auto heads_ahead = options.heads_ahead() && options.attention_head_groups() > 1
                               ? std::make_shared<SharedSideStream>()
                               : nullptr;
  if (options.attention_head_groups() != 1)
    arch::check_head_groups(c, sp.ulysses_degree(), options.attention_head_groups());
  if (sp.ulysses_degree() > 1) arch::check_heads_for_sp(c, sp.degree(), c.architecture, sp.ring_degree());
  for (std::int64_t i = 0; i < c.num_layers; ++i) {
    layers->push_back(DecoderLayer(arch::layer_spec(c, i), sp, options, heads_ahead));
    if (placeholder_parameters) to_placeholders(*layers[i]);
  }
  norm = register_module("norm", RMSNorm(c.hidden_size, c.rms_norm_eps));
  if (placeholder_parameters) to_placeholders(*norm);
}

torch::Tensor DecoderImpl::embed(const torch::Tensor& input_ids) {
  if (!runner_.sharded()) return embed_tokens(input_ids);
  const std::int64_t pad = embed_tokens->options.padding_idx().value_or(-1);
  const ChunkForward lookup = [pad](const Chunk&, const torch::Tensor& ids, const std::vector<torch::Tensor>& w) {
    return torch::autograd::variable_list{torch::embedding(w[0], ids, pad)};   // w[0]: the table [V, hidden]
  };
  return recomputed(lookup, input_ids, {}, runner_.embeddings())[0];
}

void DecoderImpl::use_states(std::shared_ptr<ShardedStates> states, std::vector<int> head_units) {
  std::vector<int> layer_units;
  for (std::size_t i = 0; i < layers->size(); ++i)
    layer_units.push_back(states->unit(fmt::format("model.layers.{}", i)));
  const int embeddings = states->unit("model.embed_tokens");
  runner_.use_states(std::move(states), embeddings, std::move(layer_units), std::move(head_units));
}

torch::Tensor DecoderImpl::hidden(const torch::Tensor& input_ids, const torch::Tensor& position_ids,
                                  const torch::Tensor& doc_ids, const Routing& routing, RouterStats* router) {
  auto h = embed(input_ids);                                                             // [B, S/P, hidden]
  // shared with the layers' recomputation in backward when checkpointing; in the embeddings' (compute) dtype
  const torch::Tensor doc_lengths = rope_.long_inv_freq.defined() ? local_document_lengths(doc_ids, sp_) : torch::Tensor();
  const auto rope = std::make_shared<const RopeTables>(rope_tables(rope_, position_ids, doc_lengths, h.scalar_type()));
  if (fp32_residual_) h = h.to(torch::kFloat);   // the residual stream in fp32 (the bf16 model's --fp32-residual)
  // LoRA: the frozen table gives an input that needs no gradient, and a recomputed layer whose inputs need none is
  // never back-propagated (its adapters would get no gradient): the input becomes a leaf that needs one (transformers'
  // enable_input_require_grads)
  if (frozen_embeddings_ && torch::GradMode::is_enabled()) h = h.detach().requires_grad_(true);
  const auto plan = std::make_shared<const AttentionPlan>(plan_attention(doc_ids, sliding_window_, h.device(),
                                                                         /*dense_mask=*/!ring_));
  runner_.begin(h.device());
  std::int64_t real = -1;   // routing.real's tokens, counted at the first sparse layer
  for (std::size_t i = 0; i < layers->size(); ++i) {
    const auto layer = layers->ptr<DecoderLayerImpl>(i);
    const LayerForward run = [layer, rope, plan, routing](const torch::Tensor& x, const std::vector<torch::Tensor>& w) {
      return layer->run(x, *rope, *plan, routing, w.empty() ? layer->weights() : layer->weights(w));
    };
    torch::autograd::variable_list out = runner_(static_cast<std::int64_t>(i), run, h);
    h = out[0];                                                                          // [B, S/P, hidden]
    if (out.size() == 1 || !router) continue;
    router->probability_sum = router->probability_sum.defined() ? router->probability_sum + out[1] : out[1];   // [E]
    router->selections = router->selections.defined() ? router->selections + out[2].detach() : out[2].detach();
    if (real < 0) real = routing.real.defined() ? routing.real.sum().item<std::int64_t>() : h.size(0) * h.size(1);
    router->tokens += real;
  }
  return h;
}

CausalLmImpl::CausalLmImpl(const ModelConfig& c, const SequenceParallel& sp, const ModelOptions& options,
                           const StatePlacement& sharding)
    : config_(c), options_(options), sp_degree_(sp.degree()), ring_degree_(sp.ring_degree()) {
  model = register_module("model", Decoder(c, sp, options, sharding.enabled()));
  if (!c.tie_word_embeddings) {
    lm_head = register_module("lm_head", torch::nn::Linear(torch::nn::LinearOptions(c.hidden_size, c.vocab_size)
                                                               .bias(false)));
    if (sharding.enabled()) to_placeholders(*lm_head);
  }
  if (options.lora().enabled()) freeze_base(*this);
  if (!sharding.enabled()) return;
  std::vector<ShardedStates::Parameter> params;   // LoRA's frozen base: groups of their own, not trained
  for (const auto& item : named_parameters())
    params.push_back({item.key(), item.value().sizes().vec(), item.value().requires_grad()});
  const StateDtypes dtypes{.matrices = compute_dtype(options.precision()),
                           .others = weight_dtype(options.precision()), .reduce = options.reduce_dtype()};
  states_ = std::make_shared<ShardedStates>(params, dtypes, sharding, sharding.device, options.prefetch());
  model->use_states(states_, head_units());
}

std::vector<int> CausalLmImpl::head_units() const {
  std::vector<int> units{states_->unit("head")};
  if (!lm_head) units.push_back(states_->unit("model.embed_tokens"));   // tied: the table is the head's weight
  return units;
}

namespace {

void check_inputs(const torch::Tensor& input_ids, const torch::Tensor& position_ids, const torch::Tensor& doc_ids,
                  const torch::Tensor& labels, std::int64_t sp_degree, std::int64_t ring_degree) {
  for (const auto* t : {&input_ids, &position_ids, &doc_ids, &labels})
    ULY_CHECK(t->dim() == 2 && t->scalar_type() == torch::kLong, "model inputs must be [B, S] int64 (got {} {})",
              fmt::streamed(t->sizes()), fmt::streamed(t->scalar_type()));
  ULY_CHECK(position_ids.sizes() == input_ids.sizes() && labels.sizes() == input_ids.sizes(),
            "input_ids {}, position_ids {} and labels {} must have one shape",
            fmt::streamed(input_ids.sizes()), fmt::streamed(position_ids.sizes()), fmt::streamed(labels.sizes()));
  const std::int64_t S = doc_ids.size(1);
  check_ring_split(S, sp_degree, ring_degree, "the model's input (doc_ids)");
  ULY_CHECK(doc_ids.size(0) == input_ids.size(0) && S / sp_degree == input_ids.size(1),
            "doc_ids {} must be [B, S] for input_ids {} = [B, S/P] with P = {}",
            fmt::streamed(doc_ids.sizes()), fmt::streamed(input_ids.sizes()), sp_degree);
}

// The statistics summed over the SP group (its Ulysses group, then its ring group), detached.
RouterStats over_sequence(const RouterStats& local, const SequenceParallel& sp) {
  const std::int64_t E = local.probability_sum.size(0);
  torch::Tensor all = torch::cat({local.probability_sum.detach().to(torch::kFloat64), local.selections,
                                  torch::full({1}, static_cast<double>(local.tokens), local.selections.options())});
  for (comm::Communicator* group : {sp.ulysses_group(), sp.ring_group()})   // [2E + 1]
    if (group && group->size() > 1) group->all_reduce_sum(all);
  return {all.narrow(0, 0, E), all.narrow(0, E, E), static_cast<std::int64_t>(all[2 * E].item<double>())};
}

}  // namespace

CausalLmOutput CausalLmImpl::forward(const torch::Tensor& input_ids, const torch::Tensor& position_ids,
                                     const torch::Tensor& doc_ids, const torch::Tensor& labels, bool keep_logits,
                                     const torch::Tensor& real_tokens) {
  check_inputs(input_ids, position_ids, doc_ids, labels, sp_degree_, ring_degree_);
  ULY_CHECK(states_ || options_.precision() != Precision::kBf16 ||
                model->embed_tokens->weight.scalar_type() == c10::kBFloat16,
            "a bf16 model computes with bf16 weights, and this one's are {}: train::ModelStates makes them the bf16 "
            "copies of its fp32 masters (or convert the module: ->to(torch::kBFloat16))",
            fmt::streamed(model->embed_tokens->weight.scalar_type()));
  const AutocastScope autocast(options_.precision(), input_ids.device());   // the forward; backward follows its dtypes
  Routing routing{real_tokens.defined() ? real_tokens.reshape({-1}).to(torch::kBool) : torch::Tensor(),
                  config_.moe.router_loss && torch::GradMode::is_enabled()};
  RouterStats router;
  auto h = model->hidden(input_ids, position_ids, doc_ids, routing, &router);             // [B, S/P, hidden]
  auto flat_labels = labels.reshape({-1});                                               // [B*S/P]
  auto valid_count = (flat_labels != kIgnoreLabel).sum();
  const std::int64_t chunk = keep_logits ? 0 : options_.logits_chunk_tokens();
  const std::int64_t hidden_size = config_.hidden_size, vocab = config_.vocab_size;
  const double eps = model->norm->eps;
  const Precision precision = options_.precision();
  // the final norm, the head [V, hidden] and the loss: {loss_sum} or, keeping the logits, {loss_sum, logits}
  const ChunkForward head = [=](const Chunk&, const torch::Tensor& x, const std::vector<torch::Tensor>& w) {
    const auto hn = rms_norm(x, w[0], eps).to(w[1].scalar_type());   // [B, S/P, hidden], the head's dtype
    if (chunk > 0)   // [B*S/P, hidden] in chunks
      return torch::autograd::variable_list{
          tiled_cross_entropy_sum(hn.reshape({-1, hidden_size}), w[1], flat_labels, chunk, precision)};
    auto logits = at::linear(hn, w[1]);                                                  // [B, S/P, V]
    auto loss_sum = at::cross_entropy_loss(logits.to(torch::kFloat).reshape({-1, vocab}),   // [B*S/P, V]
                                           flat_labels, /*weight=*/{}, at::Reduction::Sum, kIgnoreLabel);
    return keep_logits ? torch::autograd::variable_list{loss_sum, logits} : torch::autograd::variable_list{loss_sum};
  };
  torch::autograd::variable_list out;
  if (!states_) {
    out = head(Chunk{}, h, {model->norm->weight, lm_head ? lm_head->weight : model->embed_tokens->weight});
  } else {   // the head unit holds the norm (and lm_head); tied, the head is the embedding unit's table
    out = recomputed(head, h, {}, model->runner().head());
  }
  std::optional<RouterLoss> router_loss;
  if (router.probability_sum.defined()) router_loss = model::router_loss(router, over_sequence(router, model->sequence_parallel()));
  return {keep_logits ? out[1] : torch::Tensor(), out[0], valid_count, router_loss};
}

}  // namespace ulysses::model
