#include "model/layers.hpp"

#include <numbers>

namespace ulysses::model {

RMSNormImpl::RMSNormImpl(std::int64_t dim, double eps_) : eps(eps_) {
  weight = register_parameter("weight", torch::ones({dim}));
}

torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  auto x32 = x.to(torch::kFloat);                                        // [..., dim] fp32
  auto inv_rms = at::rsqrt(x32.pow(2).mean(-1, /*keepdim=*/true) + eps);  // [..., 1]
  return weight * (x32 * inv_rms).to(x.scalar_type());
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
