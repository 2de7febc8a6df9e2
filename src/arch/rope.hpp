// RoPE from config.json: rope_theta, rope_scaling and the context lengths, read and checked as transformers 4.57's
// modeling_rope_utils reads them (ROPE_INIT_FUNCTIONS), and resolved into the scalars the model's frequencies are
// computed from (model/rotary.cpp tabulates them with the same fp32 tensor operations as transformers, so that its
// inverse frequencies are transformers' bit for bit: the pow of a float tensor is SLEEF's in both, which a
// torch-free std::pow would not reproduce to the last bit).
//
// Kinds (rope_scaling's "rope_type", or its older "type"):
//   default   inv_freq[i] = 1 / theta^(2i/D)
//   linear    the default divided by factor
//   llama3    Llama 3.1: long wavelengths divided by factor, short ones kept, a smooth blend between
//   yarn      interpolated (÷ factor) below the correction range, extrapolated above it, a linear ramp between; cos
//             and sin multiplied by the attention factor (so the logits by its square)
//   longrope  Phi-3: 1 / (ext[i] · theta^(2i/D)), ext the short factors, or the long ones for a document longer than
//             the original context; cos and sin multiplied by the attention factor
// "dynamic" (NTK at inference time: frequencies that change with each forward's length) is refused with a hint,
// as is any key a kind does not take: nothing in rope_scaling is silently ignored.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ulysses::arch {

enum class RopeKind { kDefault, kLinear, kLlama3, kYarn, kLongrope };
const char* rope_kind_name(RopeKind kind);   // config.json's rope_type: "default", "yarn", ...

// config.json's rope_scaling, each key as given (nullopt: absent or null, and transformers' default applies).
struct RopeScaling {
  RopeKind kind = RopeKind::kDefault;
  std::optional<double> factor;                                   // linear, llama3, yarn: required; longrope
  std::optional<double> low_freq_factor, high_freq_factor;        // llama3
  std::optional<std::int64_t> original_max_position_embeddings;   // llama3: required; yarn; longrope
  std::optional<double> attention_factor;                         // yarn, longrope
  std::optional<double> beta_fast, beta_slow, mscale, mscale_all_dim;   // yarn
  std::optional<bool> truncate;                                   // yarn (true when absent)
  std::vector<double> short_factor, long_factor;                  // longrope: D/2 each
};

// Everything of config.json that positions depend on.
struct RopeConfig {
  double theta = 10000.0;                                         // rope_theta
  std::optional<RopeScaling> scaling;                             // rope_scaling; nullopt: none, or "default"
  std::optional<std::int64_t> max_position_embeddings;
  std::optional<std::int64_t> original_max_position_embeddings;   // the top-level key (Phi-3's longrope reads it)
};

// Reads and checks them from a config.json object; BadInput naming `file` and the key. head_dim: D (longrope's
// factors hold D/2 each).
RopeConfig read_rope_config(const nlohmann::ordered_json& config, const std::string& file, std::int64_t head_dim);

// What the model computes a layer's RoPE from, every default resolved as transformers resolves it.
struct RopeSpec {
  RopeKind kind = RopeKind::kDefault;
  double theta = 10000.0;
  std::int64_t rotary_dim = 0;    // of each head's D: all of it (partial rotary is refused for today's architectures)
  double factor = 1.0;            // linear, llama3, yarn: the frequencies' divisor
  double low_freq_factor = 0, high_freq_factor = 0;   // llama3
  std::int64_t original_context = 0;   // llama3's and yarn's original_max_position_embeddings; longrope: a document
                                       // longer than this takes the long factors
  double ramp_low = 0, ramp_high = 0;  // yarn: the correction range, in frequency index (the ramp's ends)
  std::vector<double> short_factor, long_factor;   // longrope, [rotary_dim / 2] each
  double attention_factor = 1.0;       // multiplies cos and sin (yarn, longrope)
};
RopeSpec rope_spec(const RopeConfig& rope, std::int64_t head_dim);

// --rope-scaling JSON and --rope-theta X (ulysses-train, ulysses-pack --model-config, ulysses-plan): context extension
// at train time. config.json's rope_scaling is replaced by the given object ("null": none) and rope_theta by X before
// the config is read, so that the checkpoint's config.json, and an export's, carry what the trainer computed.
struct RopeOverride {
  std::string scaling;    // JSON text of the rope_scaling object; empty: the config's own
  double theta = 0;       // 0: the config's own
  bool empty() const { return scaling.empty() && theta == 0; }
  std::string flags() const;      // as given on a command line: "--rope-scaling '{...}' --rope-theta 1e6"
};
// `config` with the override applied. BadInput naming the flag when its JSON does not parse, is not an object (or
// null), or --rope-theta is neither 0 nor above 1; what the fields hold is read_rope_config's to check.
nlohmann::ordered_json apply_rope_override(nlohmann::ordered_json config, const RopeOverride& override);

// One line for logs and `ulysses-ckpt inspect`: "yarn ×4 over 32768, attention factor 1.139, theta 1000000".
std::string rope_summary(const RopeSpec& rope);

}  // namespace ulysses::arch
