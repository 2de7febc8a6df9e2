#include "model/tiled_loss.hpp"

#include <algorithm>

#include <ATen/core/Reduction.h>
#include <torch/autograd.h>

#include "core/error.hpp"
#include "io/shard_format.hpp"

namespace ulysses::model {
namespace {

// The plain path's loss of one chunk: h_c [n, hidden], w [V, hidden], labels_c [n] -> [] fp32.
torch::Tensor chunk_loss(const torch::Tensor& h, const torch::Tensor& w, const torch::Tensor& labels,
                         Precision precision) {
  const AutocastScope autocast(precision, h.device());
  auto logits = at::linear(h, w).to(torch::kFloat);   // [n, V] fp32
  return at::cross_entropy_loss(logits, labels, /*weight=*/{}, at::Reduction::Sum, shard::kIgnoreIndex);
}

struct TiledCrossEntropy : torch::autograd::Function<TiledCrossEntropy> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& h, const torch::Tensor& w,
                               const torch::Tensor& labels, std::int64_t chunk, std::int64_t precision) {
    ctx->save_for_backward({h, w, labels});
    ctx->saved_data["chunk"] = chunk;
    ctx->saved_data["precision"] = precision;
    torch::Tensor total = torch::zeros({}, h.options().dtype(torch::kFloat));   // []
    for (std::int64_t b = 0; b < h.size(0); b += chunk) {
      const std::int64_t n = std::min(chunk, h.size(0) - b);
      total += chunk_loss(h.narrow(0, b, n), w, labels.narrow(0, b, n), static_cast<Precision>(precision));
    }
    return total;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &h = saved[0], &w = saved[1], &labels = saved[2];
    const std::int64_t chunk = ctx->saved_data["chunk"].toInt();
    const auto precision = static_cast<Precision>(ctx->saved_data["precision"].toInt());
    torch::Tensor dh = torch::empty_like(h);                   // [N, hidden]
    const torch::Tensor wc = w.detach().requires_grad_(true);   // its .grad sums the chunks' dW in place
    for (std::int64_t b = 0; b < h.size(0); b += chunk) {
      const std::int64_t n = std::min(chunk, h.size(0) - b);
      const torch::Tensor hc = h.narrow(0, b, n).detach().requires_grad_(true);   // [n, hidden]
      {
        const torch::AutoGradMode grad_mode(true);
        const torch::Tensor loss = chunk_loss(hc, wc, labels.narrow(0, b, n), precision);
        torch::autograd::backward({loss}, {grad_out[0]}, /*retain_graph=*/std::nullopt, /*create_graph=*/false,
                                  /*inputs=*/{hc, wc});
      }
      dh.narrow(0, b, n).copy_(hc.grad());
    }
    return {dh, wc.grad(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor tiled_cross_entropy_sum(const torch::Tensor& hidden, const torch::Tensor& head_weight,
                                      const torch::Tensor& labels, std::int64_t chunk_tokens, Precision precision) {
  ULY_CHECK(hidden.dim() == 2 && labels.dim() == 1 && labels.size(0) == hidden.size(0) && chunk_tokens > 0,
            "tiled loss: hidden [N, hidden], labels [N], chunk > 0 (got {}, {}, {})", hidden.dim(), labels.dim(),
            chunk_tokens);
  return TiledCrossEntropy::apply(hidden, head_weight, labels, chunk_tokens, static_cast<std::int64_t>(precision));
}

}  // namespace ulysses::model
