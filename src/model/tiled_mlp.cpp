#include "model/tiled_mlp.hpp"

#include <algorithm>
#include <vector>

#include <torch/autograd.h>

#include "core/error.hpp"

namespace ulysses::model {
namespace {

// The plain path's block on one tile: h [n, hidden] -> [n, hidden].
torch::Tensor block(const torch::Tensor& h, const torch::Tensor& norm_weight, double eps, const MlpWeights& w,
                    Precision precision) {
  const AutocastScope autocast(precision, h.device());
  return h + mlp(rms_norm(h, norm_weight, eps), w);
}

struct TiledMlp : torch::autograd::Function<TiledMlp> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& h,
                               const torch::Tensor& norm_weight, const torch::Tensor& gate, const torch::Tensor& up,
                               const torch::Tensor& down, double eps, std::int64_t tile, std::int64_t precision) {
    ctx->save_for_backward({h, norm_weight, gate, up, down});
    ctx->saved_data["eps"] = eps;
    ctx->saved_data["tile"] = tile;
    ctx->saved_data["precision"] = precision;
    std::vector<torch::Tensor> out;
    for (std::int64_t b = 0; b < h.size(0); b += tile)
      out.push_back(block(h.narrow(0, b, std::min(tile, h.size(0) - b)), norm_weight, eps, {gate, up, down},
                          static_cast<Precision>(precision)));
    return at::cat(out);   // [N, hidden]
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& h = saved[0];
    const double eps = ctx->saved_data["eps"].toDouble();
    const std::int64_t tile = ctx->saved_data["tile"].toInt();
    const auto precision = static_cast<Precision>(ctx->saved_data["precision"].toInt());
    // norm, gate, up, down: leaves of each tile's graph, whose .grad sums the tiles' gradients in place
    std::vector<torch::Tensor> weights;
    for (std::size_t i = 1; i < saved.size(); ++i) weights.push_back(saved[i].detach().requires_grad_(true));
    torch::Tensor dh = torch::empty_like(h);   // [N, hidden]
    for (std::int64_t b = 0; b < h.size(0); b += tile) {
      const std::int64_t n = std::min(tile, h.size(0) - b);
      const torch::Tensor ht = h.narrow(0, b, n).detach().requires_grad_(true);   // [n, hidden]
      torch::autograd::variable_list inputs{ht};
      inputs.insert(inputs.end(), weights.begin(), weights.end());
      {
        const torch::AutoGradMode grad_mode(true);
        const torch::Tensor y = block(ht, weights[0], eps, {weights[1], weights[2], weights[3]}, precision);
        torch::autograd::backward({y}, {grad_out[0].narrow(0, b, n)}, /*retain_graph=*/std::nullopt,
                                  /*create_graph=*/false, inputs);
      }
      dh.narrow(0, b, n).copy_(ht.grad());
    }
    return {dh, weights[0].grad(), weights[1].grad(), weights[2].grad(), weights[3].grad(),
            torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor tiled_mlp_block(const torch::Tensor& h, const torch::Tensor& norm_weight, double eps,
                              const MlpWeights& w, std::int64_t tile_tokens, Precision precision) {
  ULY_CHECK(h.dim() == 2 && tile_tokens > 0, "tiled MLP: h [N, hidden], tile > 0 (got {} dims, {})", h.dim(),
            tile_tokens);
  return TiledMlp::apply(h, norm_weight, w.gate, w.up, w.down, eps, tile_tokens, static_cast<std::int64_t>(precision));
}

}  // namespace ulysses::model
