// The MoE fields of config.json (see moe_config.hpp), with transformers 4.57's class defaults.
#include "arch/moe_config.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "arch/config_fields.hpp"

namespace ulysses::arch {
namespace {

using namespace config_fields;

// The class defaults of the fields a rule reads.
struct MoeDefaults {
  const char* experts_key;
  std::int64_t experts, top_k, expert_intermediate, shared_intermediate;
};

MoeDefaults defaults_of(MoeRule rule) {
  switch (rule) {
    case MoeRule::kMixtral: return {"num_local_experts", 8, 2, 0, 0};   // experts of intermediate_size
    case MoeRule::kQwen2Moe: return {"num_experts", 60, 4, 1408, 5632};
    case MoeRule::kQwen3Moe: return {"num_experts", 128, 8, 768, 0};
    case MoeRule::kDense: break;
  }
  return {"", 0, 0, 0, 0};
}

std::int64_t positive_int_or(const Json& j, const std::string& file, const char* key, std::int64_t fallback) {
  const Json* v = field(j, key);
  return v ? positive_int(*v, file, key) : fallback;
}

std::vector<std::int64_t> dense_layers(const Json& j, const std::string& file, std::int64_t layers) {
  std::vector<std::int64_t> out;
  const Json* v = field(j, "mlp_only_layers");
  if (!v) return out;
  if (!v->is_array()) bad_field(file, "mlp_only_layers", fmt::format("must be a list of layer indices (got {})", v->dump()));
  for (const Json& i : *v) {
    if (!i.is_number_integer() || i.get<std::int64_t>() < 0 || i.get<std::int64_t>() >= layers)
      bad_field(file, "mlp_only_layers", fmt::format("must hold layer indices in [0, {}) (got {})", layers, i.dump()));
    out.push_back(i.get<std::int64_t>());
  }
  return out;
}

}  // namespace

MoeConfig read_moe_config(const Json& j, const std::string& file, MoeRule rule, std::int64_t intermediate,
                          std::int64_t layers) {
  MoeConfig m;
  if (rule == MoeRule::kDense) return m;
  const MoeDefaults d = defaults_of(rule);
  const Json* experts = field(j, d.experts_key);
  // Qwen: 0 experts make every layer dense (transformers' `num_experts > 0` test)
  if (rule != MoeRule::kMixtral && experts && experts->is_number_integer() && experts->get<std::int64_t>() == 0)
    return m;
  m.experts = experts ? positive_int(*experts, file, d.experts_key, std::int64_t{1} << 16) : d.experts;
  m.top_k = positive_int_or(j, file, "num_experts_per_tok", d.top_k);
  if (m.top_k > m.experts)
    bad_field(file, "num_experts_per_tok", fmt::format("({}) must be at most {} ({})", m.top_k,
                                                        d.experts_key, m.experts));
  m.router_aux_loss_coef = number_or(j, file, "router_aux_loss_coef", 0.001);
  if (!(m.router_aux_loss_coef >= 0))
    bad_field(file, "router_aux_loss_coef", fmt::format("must be at least 0 (got {})", m.router_aux_loss_coef));
  m.router_loss = bool_or(j, file, "output_router_logits", false) && m.router_aux_loss_coef > 0;
  if (rule == MoeRule::kMixtral) {
    if (number_or(j, file, "router_jitter_noise", 0.0) != 0.0)
      bad_field(file, "router_jitter_noise", "must be 0 (random router noise is not supported: runs would not repeat)");
    m.expert_intermediate = intermediate;
    m.normalize_top_k = true;
    return m;
  }
  m.expert_intermediate = positive_int_or(j, file, "moe_intermediate_size", d.expert_intermediate);
  if (rule == MoeRule::kQwen2Moe)
    m.shared_intermediate = positive_int_or(j, file, "shared_expert_intermediate_size", d.shared_intermediate);
  m.normalize_top_k = bool_or(j, file, "norm_topk_prob", false);
  m.sparse_step = positive_int_or(j, file, "decoder_sparse_step", 1);
  m.dense_layers = dense_layers(j, file, layers);
  return m;
}

bool sparse_layer(const MoeConfig& moe, std::int64_t layer) {
  return moe.enabled() && (layer + 1) % moe.sparse_step == 0 &&
         std::find(moe.dense_layers.begin(), moe.dense_layers.end(), layer) == moe.dense_layers.end();
}

std::int64_t sparse_layer_count(const MoeConfig& moe, std::int64_t layers) {
  std::int64_t n = 0;
  for (std::int64_t i = 0; i < layers; ++i) n += sparse_layer(moe, i) ? 1 : 0;
  return n;
}

}  // namespace ulysses::arch
