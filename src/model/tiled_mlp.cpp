#include "model/tiled_mlp.hpp"

#include "core/error.hpp"
#include "model/recompute.hpp"

namespace ulysses::model {

torch::Tensor tiled_mlp_block(const torch::Tensor& h, const torch::Tensor& norm_weight, double eps,
                              const MlpWeights& w, std::int64_t tile_tokens, Precision precision) {
  ULY_CHECK(h.dim() == 2 && tile_tokens > 0, "tiled MLP: h [N, hidden], tile > 0 (got {} dims, {})", h.dim(),
            tile_tokens);
  // the plain path's block on one tile: h_t [n, hidden] -> [n, hidden]; w: norm, gate, up, down
  const ChunkForward block = [eps](const Chunk&, const torch::Tensor& ht, const std::vector<torch::Tensor>& w) {
    return torch::autograd::variable_list{ht + mlp(rms_norm_for_matmul(ht, w[0], eps), {w[1], w[2], w[3]})};
  };
  Recompute tiles;
  tiles.precision = precision;
  tiles.chunking.rows = tile_tokens;
  return recomputed(block, h, {norm_weight, w.gate, w.up, w.down}, tiles)[0];   // [N, hidden]
}

}  // namespace ulysses::model
