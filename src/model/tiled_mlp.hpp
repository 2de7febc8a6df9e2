// TiledMLP (ALST): the token-local half of a decoder layer, h + mlp(rms_norm(h)), over tiles of tokens, so the MLP's
// [tokens, intermediate] gate/up/activation tensors exist for one tile at a time, in forward and in backward, instead
// of for all S/P tokens of the rank. The tiles are chunks of rows of the recompute primitive (recompute.hpp).
//
//   forward (no graph kept): per tile t of rows of h [N, hidden]: y_t = h_t + down(silu(gate n_t) * up n_t),
//     n_t = rms_norm(h_t)                                                    saved: h and the weights only
//   backward: per tile, the same forward with grad enabled (inside the same autocast scope); autograd gives
//     dh_t (written into its rows) and the weight gradients (summed over tiles).
//
// The routed MLP (moe.hpp) the same way: each tile routes its own tokens, runs the experts they picked on them and
// returns, beside its rows of the output, its routing statistics, which the tiles add up (what the load-balancing
// loss is formed from; their gradient reaches every tile's router in backward). So the routed intermediate — each
// expert's [tokens routed to it, I] — exists for one tile's tokens at a time. A tile of n tokens routes n·k picks,
// and one expert may get all n of them (the bound the planner counts: plan/memory_model.cpp).
//
// Exact: each tile runs the plain path's operations on its rows; the weight gradients are sums in another
// order (≤ 1e-6 relative in fp32, tested). No collective inside: a rank never waits on another here.
#pragma once

#include <cstdint>

#include <torch/types.h>

#include "model/mlp.hpp"
#include "model/moe.hpp"
#include "model/rms_norm.hpp"
#include "model/precision.hpp"

namespace ulysses::model {

// h [N, hidden] -> h + mlp(rms_norm(h, norm_weight, eps), w), tile_tokens rows at a time.
torch::Tensor tiled_mlp_block(const torch::Tensor& h, const torch::Tensor& norm_weight, double eps,
                              const MlpWeights& w, std::int64_t tile_tokens, Precision precision);

// h [N, hidden] -> {h + moe(rms_norm(h)) [N, hidden], the routing statistics' probability_sum [E] and selections [E]}
// over the tokens where real [N] (undefined: all), tile_tokens rows at a time.
torch::autograd::variable_list tiled_moe_block(const torch::Tensor& h, const torch::Tensor& norm_weight, double eps,
                                               const MoeWeights& w, const arch::MlpSpec& m, const torch::Tensor& real,
                                               bool router_gradient, std::int64_t tile_tokens, Precision precision);

}  // namespace ulysses::model
