// LayerSpec: one decoder layer as transformers builds it for a config.json — its blocks (token mixer, MLP, norms),
// their kinds and parameters. Built once per layer from a ModelConfig (layers may differ: the MoE, sliding-window and
// linear-attention kinds of later architectures mix kinds within a model), and the one description that
//   - the model builds its layers from (model/causal_lm.cpp: each block's module from its spec);
//   - arch::parameters() (parameters.hpp) lists, and so the weight name maps of import, export, PEFT and
//     ulysses-ckpt inspect, the sharded state layout and the planner's state bytes;
//   - the planner counts a layer's activations and FLOPs from (plan/memory_model.cpp).
// Torch-free. Adding a layer kind is an enum value here, its parameters in layer_spec.cpp, its module in model/
// and its counts in the planner (docs/architecture.md, "Adding an architecture").
//
// Shape letters: H query heads, Hkv key/value heads, D head dim, I intermediate size.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "arch/model_config.hpp"
#include "arch/rope.hpp"   // RopeSpec

namespace ulysses::arch {

enum class MixerKind {
  kSoftmaxAttention,   // causal softmax attention over the document (or a sliding window of it), GQA
};

struct AttentionSpec {
  MixerKind kind = MixerKind::kSoftmaxAttention;
  std::int64_t hidden = 0, heads = 0, kv_heads = 0, head_dim = 0;   // hidden, H, Hkv, D
  bool qkv_bias = false, o_bias = false;
  bool qk_norm = false;                         // RMSNorm over D of every query and key head, before RoPE
  double norm_eps = 1e-6;                       // the q/k norms'
  std::optional<std::int64_t> sliding_window;   // query i sees keys j with i - j < window
  RopeSpec rope;                                // the position encoding of its queries and keys
};

enum class MlpKind {
  kDenseGated,      // down(silu(gate x) * up x), no biases
  kRoutedExperts,   // a router [E, hidden] picks each token's top-k of E experts, each a dense gated MLP; their outputs
                    // weighted by the router's probabilities (renormalised over the k, or not), plus a shared expert
                    // gated by sigmoid(shared_expert_gate x) where there is one
};

// A gated MLP's projections: their module names, and the order transformers registers them in.
struct GatedMlpNames {
  std::string gate = "gate_proj", up = "up_proj", down = "down_proj";
  bool down_before_up = false;   // Mixtral's experts: w1 (gate), w2 (down), w3 (up)
};

struct MlpSpec {
  MlpKind kind = MlpKind::kDenseGated;
  std::int64_t hidden = 0, intermediate = 0;   // hidden, I (routed: each expert's)
  GatedMlpNames names;                         // of the MLP's (routed: each expert's) projections
  // kRoutedExperts
  std::int64_t experts = 0, top_k = 0;         // E, k
  bool normalize_top_k = false;                // the k probabilities divided by their sum
  std::int64_t shared_intermediate = 0;        // the shared expert's I; 0: none
  bool routed() const { return kind == MlpKind::kRoutedExperts; }
  // Parameters of one token's forward: the router, k experts and the shared expert (the dense MLP: all of them).
  std::int64_t active_parameter_count() const;
};

enum class NormKind {
  kRms,   // weight * x / sqrt(mean(x^2) + eps)
};

struct NormSpec {
  NormKind kind = NormKind::kRms;
  std::int64_t dim = 0;
  double eps = 1e-6;
};

// A parameter of one layer, named inside it: "self_attn.q_proj.weight", [H*D, hidden]; peft_target: the PEFT module
// name LoRA adapts it under ("q_proj"), empty for what LoRA does not adapt (biases, norms).
struct LayerParameter {
  std::string name;
  std::vector<std::int64_t> shape;
  std::string peft_target;
};

// A block of the layer: its module's name in transformers' layer ("self_attn", "mlp", "input_layernorm", ...) and
// its parameters, in named_parameters() order.
struct Block {
  enum class Kind { kTokenMixer, kMlp, kNorm } kind;
  std::string module;
  std::vector<LayerParameter> parameters;
  std::int64_t parameter_count() const;
};

// x + mixer(input_norm(x)), then h + mlp(post_attention_norm(h)): transformers' decoder layer of every supported
// architecture.
struct LayerSpec {
  std::int64_t index = 0;
  AttentionSpec attention;
  MlpSpec mlp;
  NormSpec input_norm, post_attention_norm;
  std::vector<Block> blocks;   // in transformers' named_parameters() order: self_attn, mlp, the two norms

  std::int64_t parameter_count() const;
  std::int64_t active_parameter_count() const;   // what one token computes with (routed: k of the E experts)
};

LayerSpec layer_spec(const ModelConfig& c, std::int64_t layer);
std::vector<LayerSpec> layer_specs(const ModelConfig& c);   // every layer's, in order

// The PEFT module names of the layer's adaptable matrices, in parameter order: what "all-linear" means for it.
std::vector<std::string> peft_targets(const LayerSpec& layer);

}  // namespace ulysses::arch
