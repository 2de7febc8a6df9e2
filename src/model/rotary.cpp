#include "model/rotary.hpp"

#include <numbers>

#include "core/error.hpp"

namespace ulysses::model {
namespace {

// theta^(2i/D) for i < D/2: the default's denominators, [D/2] fp32 (modeling_rope_utils: base ** (arange / dim))
torch::Tensor base_powers(const arch::RopeSpec& rope) {
  const std::int64_t dim = rope.rotary_dim;
  const auto exponent = at::arange(0, dim, 2, torch::kLong).to(torch::kFloat) / dim;   // [D/2]
  return at::pow(rope.theta, exponent);
}

// Llama 3.1: wavelengths above original_len / low_freq_factor are divided by `factor`, those below
// original_len / high_freq_factor kept, those between blended linearly in original_len / wavelength.
torch::Tensor llama3_scaled(const torch::Tensor& inv_freq, const arch::RopeSpec& s) {
  const double original = static_cast<double>(s.original_context);
  const double low_freq_wavelen = original / s.low_freq_factor, high_freq_wavelen = original / s.high_freq_factor;
  auto wavelen = inv_freq.reciprocal() * (2 * std::numbers::pi);                          // [D/2]
  auto scaled = at::where(wavelen > low_freq_wavelen, inv_freq / s.factor, inv_freq);     // [D/2]
  auto smooth = (wavelen.reciprocal() * original - s.low_freq_factor) /
                (s.high_freq_factor - s.low_freq_factor);                                 // [D/2]
  auto smoothed = (1 - smooth) * scaled / s.factor + smooth * scaled;                     // [D/2]
  auto medium = (wavelen >= high_freq_wavelen).logical_and(wavelen <= low_freq_wavelen);  // [D/2]
  return at::where(medium, smoothed, scaled);
}

// YaRN: the extrapolated frequencies (the default's) above the ramp, the interpolated ones (÷ factor) below it.
torch::Tensor yarn(const torch::Tensor& pos_freqs, const arch::RopeSpec& s) {
  const auto extrapolation = pos_freqs.reciprocal();                                       // [D/2]
  const auto interpolation = (pos_freqs * s.factor).reciprocal();                          // [D/2]
  const auto ramp = at::clamp((at::arange(s.rotary_dim / 2, torch::kFloat) - s.ramp_low) /
                                  (s.ramp_high - s.ramp_low), 0, 1);                       // [D/2]
  const auto extrapolation_factor = 1 - ramp;                                              // [D/2]
  return interpolation * (1 - extrapolation_factor) + extrapolation * extrapolation_factor;
}

// LongRoPE: 1 / (ext · theta^(2i/D))
torch::Tensor longrope(const torch::Tensor& pos_freqs, const std::vector<double>& ext) {
  const auto factors = at::tensor(ext, torch::kDouble).to(torch::kFloat);                  // [D/2]
  return (factors * pos_freqs).reciprocal();
}

torch::Tensor rotate_half(const torch::Tensor& x) {   // [..., D] -> [..., D]
  const auto half = x.size(-1) / 2;
  return at::cat({-x.slice(-1, half), x.slice(-1, 0, half)}, -1);
}

torch::Tensor tables_of(const torch::Tensor& inv_freq, const torch::Tensor& position_ids) {   // -> [B, S/P, 1, D]
  auto freqs = position_ids.to(torch::kFloat).unsqueeze(-1) * inv_freq.to(position_ids.device());   // [B, S/P, D/2]
  return at::cat({freqs, freqs}, -1).unsqueeze(2);
}

}  // namespace

RopeFrequencies rope_frequencies(const arch::RopeSpec& rope) {
  const auto pos_freqs = base_powers(rope);   // [D/2]
  RopeFrequencies f;
  f.attention_factor = rope.attention_factor;
  switch (rope.kind) {
    case arch::RopeKind::kDefault: f.inv_freq = pos_freqs.reciprocal(); break;
    case arch::RopeKind::kLinear: f.inv_freq = pos_freqs.reciprocal() / rope.factor; break;
    case arch::RopeKind::kLlama3: f.inv_freq = llama3_scaled(pos_freqs.reciprocal(), rope); break;
    case arch::RopeKind::kYarn: f.inv_freq = yarn(pos_freqs, rope); break;
    case arch::RopeKind::kLongrope:
      f.inv_freq = longrope(pos_freqs, rope.short_factor);
      f.long_inv_freq = longrope(pos_freqs, rope.long_factor);
      f.long_after = rope.original_context;
      break;
  }
  return f;
}

RopeTables rope_tables(const RopeFrequencies& rope, const torch::Tensor& position_ids, const torch::Tensor& doc_lengths,
                       c10::ScalarType dtype) {
  auto angles = tables_of(rope.inv_freq, position_ids);   // [B, S/P, 1, D]
  if (rope.long_inv_freq.defined()) {
    ULY_CHECK(doc_lengths.defined(), "longrope's tables need each token's document length");
    const auto is_long = (doc_lengths > rope.long_after).unsqueeze(-1).unsqueeze(-1);   // [B, S/P, 1, 1]
    angles = at::where(is_long, tables_of(rope.long_inv_freq, position_ids), angles);
  }
  auto cos = angles.cos(), sin = angles.sin();
  if (rope.attention_factor != 1.0) cos = cos * rope.attention_factor, sin = sin * rope.attention_factor;
  return {cos.to(dtype), sin.to(dtype)};
}

torch::Tensor local_document_lengths(const torch::Tensor& doc_ids, const SequenceParallel& sp) {
  const std::int64_t B = doc_ids.size(0), S = doc_ids.size(1);
  std::vector<torch::Tensor> rows;
  for (std::int64_t b = 0; b < B; ++b) {
    const torch::Tensor counts = std::get<2>(at::unique_consecutive(doc_ids[b], /*return_inverse=*/false,
                                                                    /*return_counts=*/true));   // [documents]
    rows.push_back(at::repeat_interleave(counts, counts));   // [S]: each token's document length
  }
  const auto lengths = at::stack(rows);                      // [B, S]
  std::vector<torch::Tensor> mine;
  for (const TokenRange& r : sp.slice(S, "longrope").ranges) mine.push_back(lengths.narrow(1, r.begin, r.size()));
  return at::cat(mine, 1);                                   // [B, S/P]
}

torch::Tensor apply_rope(const torch::Tensor& x, const RopeTables& rope) {
  return x * rope.cos + rotate_half(x) * rope.sin;   // [B, S/P, h, D] * [B, S/P, 1, D]
}

}  // namespace ulysses::model
