// Gradients of the global mean loss, from per-rank sums.
//
// Each rank back-propagates the SUM of its token losses (over all micro-batches of a step), so after the
// Ulysses all-to-all backward every rank holds the gradient of its share of Σ losses. Summing over the
// grad group (SP × DP) and dividing by the global count of valid labels gives exactly the gradient of
// loss = Σ losses / count — the same at any SP and DP degree. Then clip by the global norm, identical on
// every rank since every rank now holds the same gradient.
#pragma once

#include <cstdint>
#include <vector>

#include <torch/types.h>

#include "comm/communicator.hpp"

namespace ulysses::train {

// Sums grads over `grad_group` and divides by `global_count` (≥ 1). Gradients travel in flat buckets of
// about kGradBucketElements (one all-reduce each; a larger gradient goes alone), so the extra memory is a
// bucket, not a second copy of every gradient. Parameters without a gradient get zeros first, so every
// rank sends the same layout. reduce_dtype: the buckets' dtype on the wire (float32, or bfloat16: --reduce-dtype).
constexpr std::int64_t kGradBucketElements = std::int64_t{64} << 20;   // 256 MiB of float32
void reduce_gradients(const std::vector<torch::Tensor>& params, comm::Communicator& grad_group, double global_count,
                      c10::ScalarType reduce_dtype = c10::kFloat, std::int64_t bucket_elements = kGradBucketElements);

// torch.nn.utils.clip_grad_norm_ semantics (coefficient max_norm / (norm + 1e-6), only when < 1). Returns
// the norm before clipping. max_norm <= 0: no clipping, norm still returned.
double clip_grad_norm(const std::vector<torch::Tensor>& params, double max_norm);

}  // namespace ulysses::train
