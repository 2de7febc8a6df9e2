#include "model/rotary.hpp"

#include <numbers>

namespace ulysses::model {
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

torch::Tensor rope_inv_freq(const arch::RopeSpec& rope) {
  const std::int64_t dim = rope.rotary_dim;
  auto exponent = at::arange(0, dim, 2, torch::kLong).to(torch::kFloat) / dim;   // [D/2]
  auto inv_freq = at::pow(rope.theta, exponent).reciprocal();                    // [D/2]
  switch (rope.kind) {
    case arch::RopeKind::kDefault: return inv_freq;
    case arch::RopeKind::kLlama3: return llama3_scaled(inv_freq, *rope.llama3);
  }
  return inv_freq;
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
