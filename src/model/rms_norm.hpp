// RMSNorm exactly as transformers 4.57 computes it (LlamaRMSNorm: the normalisation in fp32, the product in the
// input's dtype), as one autograd node over chunks of rows (rms_norm.cpp). Its forward is a function of its input and
// weight: the module passes its own parameter, and code that holds the weights elsewhere (a buffer of gathered shards)
// calls the same function with a view into that buffer.
//
// Shape letters (used in every model file): B batch, S global sequence length, P sequence-parallel degree
// (this rank holds S/P tokens), H query heads, Hkv key/value heads, D head dim, V vocabulary, I
// intermediate size.
#pragma once

#include <cstdint>

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "arch/layer_spec.hpp"

namespace ulysses::model {

// y = weight * (x / sqrt(mean(x^2) + eps)), the normalisation in fp32 and the product in x's dtype.
torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps);   // [..., dim], [dim]
// rms_norm for the matmuls it feeds: in the weight's dtype (an fp32 residual stream under bf16 weights — the
// bf16 model's --fp32-residual — becomes bf16 here; otherwise x, weight and y already share a dtype).
inline torch::Tensor rms_norm_for_matmul(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  return rms_norm(x, weight, eps).to(weight.scalar_type());
}

struct RMSNormImpl : torch::nn::Module {
  RMSNormImpl(std::int64_t dim, double eps);
  explicit RMSNormImpl(const arch::NormSpec& n) : RMSNormImpl(n.dim, n.eps) {}
  torch::Tensor forward(const torch::Tensor& x) { return rms_norm(x, weight, eps); }   // [..., dim] -> same

  torch::Tensor weight;   // [dim]
  double eps;
};
TORCH_MODULE(RMSNorm);

}  // namespace ulysses::model
