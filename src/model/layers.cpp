#include "model/layers.hpp"

#include <algorithm>
#include <numbers>

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

MlpImpl::MlpImpl(const ModelConfig& c, const LoraOptions& lora) : lora_scale_(lora.enabled() ? lora.scale() : 0) {
  auto linear = [](std::int64_t in, std::int64_t out) { return torch::nn::LinearOptions(in, out).bias(false); };
  gate_proj = register_module("gate_proj", torch::nn::Linear(linear(c.hidden_size, c.intermediate_size)));
  up_proj = register_module("up_proj", torch::nn::Linear(linear(c.hidden_size, c.intermediate_size)));
  down_proj = register_module("down_proj", torch::nn::Linear(linear(c.intermediate_size, c.hidden_size)));
  add_adapter(gate_proj, "gate_proj", lora);
  add_adapter(up_proj, "up_proj", lora);
  add_adapter(down_proj, "down_proj", lora);
}

MlpWeights MlpImpl::weights() const {
  return {gate_proj->weight,    up_proj->weight,    down_proj->weight,
          adapter_of(gate_proj), adapter_of(up_proj), adapter_of(down_proj), lora_scale_};
}

std::vector<torch::Tensor*> tensor_slots(MlpWeights& w) {
  return {&w.gate, &w.up, &w.down, &w.gate_lora.a, &w.gate_lora.b, &w.up_lora.a, &w.up_lora.b, &w.down_lora.a,
          &w.down_lora.b};
}

torch::Tensor mlp(const torch::Tensor& x, const MlpWeights& w) {
  const torch::Tensor none;
  auto gated = at::silu(project(x, w.gate, none, w.gate_lora, w.lora_scale)) *
               project(x, w.up, none, w.up_lora, w.lora_scale);              // [B, S/P, I]
  return project(gated, w.down, none, w.down_lora, w.lora_scale);           // [B, S/P, hidden]
}

namespace {

// Llama 3.1: wavelengths above original_len / low_freq_factor are divided by `factor`, those below
// original_len / high_freq_factor kept, those between blended linearly in original_len / wavelength.
torch::Tensor llama3_scaled(const torch::Tensor& inv_freq, const arch::Llama3RopeScaling& s) {
  const double low_freq_wavelen = static_cast<double>(s.original_max_position_embeddings) / s.low_freq_factor;
  const double high_freq_wavelen = static_cast<double>(s.original_max_position_embeddings) / s.high_freq_factor;
  auto wavelen = inv_freq.reciprocal() * (2 * std::numbers::pi);                          // [D/2]
  auto scaled = at::where(wavelen > low_freq_wavelen, inv_freq / s.factor, inv_freq);     // [D/2]
  auto smooth = (wavelen.reciprocal() * s.original_max_position_embeddings - s.low_freq_factor) /
                (s.high_freq_factor - s.low_freq_factor);                                 // [D/2]
  auto smoothed = (1 - smooth) * scaled / s.factor + smooth * scaled;                     // [D/2]
  auto medium = (wavelen >= high_freq_wavelen).logical_and(wavelen <= low_freq_wavelen);  // [D/2]
  return at::where(medium, smoothed, scaled);
}

torch::Tensor rotate_half(const torch::Tensor& x) {   // [..., D] -> [..., D]
  const auto half = x.size(-1) / 2;
  return at::cat({-x.slice(-1, half), x.slice(-1, 0, half)}, -1);
}

}  // namespace

torch::Tensor rope_inv_freq(const ModelConfig& c) {
  auto exponent = at::arange(0, c.head_dim, 2, torch::kLong).to(torch::kFloat) / c.head_dim;   // [D/2]
  auto inv_freq = at::pow(c.rope_theta, exponent).reciprocal();                                // [D/2]
  return c.llama3_rope ? llama3_scaled(inv_freq, *c.llama3_rope) : inv_freq;
}

RopeTables rope_tables(const torch::Tensor& inv_freq, const torch::Tensor& position_ids, c10::ScalarType dtype) {
  auto freqs = position_ids.to(torch::kFloat).unsqueeze(-1) * inv_freq.to(position_ids.device());   // [B, S/P, D/2]
  auto angles = at::cat({freqs, freqs}, -1).unsqueeze(2);                                          // [B, S/P, 1, D]
  return {angles.cos().to(dtype), angles.sin().to(dtype)};
}

torch::Tensor apply_rope(const torch::Tensor& x, const RopeTables& rope) {
  return x * rope.cos + rotate_half(x) * rope.sin;   // [B, S/P, h, D] * [B, S/P, 1, D]
}

}  // namespace ulysses::model
