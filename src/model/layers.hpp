// The per-token pieces of a Llama-family decoder: RMSNorm, the SwiGLU MLP and rotary position embeddings
// (RoPE). Each computes exactly what transformers 4.57 computes (LlamaRMSNorm, LlamaMLP,
// LlamaRotaryEmbedding + apply_rotary_pos_emb), including where it switches to fp32.
//
// Each module's forward is a function of its input and a struct of weight tensors (rms_norm, mlp): the
// module passes its own parameters, and code that holds the weights elsewhere (a buffer of gathered
// shards) calls the same function with views into that buffer.
//
// Shape letters (used in every model file): B batch, S global sequence length, P sequence-parallel degree
// (this rank holds S/P tokens), H query heads, Hkv key/value heads, D head dim, V vocabulary, I
// intermediate size.
#pragma once

#include <cstdint>
#include <vector>

#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include "arch/model_config.hpp"
#include "model/lora.hpp"

namespace ulysses::model {

using arch::ModelConfig;

// y = weight * (x / sqrt(mean(x^2) + eps)), the normalisation in fp32 and the product in x's dtype.
torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps);   // [..., dim], [dim]
// rms_norm for the matmuls it feeds: in the weight's dtype (an fp32 residual stream under bf16 weights — the
// bf16 model's --fp32-residual — becomes bf16 here; otherwise x, weight and y already share a dtype).
inline torch::Tensor rms_norm_for_matmul(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  return rms_norm(x, weight, eps).to(weight.scalar_type());
}

struct RMSNormImpl : torch::nn::Module {
  RMSNormImpl(std::int64_t dim, double eps);
  torch::Tensor forward(const torch::Tensor& x) { return rms_norm(x, weight, eps); }   // [..., dim] -> same

  torch::Tensor weight;   // [dim]
  double eps;
};
TORCH_MODULE(RMSNorm);

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
  explicit MlpImpl(const ModelConfig& c, const LoraOptions& lora = {});
  MlpWeights weights() const;   // its own parameters
  torch::Tensor forward(const torch::Tensor& x) { return mlp(x, weights()); }

  torch::nn::Linear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};

 private:
  double lora_scale_ = 0;
};
TORCH_MODULE(Mlp);

// The RoPE inverse frequencies [D/2], fp32 on the CPU, computed with the same fp32 operations as
// transformers' "default" and "llama3" rope initialisers.
torch::Tensor rope_inv_freq(const ModelConfig& c);

// cos and sin of position * inv_freq for every token, computed in fp32 and cast to `dtype` (as HF does).
struct RopeTables {
  torch::Tensor cos;   // [B, S/P, 1, D]
  torch::Tensor sin;   // [B, S/P, 1, D]
};
RopeTables rope_tables(const torch::Tensor& inv_freq, const torch::Tensor& position_ids, c10::ScalarType dtype);

// x * cos + rotate_half(x) * sin, rotate_half(x) = cat(-x[..., D/2:], x[..., :D/2]).
torch::Tensor apply_rope(const torch::Tensor& x, const RopeTables& rope);   // [B, S/P, h, D] -> same

}  // namespace ulysses::model
