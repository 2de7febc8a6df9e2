#include "model/tiled_mlp.hpp"

#include "core/error.hpp"
#include "model/recompute.hpp"

namespace ulysses::model {
namespace {

// recomputed()'s weight list for a tile's block: the norm's weight, then the defined tensors of w's slots (the mask
// remembers which, for the block to put them back after the norm's).
template <class Weights>
std::vector<torch::Tensor> block_tensors(Weights w, const torch::Tensor& norm_weight, SlotMask& mask) {
  std::vector<torch::Tensor> ws = mask.take(tensor_slots(w));
  ws.insert(ws.begin(), norm_weight);
  return ws;
}

// Tiles of tile_tokens rows, recomputed one by one in backward.
Recompute over_tiles(std::int64_t tile_tokens, Precision precision) {
  Recompute tiles;
  tiles.precision = precision;
  tiles.chunking.rows = tile_tokens;
  return tiles;
}

}  // namespace

torch::Tensor tiled_mlp_block(const torch::Tensor& h, const torch::Tensor& norm_weight, double eps,
                              const MlpWeights& w, std::int64_t tile_tokens, Precision precision) {
  ULY_CHECK(h.dim() == 2 && tile_tokens > 0, "tiled MLP: h [N, hidden], tile > 0 (got {} dims, {})", h.dim(),
            tile_tokens);
  // the plain path's block on one tile: h_t [n, hidden] -> [n, hidden]; ws: norm, then the MLP's defined tensors
  SlotMask mask;
  const std::vector<torch::Tensor> ws = block_tensors(w, norm_weight, mask);
  const double scale = w.lora_scale;
  const ChunkForward block = [eps, mask, scale](const Chunk&, const torch::Tensor& ht,
                                                const std::vector<torch::Tensor>& ws) {
    MlpWeights mw;
    mw.lora_scale = scale;
    mask.put(tensor_slots(mw), ws, 1);
    return torch::autograd::variable_list{ht + mlp(rms_norm_for_matmul(ht, ws[0], eps), mw)};
  };
  return recomputed(block, h, ws, over_tiles(tile_tokens, precision))[0];   // [N, hidden]
}

torch::autograd::variable_list tiled_moe_block(const torch::Tensor& h, const torch::Tensor& norm_weight, double eps,
                                               const MoeWeights& w, const arch::MlpSpec& m, const torch::Tensor& real,
                                               bool router_gradient, std::int64_t tile_tokens, Precision precision) {
  ULY_CHECK(h.dim() == 2 && tile_tokens > 0, "tiled MoE: h [N, hidden], tile > 0 (got {} dims, {})", h.dim(),
            tile_tokens);
  SlotMask mask;
  const std::vector<torch::Tensor> ws = block_tensors(w, norm_weight, mask);
  const std::size_t experts = w.experts.size();
  // one tile: h_t [n, hidden] -> {[n, hidden], Σ probabilities [E], selections [E]}; ws: norm, then the defined tensors
  const ChunkForward block = [eps, mask, experts, m, real, router_gradient](const Chunk& c, const torch::Tensor& ht,
                                                                            const std::vector<torch::Tensor>& ws) {
    MoeWeights mw;
    mw.experts.resize(experts);
    mask.put(tensor_slots(mw), ws, 1);
    const torch::Tensor tile_real = real.defined() ? real.narrow(0, c.first, c.rows) : torch::Tensor();
    MoeOutput out = moe_mlp(rms_norm_for_matmul(ht, ws[0], eps), mw, m, tile_real, router_gradient);
    return torch::autograd::variable_list{ht + out.y, out.stats.probability_sum, out.stats.selections};
  };
  Recompute tiles = over_tiles(tile_tokens, precision);
  tiles.chunking.sum_trailing = true;   // the tiles' routing statistics add up
  return recomputed(block, h, ws, tiles);
}

}  // namespace ulysses::model
