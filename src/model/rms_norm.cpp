#include "model/rms_norm.hpp"

#include <algorithm>

#include <torch/autograd.h>

namespace ulysses::model {

RMSNormImpl::RMSNormImpl(std::int64_t dim, double eps_) : eps(eps_) {
  weight = register_parameter("weight", torch::ones({dim}));
}

namespace {

// Rows of [rows, dim] a norm works on at a time: at most 64 chunks, each of at least 2^16 elements, so its fp32
// intermediates are a 64th of the input's (a layer input of 655K tokens × 4096: 42M elements a chunk) while a long
// input costs no more than 64 chunks' kernel launches.
std::int64_t norm_chunk_rows(std::int64_t rows, std::int64_t dim) {
  return std::max((rows + 63) / 64, ((std::int64_t{1} << 16) + dim - 1) / dim);   // the second is at least 1
}

// 1 / sqrt(mean(x^2) + eps) of rows x32 [n, dim] fp32 -> [n, 1]
torch::Tensor inverse_rms(const torch::Tensor& x32, double eps) {
  return at::rsqrt(x32.pow(2).mean(-1, /*keepdim=*/true) + eps);
}

// The norm as one autograd node that saves only x and the weight (the composed ops would save x in fp32, x·inv_rms and
// the product's inputs: whole tensors of the input's size, per call), computed over chunks of rows in forward and
// backward, so its fp32 intermediates are one chunk's. The arithmetic is the composed ops' (their forward, and their
// backward formulas in autograd's order): the output equals theirs bit for bit, and so do x's gradients; the weight's
// gradient sums the chunks' fp32 sums (one chunk: autograd's one reduction).
struct FusedRmsNorm : torch::autograd::Function<FusedRmsNorm> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& weight, double eps) {
    ctx->save_for_backward({x, weight});
    ctx->saved_data["eps"] = eps;
    const std::int64_t dim = x.size(-1);
    const torch::Tensor rows = x.reshape({-1, dim});   // [n, dim]
    const std::int64_t step = norm_chunk_rows(rows.size(0), dim);
    torch::Tensor y = torch::empty(rows.sizes(), x.options().dtype(c10::promoteTypes(weight.scalar_type(),
                                                                                      x.scalar_type())));
    for (std::int64_t r = 0; r < rows.size(0); r += step) {
      const std::int64_t n = std::min(step, rows.size(0) - r);
      const torch::Tensor x32 = rows.narrow(0, r, n).to(torch::kFloat);   // [n, dim]
      y.narrow(0, r, n).copy_(weight * (x32 * inverse_rms(x32, eps)).to(x.scalar_type()));
    }
    return y.view(x.sizes());
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &weight = saved[1];
    const double eps = ctx->saved_data["eps"].toDouble();
    const std::int64_t dim = x.size(-1);
    const torch::Tensor rows = x.reshape({-1, dim}), dy = grad_out[0].reshape({-1, dim});   // [n, dim]
    const std::int64_t step = norm_chunk_rows(rows.size(0), dim);
    const bool want_x = ctx->needs_input_grad(0), want_weight = ctx->needs_input_grad(1);
    torch::Tensor dx = want_x ? torch::empty_like(rows) : torch::Tensor();            // [n, dim], x's dtype
    torch::Tensor dweight = want_weight ? torch::zeros({dim}, x.options().dtype(torch::kFloat)) : torch::Tensor();
    for (std::int64_t r = 0; r < rows.size(0); r += step) {
      const std::int64_t n = std::min(step, rows.size(0) - r);
      const torch::Tensor x32 = rows.narrow(0, r, n).to(torch::kFloat), g = dy.narrow(0, r, n);   // [n, dim]
      const torch::Tensor inv = inverse_rms(x32, eps);                                           // [n, 1]
      if (want_weight) dweight += (g * (x32 * inv).to(x.scalar_type())).sum(0, false, torch::kFloat);
      if (!want_x) continue;
      const torch::Tensor g32 = (g * weight).to(x.scalar_type()).to(torch::kFloat);   // d(x·inv) [n, dim]
      const torch::Tensor d_inv = (g32 * x32).sum(-1, /*keepdim=*/true);                // [n, 1]
      const torch::Tensor d_mean = -0.5 * d_inv * inv.pow(3);                           // rsqrt's backward [n, 1]
      const torch::Tensor d_square = d_mean.expand({n, dim}) / dim;                     // mean's
      dx.narrow(0, r, n).copy_(g32 * inv + d_square * (2.0 * x32.pow(1.0)));            // x32's two paths, summed
    }
    return {want_x ? dx.view(x.sizes()) : torch::Tensor(), want_weight ? dweight.to(weight.scalar_type()) : dweight,
            torch::Tensor()};
  }
};

}  // namespace

torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  return FusedRmsNorm::apply(x, weight, eps);
}

}  // namespace ulysses::model
