// CausalLm: a Llama-family decoder with its language-model head and loss, one SP rank's share of it.
//
// Parameter names are exactly those of the transformers model's state_dict (model.embed_tokens.weight,
// model.layers.0.self_attn.q_proj.weight, ..., model.norm.weight, lm_head.weight), except that a model
// with tied embeddings has no lm_head.weight (the head reuses model.embed_tokens.weight), as in the
// safetensors transformers writes. There are no buffers: the RoPE frequencies are a plain member.
//
// forward takes this rank's S/P tokens and the document ids of the whole sequence (attention sees every
// token after the all-to-all) and returns the SUM of the token cross-entropies (fp32) over the labels that
// are not kIgnoreLabel, and how many those are. The caller all-reduces both over the SP and DP groups and
// divides (DESIGN "Loss"); nothing here divides. Labels are pre-shifted: labels[t] is the token that
// follows input_ids[t] in the whole sequence.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include "core/sequence_parallel.hpp"
#include "io/shard_format.hpp"
#include "model/attention.hpp"
#include "model/layer_runner.hpp"
#include "model/mlp.hpp"
#include "model/moe.hpp"
#include "model/rms_norm.hpp"
#include "model/rotary.hpp"
#include "model/options.hpp"
#include "model/sharded_states.hpp"

namespace ulysses::model {

using arch::ModelConfig;

inline constexpr std::int64_t kIgnoreLabel = shard::kIgnoreIndex;   // the label of no loss, as in the shards

struct DecoderLayerWeights {
  torch::Tensor input_norm;            // [hidden]
  AttentionWeights attention;
  torch::Tensor post_attention_norm;   // [hidden]
  MlpWeights mlp;                      // a dense layer's (undefined in a sparse one)
  MoeWeights moe;                      // a sparse layer's (no experts in a dense one)
};

// What one forward's sparse layers route with: which of this rank's tokens are real (their statistics count only
// those), and whether the statistics carry the graph the load-balancing loss back-propagates through.
struct Routing {
  torch::Tensor real;            // [B*S/P] bool; undefined: every token
  bool router_gradient = false;
};

// x + attn(norm(x)), then h + mlp(norm(h)); the MLP dense or routed (arch::MlpKind).
struct DecoderLayerImpl : torch::nn::Module {
  // heads_ahead: where its head groups issue their first stages ahead (prefetch; shared by the layers), or null
  DecoderLayerImpl(const arch::LayerSpec& layer, const SequenceParallel& sp, const ModelOptions& options,
                   std::shared_ptr<SharedSideStream> heads_ahead = nullptr);
  DecoderLayerWeights weights() const;   // its own parameters
  // The same, with tensors in the order of parameters() (a sharded unit's gathered weights) in their place.
  DecoderLayerWeights weights(const std::vector<torch::Tensor>& in_parameter_order) const;
  // x [B, S/P, hidden], the whole sequence's documents -> [B, S/P, hidden]
  torch::Tensor forward(const torch::Tensor& x, const RopeTables& rope, const AttentionPlan& plan) {
    return forward(x, rope, plan, weights());
  }
  torch::Tensor forward(const torch::Tensor& x, const RopeTables& rope, const AttentionPlan& plan,
                        const DecoderLayerWeights& w) {
    return run(x, rope, plan, {}, w)[0];
  }
  // {the output [B, S/P, hidden]} and, in a sparse layer, its routing statistics (RouterStats' probability_sum [E]
  // and selections [E], over routing.real's tokens).
  torch::autograd::variable_list run(const torch::Tensor& x, const RopeTables& rope, const AttentionPlan& plan,
                                     const Routing& routing, const DecoderLayerWeights& w);
  bool sparse() const { return spec_.routed(); }

  Attention self_attn{nullptr};
  Mlp mlp{nullptr};          // dense layers
  RoutedMlp moe{nullptr};    // sparse layers: registered as "mlp" (Qwen) or "block_sparse_moe" (Mixtral)
  RMSNorm input_layernorm{nullptr}, post_attention_layernorm{nullptr};

