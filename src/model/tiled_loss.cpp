#include "model/tiled_loss.hpp"

#include <ATen/core/Reduction.h>

#include "core/error.hpp"
#include "io/shard_format.hpp"
#include "model/recompute.hpp"

namespace ulysses::model {

torch::Tensor tiled_cross_entropy_sum(const torch::Tensor& hidden, const torch::Tensor& head_weight,
                                      const torch::Tensor& labels, std::int64_t chunk_tokens, Precision precision) {
  ULY_CHECK(hidden.dim() == 2 && labels.dim() == 1 && labels.size(0) == hidden.size(0) && chunk_tokens > 0,
            "tiled loss: hidden [N, hidden], labels [N], chunk > 0 (got {}, {}, {})", hidden.dim(), labels.dim(),
            chunk_tokens);
  // the plain path's loss of one chunk: h_c [n, hidden], w[0] the head [V, hidden] -> [] fp32
  const ChunkForward chunk_loss = [labels](const Chunk& c, const torch::Tensor& hc,
                                           const std::vector<torch::Tensor>& w) {
    const auto logits = at::linear(hc, w[0]).to(torch::kFloat);   // [n, V] fp32
    return torch::autograd::variable_list{at::cross_entropy_loss(
        logits, labels.narrow(0, c.first, c.rows), /*weight=*/{}, at::Reduction::Sum, shard::kIgnoreIndex)};
  };
  Recompute chunks;
  chunks.precision = precision;
  chunks.chunking = {chunk_tokens, /*sum_outputs=*/true};
  return recomputed(chunk_loss, hidden, {head_weight}, chunks)[0];   // []
}

}  // namespace ulysses::model
