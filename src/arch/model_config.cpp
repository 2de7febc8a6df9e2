#include "arch/model_config.hpp"

#include <algorithm>
#include <string>

#include <fmt/ranges.h>

#include "arch/config_fields.hpp"
#include "core/error.hpp"
#include "core/json_input.hpp"

namespace ulysses::arch {
namespace {

using json = nlohmann::ordered_json;

using namespace config_fields;
constexpr const char* kHint = kConfigHint;

// Upper bound on layers and heads, far above any published model (the largest: 126 layers, 128 heads); sizes are
// bounded by kMaxSize (2^24: vocabulary, hidden and intermediate sizes, windows), so that a config that declares 3e8
// layers is refused at once instead of allocating its parameter list.
constexpr std::int64_t kMaxCount = std::int64_t{1} << 12;

void read_architecture(const json& j, const std::string& file, ModelConfig& c) {
  const json* type = field(j, "model_type");
  if (!type) bad_field(file, "model_type", "is required but missing");
  if (!type->is_string()) bad_field(file, "model_type", fmt::format("must be a string (got {})", type->dump()));
  const std::string t = type->get<std::string>();
  c.rules = find_architecture(t);
  if (!c.rules) bad_field(file, "model_type", fmt::format("\"{}\" is not supported ({})", t, supported_model_types()));
  c.model_type = c.rules->model_type;
  c.architecture = c.rules->class_name;
  // A head other than the causal-LM one (e.g. ...ForSequenceClassification) has other weights.
  const json* archs = field(j, "architectures");
  if (archs && (!archs->is_array() || archs->empty() || (*archs)[0] != c.architecture))
    bad_field(file, "architectures", fmt::format("must be [\"{}\"] for model_type \"{}\" (got {})", c.architecture,
                                                 t, archs->dump()));
}

// H and Hkv. A null num_key_value_heads means H everywhere; an absent one means H only where the row
// says so (Mistral and Qwen default to another number, so we ask for it).
void read_heads(const json& j, const std::string& file, ModelConfig& c) {
  c.num_heads = required_int(j, file, "num_attention_heads", kMaxCount);
  if (!j.contains("num_key_value_heads") && !c.rules->kv_heads_default_to_heads)
    bad_field(file, "num_key_value_heads", "is required but missing");
  const json* kv = field(j, "num_key_value_heads");
  c.num_kv_heads = kv ? positive_int(*kv, file, "num_key_value_heads", kMaxCount) : c.num_heads;
  if (c.num_heads % c.num_kv_heads != 0)
    bad_field(file, "num_key_value_heads", fmt::format("({}) must divide num_attention_heads ({})",
                                                       c.num_kv_heads, c.num_heads));
}

void read_head_dim(const json& j, const std::string& file, ModelConfig& c) {
  const json* hd = field(j, "head_dim");
  if (hd && !(c.rules->head_dim == HeadDimRule::kOptionalZeroNull && *hd == 0)) {
    c.head_dim = positive_int(*hd, file, "head_dim", kMaxCount);
  } else if (c.rules->head_dim == HeadDimRule::kRequired) {
    bad_field(file, "head_dim", "is required but missing");
  } else {
    if (c.hidden_size % c.num_heads != 0)
      bad_field(file, "hidden_size", fmt::format("({}) must be divisible by num_attention_heads ({}) when "
                                                 "head_dim is not given", c.hidden_size, c.num_heads));
    c.head_dim = c.hidden_size / c.num_heads;
  }
  if (c.head_dim % 2 != 0) bad_field(file, "head_dim", fmt::format("({}) must be even for RoPE", c.head_dim));
}

void read_biases(const json& j, const std::string& file, ModelConfig& c) {
  switch (c.rules->bias) {
    case BiasRule::kAttentionBiasFlag: c.qkv_bias = c.o_bias = bool_or(j, file, "attention_bias", false); break;
    case BiasRule::kQkvAlways: c.qkv_bias = true; break;
    case BiasRule::kQkvBiasFlag: c.qkv_bias = bool_or(j, file, "qkv_bias", true); break;
    case BiasRule::kNoBias: break;
  }
  if (bool_or(j, file, "mlp_bias", false)) bad_field(file, "mlp_bias", "is true; MLP biases are not supported");
}

void read_attention_window(const json& j, const std::string& file, ModelConfig& c) {
  if (c.rules->window == WindowRule::kSlidingWindow || c.rules->window == WindowRule::kOptionalSlidingWindow) {
    if (c.rules->window == WindowRule::kSlidingWindow && !j.contains("sliding_window"))
      bad_field(file, "sliding_window", "is required (null for none) but missing");
    if (const json* w = field(j, "sliding_window")) c.sliding_window = positive_int(*w, file, "sliding_window", std::int64_t{1} << 40);
  } else if (bool_or(j, file, "use_sliding_window", false)) {
    bad_field(file, "use_sliding_window", "is true; sliding-window layers are not supported for this architecture");
  }
}

// Fields whose only supported value is the default: refuse anything else instead of ignoring it.
void check_unsupported(const json& j, const std::string& file) {
  const json* act = field(j, "hidden_act");
  if (act && *act != "silu") bad_field(file, "hidden_act", fmt::format("must be \"silu\" (got {})", act->dump()));
  if (number_or(j, file, "partial_rotary_factor", 1.0) != 1.0)
    bad_field(file, "partial_rotary_factor", "must be 1 (partial rotary embeddings are not supported)");
  if (number_or(j, file, "attention_dropout", 0.0) != 0.0)
    bad_field(file, "attention_dropout", "must be 0 (attention dropout is not supported)");
}

// Sizes each within bounds can still multiply past int64 in the parameter and byte counts downstream (2^24 hidden
// and intermediate, 2048 layers: ~2^62 parameters): the total is bounded too, counted in floating point.
void check_total_size(const ModelConfig& c, const std::string& file) {
  constexpr double kMaxParameters = 0x1p44;   // 17.6 trillion: 25× the largest published dense model
  const double h = static_cast<double>(c.hidden_size), attention = static_cast<double>(c.num_heads + 2 * c.num_kv_heads) *
                                                                     static_cast<double>(c.head_dim);
  const MoeConfig& m = c.moe;   // every layer counted sparse and dense: a bound
  const double mlp = static_cast<double>(c.intermediate_size + m.experts * m.expert_intermediate + m.shared_intermediate);
  const double layer = h * (attention + static_cast<double>(c.num_heads * c.head_dim)) + 3 * h * mlp;
  const double total = static_cast<double>(c.num_layers) * layer + 2 * h * static_cast<double>(c.vocab_size);
  if (total > kMaxParameters)
    throw BadInput(fmt::format("{}: the sizes declare about {:.3g} parameters, more than the {:.3g} this toolkit "
                               "accepts", file, total, kMaxParameters), kHint);
}

ModelConfig parse(const json& j, const std::string& file) {
  ModelConfig c;
  read_architecture(j, file, c);
  check_unsupported(j, file);
  c.vocab_size = required_int(j, file, "vocab_size");
  c.hidden_size = required_int(j, file, "hidden_size");
  c.intermediate_size = required_int(j, file, "intermediate_size");
  c.num_layers = required_int(j, file, "num_hidden_layers", kMaxCount);
  read_heads(j, file, c);
  read_head_dim(j, file, c);
  c.moe = read_moe_config(j, file, c.rules->moe, c.intermediate_size, c.num_layers);
  check_total_size(c, file);
  read_biases(j, file, c);
  read_attention_window(j, file, c);
  c.qk_norm = c.rules->qk_norm;
  c.rms_norm_eps = number_or(j, file, "rms_norm_eps", 1e-6);
  c.rope = read_rope_config(j, file, c.head_dim);
  c.tie_word_embeddings = bool_or(j, file, "tie_word_embeddings", false);
  c.initializer_range = number_or(j, file, "initializer_range", 0.02);
  if (const json* pad = field(j, "pad_token_id")) {
    if (!pad->is_number_integer() || pad->get<std::int64_t>() < 0 || pad->get<std::int64_t>() >= c.vocab_size)
      bad_field(file, "pad_token_id", fmt::format("must be a token id in [0, {}) (got {})", c.vocab_size, pad->dump()));
    c.pad_token_id = pad->get<std::int64_t>();
  }
  return c;
}

}  // namespace

ModelConfigFile read_model_config_file(const std::filesystem::path& config_json, const RopeOverride& rope) {
  const std::string file = config_json.string();
  std::error_code ec;
  if (!std::filesystem::exists(config_json, ec)) throw BadInput(fmt::format("cannot open model config {}", file), kHint);
  ModelConfigFile out{config_json, read_json_file<nlohmann::ordered_json>(config_json, kHint), {}};
  if (!out.json.is_object()) throw BadInput(fmt::format("{}: not a JSON object", file), kHint);
  if (!rope.empty()) out.json = apply_rope_override(std::move(out.json), rope);
  out.config = parse(out.json, rope.empty() ? file : fmt::format("{} (with {})", file, rope.flags()));
  return out;
}

ModelConfig read_model_config(const std::filesystem::path& config_json, const RopeOverride& rope) {
  return read_model_config_file(config_json, rope).config;
}

void check_heads_for_sp(const ModelConfig& c, std::int64_t sp, const std::string& source, std::int64_t ring) {
  const std::int64_t heads = c.num_heads, kv = c.num_kv_heads, u = ring > 1 ? sp / ring : sp;
  auto ok = [&](std::int64_t p) { return heads % p == 0 && (kv % p == 0 || p % kv == 0); };
  if (ok(u)) return;
  std::vector<std::string> valid;
  for (std::int64_t p = 1; p <= heads; ++p)
    if (ok(p)) valid.push_back(std::to_string(p));
  const std::string degree = ring > 1 ? fmt::format("the Ulysses degree ({} = --sp {} / --sp-ring {})", u, sp, ring)
                                      : fmt::format("--sp ({})", sp);
  std::string why = heads % u != 0 ? fmt::format("attention heads ({}) are not divisible by {}", heads, degree)
                                   : fmt::format("key/value heads ({}) and {} divide neither way", kv, degree);
  throw BadInput(fmt::format("{}: {}", source, why),
                 ring > 1 ? fmt::format("make --sp / --sp-ring one of {} (a larger --sp-ring)", fmt::join(valid, ", "))
                          : fmt::format("use --sp {}", fmt::join(valid, ", ")));
}

std::vector<std::int64_t> valid_head_groups(const ModelConfig& c, std::int64_t sp) {
  const std::int64_t heads = c.num_heads, kv = c.num_kv_heads;
  std::vector<std::int64_t> out;
  for (std::int64_t g = 1; g <= heads; ++g) {
    if (heads % g != 0 || (kv % g != 0 && g % kv != 0)) continue;
    const std::int64_t gh = heads / g, gkv = std::max<std::int64_t>(kv / g, 1);
    if (gh % sp == 0 && (gkv % sp == 0 || sp % gkv == 0)) out.push_back(g);
  }
  return out;
}

void check_head_groups(const ModelConfig& c, std::int64_t sp, std::int64_t groups) {
  const std::vector<std::int64_t> valid = valid_head_groups(c, sp);
  if (std::find(valid.begin(), valid.end(), groups) != valid.end()) return;
  throw BadInput(fmt::format("--attention-head-groups {}: {} attention heads and {} key/value heads do not form {} "
                             "groups, each of whole key/value heads or inside one, that split over --sp {}",
                             groups, c.num_heads, c.num_kv_heads, groups, sp),
                 fmt::format("use --attention-head-groups {} at --sp {}", fmt::join(valid, ", "), sp));
}

UlyssesHeads ulysses_heads(const ModelConfig& c, std::int64_t sp) {
  return {c.num_heads / sp, std::max(c.num_kv_heads, sp) / sp};
}

}  // namespace ulysses::arch