 private:
  ModelOptions options_;   // the MLP tile and the precision its recomputation re-enters
  arch::MlpSpec spec_;
};
TORCH_MODULE(DecoderLayer);

// transformers' LlamaModel ("model."): embeddings, the layers, the final norm. Each layer runs through the layer
// runner (layer_runner.hpp: plain, checkpointed, offloaded, gathered); with sharded states (use_states) the
// embeddings run as a recomputed unit over gathered weights too, and the final norm belongs to the head unit
// (CausalLm).
struct DecoderImpl : torch::nn::Module {
  // placeholder_parameters: each submodule's parameters become placeholders (their shapes, one element of
  // storage) as soon as it is built, so the whole model never exists on this rank; ShardedStates holds the
  // values.
  DecoderImpl(const ModelConfig& c, const SequenceParallel& sp, const ModelOptions& options,
              bool placeholder_parameters = false);
  // input_ids, position_ids [B, S/P], doc_ids [B, S] -> hidden states [B, S/P, hidden] after the final norm
  torch::Tensor forward(const torch::Tensor& input_ids, const torch::Tensor& position_ids,
                        const torch::Tensor& doc_ids) {
    return norm(hidden(input_ids, position_ids, doc_ids));
  }
  // The same before the final norm; `router`, when given, gets the sparse layers' routing statistics summed over them.
  torch::Tensor hidden(const torch::Tensor& input_ids, const torch::Tensor& position_ids, const torch::Tensor& doc_ids,
                       const Routing& routing = {}, RouterStats* router = nullptr);
  // head_units: the units the head runs with after the last layer (what that layer prefetches)
  void use_states(std::shared_ptr<ShardedStates> states, std::vector<int> head_units);
  const LayerRunner& runner() const { return runner_; }
  const SequenceParallel& sequence_parallel() const { return sp_; }
  // Bytes of layer inputs the last forward copied to host memory (checkpoint offload).
  std::int64_t offloaded_bytes() const { return runner_.offloaded().bytes; }
  // Layer inputs whose copy back the last backward issued ahead (checkpoint offload with prefetch).
  std::int64_t fetched_ahead() const { return runner_.offloaded().fetched_ahead; }

  torch::nn::Embedding embed_tokens{nullptr};
  torch::nn::ModuleList layers{nullptr};
  RMSNorm norm{nullptr};

 private:
  RopeFrequencies rope_;   // the RoPE of layer 0's spec, which every layer's shares today
  SequenceParallel sp_;    // this rank's slice of each sequence (longrope's document lengths)
  std::optional<std::int64_t> sliding_window_;
  bool ring_;   // ring attention (--sp-ring > 1): no dense sliding-window mask
  bool fp32_residual_;
  bool frozen_embeddings_;   // LoRA: the layers' input is made a leaf that requires grad
  torch::Tensor embed(const torch::Tensor& input_ids);   // [B, S/P] -> [B, S/P, hidden]

  LayerRunner runner_;
};
TORCH_MODULE(Decoder);

struct CausalLmOutput {
  torch::Tensor logits;        // [B, S/P, V] in the model's dtype; undefined unless asked for
  torch::Tensor loss_sum;      // [] fp32: sum of the cross-entropies of this rank's valid labels
  torch::Tensor valid_count;   // [] int64: number of this rank's labels != kIgnoreLabel
  // A mixture of experts: the load-balancing loss of this forward's real tokens over the SP group (moe.hpp; its term
  // carries a graph when the config trains it); nullopt in a dense model.
  std::optional<RouterLoss> router;
};

struct CausalLmImpl : torch::nn::Module {
  // sp: this rank's sequence-parallel group (its communicator not owned, see attention.hpp); the default
  // is no SP. BadInput when the heads do not split over P ranks. Parameters get LibTorch's default init:
  // call init_weights or load_hf_weights (weights.hpp) next. With sharding enabled the parameters are
  // placeholders (names and shapes) and their values live in sharded_states() on sharding.device, every unit is
  // recomputed in backward (recompute.hpp) and nothing needs .to(device).
  explicit CausalLmImpl(const ModelConfig& c, const SequenceParallel& sp = {}, const ModelOptions& options = {},
                        const StatePlacement& sharding = {});

  // input_ids, position_ids, labels [B, S/P] int64 (position ids global, restarting at 0 in each
  // document; labels kIgnoreLabel where no loss is taken); doc_ids [B, S] int64, the whole sequence's.
  // real_tokens [B, S/P] bool: the tokens that are not padding (undefined: all), which the routing statistics count.
  // The statistics carry a graph when the config trains the load-balancing loss (arch::MoeConfig::router_loss).
  // BadInput when S is not a multiple of P. Runs under the autocast scope of options().precision() (amp-bf16). In
  // bf16 it computes in its parameters' dtype: bf16 (train::ModelStates keeps the fp32 masters) or, sharded, the
  // gathered bf16 copies.
  CausalLmOutput forward(const torch::Tensor& input_ids, const torch::Tensor& position_ids,
                         const torch::Tensor& doc_ids, const torch::Tensor& labels, bool keep_logits = false,
                         const torch::Tensor& real_tokens = {});

  const ModelConfig& config() const { return config_; }
  const ModelOptions& options() const { return options_; }
  const std::shared_ptr<ShardedStates>& sharded_states() const { return states_; }   // null unless sharded

  Decoder model{nullptr};
  torch::nn::Linear lm_head{nullptr};   // null when the embeddings are tied

 private:
  ModelConfig config_;
  ModelOptions options_;
  std::int64_t sp_degree_, ring_degree_;
  std::shared_ptr<ShardedStates> states_;
  std::vector<int> head_units() const;   // "head", and the embeddings when tied
};
TORCH_MODULE(CausalLm);

}  // namespace ulysses::model
