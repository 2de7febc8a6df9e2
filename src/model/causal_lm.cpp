#include "model/causal_lm.hpp"

#include <ATen/core/Reduction.h>
#include <fmt/ostream.h>

#include "core/error.hpp"
#include "model/recompute.hpp"
#include "model/tiled_loss.hpp"
#include "model/tiled_mlp.hpp"

namespace ulysses::model {

DecoderLayerImpl::DecoderLayerImpl(const ModelConfig& c, const SequenceParallel& sp, const ModelOptions& options)
    : options_(options) {
  self_attn = register_module("self_attn", Attention(c, sp, options));
  mlp = register_module("mlp", Mlp(c, options));
  input_layernorm = register_module("input_layernorm", RMSNorm(c.hidden_size, c.rms_norm_eps));
  post_attention_layernorm = register_module("post_attention_layernorm", RMSNorm(c.hidden_size, c.rms_norm_eps));
}

DecoderLayerWeights DecoderLayerImpl::weights() const {
  return {input_layernorm->weight, self_attn->weights(), post_attention_layernorm->weight, mlp->weights()};
}

torch::Tensor DecoderLayerImpl::forward(const torch::Tensor& x, const RopeTables& rope, const AttentionPlan& plan,
                                        const DecoderLayerWeights& w) {
  const double eps = input_layernorm->eps;
  auto h = x + self_attn->forward(rms_norm(x, w.input_norm, eps), rope, plan, w.attention);   // [B, S/P, hidden]
  if (options_.mlp_tile_tokens() > 0)   // [B*S/P, hidden] in tiles -> [B, S/P, hidden]
    return tiled_mlp_block(h.reshape({-1, h.size(-1)}), w.post_attention_norm, eps, w.mlp, options_.mlp_tile_tokens(),
                           options_.precision()).view(h.sizes());
  return h + model::mlp(rms_norm(h, w.post_attention_norm, eps), w.mlp);                    // [B, S/P, hidden]
}

DecoderImpl::DecoderImpl(const ModelConfig& c, const SequenceParallel& sp, const ModelOptions& options)
    : inv_freq_(rope_inv_freq(c)), sliding_window_(c.sliding_window), options_(options),
      offloaded_bytes_(std::make_shared<std::atomic<std::int64_t>>(0)) {
  ULY_CHECK(options.offload_checkpoints() == 0 || options.activation_checkpointing(),
            "checkpoint offload needs activation checkpointing");
  embed_tokens = register_module(
      "embed_tokens", torch::nn::Embedding(torch::nn::EmbeddingOptions(c.vocab_size, c.hidden_size)
                                               .padding_idx(c.pad_token_id)));
  layers = register_module("layers", torch::nn::ModuleList());
  for (std::int64_t i = 0; i < c.num_layers; ++i) layers->push_back(DecoderLayer(c, sp, options));
  norm = register_module("norm", RMSNorm(c.hidden_size, c.rms_norm_eps));
}

torch::Tensor DecoderImpl::forward(const torch::Tensor& input_ids, const torch::Tensor& position_ids,
                                   const torch::Tensor& doc_ids) {
  auto h = embed_tokens(input_ids);                                                      // [B, S/P, hidden]
  // shared with the layers' recomputation in backward when checkpointing
  const auto rope = std::make_shared<const RopeTables>(rope_tables(inv_freq_, position_ids, h.scalar_type()));
  const auto plan = std::make_shared<const AttentionPlan>(plan_attention(doc_ids, sliding_window_, h.device()));
  *offloaded_bytes_ = 0;
  for (std::size_t i = 0; i < layers->size(); ++i) {
    const auto layer = layers->ptr<DecoderLayerImpl>(i);
    const Recompute recompute{options_.precision(), static_cast<std::int64_t>(i) < options_.offload_checkpoints(),
                              offloaded_bytes_};
    h = options_.activation_checkpointing() ? recomputed_layer(layer, h, rope, plan, recompute)
                                            : layer->forward(h, *rope, *plan);        // [B, S/P, hidden]
  }
  return norm(h);                                                                        // [B, S/P, hidden]
}

CausalLmImpl::CausalLmImpl(const ModelConfig& c, const SequenceParallel& sp, const ModelOptions& options)
    : config_(c), options_(options), sp_degree_(sp.degree()) {
  model = register_module("model", Decoder(c, sp, options));
  if (!c.tie_word_embeddings)
    lm_head = register_module("lm_head", torch::nn::Linear(torch::nn::LinearOptions(c.hidden_size, c.vocab_size)
                                                               .bias(false)));
}

namespace {

void check_inputs(const torch::Tensor& input_ids, const torch::Tensor& position_ids, const torch::Tensor& doc_ids,
                  const torch::Tensor& labels, std::int64_t sp_degree) {
  for (const auto* t : {&input_ids, &position_ids, &doc_ids, &labels})
    ULY_CHECK(t->dim() == 2 && t->scalar_type() == torch::kLong, "model inputs must be [B, S] int64 (got {} {})",
              fmt::streamed(t->sizes()), fmt::streamed(t->scalar_type()));
  ULY_CHECK(position_ids.sizes() == input_ids.sizes() && labels.sizes() == input_ids.sizes(),
            "input_ids {}, position_ids {} and labels {} must have one shape",
            fmt::streamed(input_ids.sizes()), fmt::streamed(position_ids.sizes()), fmt::streamed(labels.sizes()));
  const std::int64_t S = doc_ids.size(1);
  check_sequence_split(S, sp_degree, "the model's input (doc_ids)");
  ULY_CHECK(doc_ids.size(0) == input_ids.size(0) && S / sp_degree == input_ids.size(1),
            "doc_ids {} must be [B, S] for input_ids {} = [B, S/P] with P = {}",
            fmt::streamed(doc_ids.sizes()), fmt::streamed(input_ids.sizes()), sp_degree);
}

}  // namespace

CausalLmOutput CausalLmImpl::forward(const torch::Tensor& input_ids, const torch::Tensor& position_ids,
                                     const torch::Tensor& doc_ids, const torch::Tensor& labels, bool keep_logits) {
  check_inputs(input_ids, position_ids, doc_ids, labels, sp_degree_);
  const AutocastScope autocast(options_.precision(), input_ids.device());   // the forward; backward follows its dtypes
  auto h = model(input_ids, position_ids, doc_ids);                                      // [B, S/P, hidden]
  const torch::Tensor& head = lm_head ? lm_head->weight : model->embed_tokens->weight;   // [V, hidden]
  auto flat_labels = labels.reshape({-1});                                               // [B*S/P]
  auto valid_count = (flat_labels != kIgnoreLabel).sum();
  if (options_.logits_chunk_tokens() > 0 && !keep_logits)
    return {torch::Tensor(),
            tiled_cross_entropy_sum(h.reshape({-1, config_.hidden_size}), head, flat_labels,   // [B*S/P, hidden]
                                    options_.logits_chunk_tokens(), options_.precision()),
            valid_count};
  auto logits = at::linear(h, head);                                                     // [B, S/P, V]
  auto loss_sum = at::cross_entropy_loss(logits.to(torch::kFloat).reshape({-1, config_.vocab_size}),   // [B*S/P, V]
                                         flat_labels, /*weight=*/{}, at::Reduction::Sum, kIgnoreLabel);
  return {keep_logits ? logits : torch::Tensor(), loss_sum, valid_count};
}

}  // namespace ulysses::model
