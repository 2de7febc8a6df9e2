// RoPE's parameters (see rope.hpp): each kind's keys as modeling_rope_utils' validation lists them, each default as
// its _compute_*_parameters applies it.
#include "arch/rope.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "arch/config_fields.hpp"
#include "core/error.hpp"
#include "core/json_input.hpp"

namespace ulysses::arch {
namespace {

using namespace config_fields;

struct KindRow {
  RopeKind kind;
  const char* name;
  std::set<std::string> keys;   // besides rope_type / type
};

const std::vector<KindRow>& kinds() {
  static const std::vector<KindRow> rows = {
      {RopeKind::kDefault, "default", {}},
      {RopeKind::kLinear, "linear", {"factor"}},
      {RopeKind::kLlama3, "llama3", {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}},
      {RopeKind::kYarn, "yarn", {"factor", "attention_factor", "beta_fast", "beta_slow", "mscale", "mscale_all_dim",
                                 "original_max_position_embeddings", "truncate"}},
      {RopeKind::kLongrope, "longrope", {"short_factor", "long_factor", "factor", "attention_factor",
                                         "original_max_position_embeddings"}},
  };
  return rows;
}

std::string kind_names() {
  std::vector<std::string> names;
  for (const KindRow& r : kinds()) names.push_back(fmt::format("\"{}\"", r.name));
  return fmt::format("{}", fmt::join(names, ", "));
}

// rope_type, or the older "type" (transformers' configs written since 4.45 carry both, equal).
const KindRow& kind_of(const Json& rs, const std::string& where) {
  const Json* type = field(rs, "rope_type");
  const Json* old = field(rs, "type");
  if (type && old && *type != *old)
    bad_field(where, "type", fmt::format("({}) and rope_type ({}) differ", old->dump(), type->dump()));
  if (!type) type = old;
  if (type && !type->is_string()) bad_field(where, "rope_type", fmt::format("must be a string (got {})", type->dump()));
  const std::string name = type ? type->get<std::string>() : "default";
  if (name == "dynamic")
    throw BadInput(fmt::format("{}: rope_type \"dynamic\" recomputes the frequencies from each forward's length "
                               "(NTK scaling at inference time), which training does not reproduce", where),
                   "train a longer context with rope_type \"yarn\" or \"linear\" (--rope-scaling)");
  for (const KindRow& r : kinds())
    if (name == r.name) return r;
  bad_field(where, "rope_type", fmt::format("is \"{}\"; supported: {}", name, kind_names()));
}

void check_keys(const Json& rs, const KindRow& kind, const std::string& where) {
  for (const auto& [key, value] : rs.items())
    if (key != "rope_type" && key != "type" && !kind.keys.contains(key))
      throw BadInput(fmt::format("{}: key \"{}\" is not one rope_type \"{}\" takes ({})", where, key, kind.name,
                                 kind.keys.empty() ? "none" : fmt::format("{}", fmt::join(kind.keys, ", "))),
                     "remove it, or choose the rope_type it belongs to");
}

std::optional<double> positive_number(const Json& rs, const std::string& where, const char* key) {
  const Json* v = field(rs, key);
  if (!v) return std::nullopt;
  if (!v->is_number() || !(v->get<double>() > 0) || !std::isfinite(v->get<double>()))
    bad_field(where, key, fmt::format("must be a positive number (got {})", v->dump()));
  return v->get<double>();
}

std::optional<double> any_number(const Json& rs, const std::string& where, const char* key) {
  const Json* v = field(rs, key);
  if (!v) return std::nullopt;
  if (!v->is_number() || !std::isfinite(v->get<double>()))
    bad_field(where, key, fmt::format("must be a number (got {})", v->dump()));
  return v->get<double>();
}

std::optional<std::int64_t> optional_length(const Json& j, const std::string& where, const char* key) {
  const Json* v = field(j, key);
  return v ? std::optional(positive_int(*v, where, key, std::int64_t{1} << 40)) : std::nullopt;
}

std::vector<double> factors(const Json& rs, const std::string& where, const char* key, std::int64_t half) {
  const Json* v = field(rs, key);
  if (!v || !v->is_array() || static_cast<std::int64_t>(v->size()) != half)
    bad_field(where, key, fmt::format("must be a list of {} positive numbers (head_dim / 2) for rope_type "
                                      "\"longrope\" (got {})", half, v ? printable(v->dump()) : "nothing"));
  std::vector<double> out;
  for (const Json& x : *v) {
    if (!x.is_number() || !(x.get<double>() > 0) || !std::isfinite(x.get<double>()))
      bad_field(where, key, fmt::format("holds {}, not a positive number", x.dump()));
    out.push_back(x.get<double>());
  }
  return out;
}

RopeScaling read_scaling(const Json& rs, const std::string& where, std::int64_t head_dim) {
  const KindRow& kind = kind_of(rs, where);
  check_keys(rs, kind, where);
  RopeScaling s;
  s.kind = kind.kind;
  s.factor = positive_number(rs, where, "factor");
  if (!s.factor && (kind.kind == RopeKind::kLinear || kind.kind == RopeKind::kLlama3 || kind.kind == RopeKind::kYarn))
    bad_field(where, "factor", fmt::format("is required for rope_type \"{}\"", kind.name));
  s.original_max_position_embeddings = optional_length(rs, where, "original_max_position_embeddings");
  if (kind.kind == RopeKind::kLlama3) {
    s.low_freq_factor = positive_number(rs, where, "low_freq_factor");
    s.high_freq_factor = positive_number(rs, where, "high_freq_factor");
    for (const char* key : {"low_freq_factor", "high_freq_factor", "original_max_position_embeddings"})
      if (!field(rs, key)) bad_field(where, key, "is required for rope_type \"llama3\"");
    if (*s.high_freq_factor <= *s.low_freq_factor)
      bad_field(where, "high_freq_factor", fmt::format("({}) must be greater than low_freq_factor ({})",
                                                       *s.high_freq_factor, *s.low_freq_factor));
  }
  s.attention_factor = positive_number(rs, where, "attention_factor");
  s.beta_fast = any_number(rs, where, "beta_fast");
  s.beta_slow = any_number(rs, where, "beta_slow");
  s.mscale = any_number(rs, where, "mscale");
  s.mscale_all_dim = any_number(rs, where, "mscale_all_dim");
  if (const Json* t = field(rs, "truncate")) {
    if (!t->is_boolean()) bad_field(where, "truncate", fmt::format("must be true or false (got {})", t->dump()));
    s.truncate = t->get<bool>();
  }
  if (kind.kind == RopeKind::kLongrope) {
    s.short_factor = factors(rs, where, "short_factor", head_dim / 2);
    s.long_factor = factors(rs, where, "long_factor", head_dim / 2);
  }
  return s;
}

// yarn's get_mscale
double yarn_mscale(double scale, double mscale) { return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

// yarn's find_correction_dim: the frequency index whose wavelength turns `rotations` times over the context
double correction_dim(double rotations, double dim, double base, double context) {
  return dim * std::log(context / (rotations * 2 * std::numbers::pi)) / (2 * std::log(base));
}

void resolve_yarn(const RopeScaling& s, std::int64_t max_positions, RopeSpec& r) {
  r.original_context = s.original_max_position_embeddings.value_or(max_positions);
  if (s.attention_factor) r.attention_factor = *s.attention_factor;
  else if (s.mscale.value_or(0) != 0 && s.mscale_all_dim.value_or(0) != 0)
    r.attention_factor = yarn_mscale(r.factor, *s.mscale) / yarn_mscale(r.factor, *s.mscale_all_dim);
  else r.attention_factor = yarn_mscale(r.factor, 1.0);
  const double beta_fast = s.beta_fast.value_or(0) != 0 ? *s.beta_fast : 32;   // transformers: `or 32`, `or 1`
  const double beta_slow = s.beta_slow.value_or(0) != 0 ? *s.beta_slow : 1;
  const double dim = static_cast<double>(r.rotary_dim), context = static_cast<double>(r.original_context);
  double low = correction_dim(beta_fast, dim, r.theta, context), high = correction_dim(beta_slow, dim, r.theta, context);
  if (s.truncate.value_or(true)) low = std::floor(low), high = std::ceil(high);
  r.ramp_low = std::max(low, 0.0);
  r.ramp_high = std::min(high, dim - 1);
  if (r.ramp_low == r.ramp_high) r.ramp_high += 0.001;   // transformers' guard against a zero-width ramp
}

// Phi-3 sets the top-level original_max_position_embeddings, and then the factor is the ratio of the two lengths
// (read_rope_config checked that one of them is there).
std::int64_t longrope_context(const RopeConfig& c) {
  return c.original_max_position_embeddings.value_or(c.max_position_embeddings.value_or(0));
}

void check_longrope(const RopeScaling& s, const RopeConfig& c, const std::string& file, const std::string& where) {
  if (!c.max_position_embeddings)
    bad_field(file, "max_position_embeddings", "is required for rope_type \"longrope\" (its long factors apply to "
                                               "documents longer than the original context)");
  if (s.original_max_position_embeddings && *s.original_max_position_embeddings != longrope_context(c))
    bad_field(where, "original_max_position_embeddings",
              fmt::format("({}) is not what transformers' longrope reads (the config's top-level "
                          "original_max_position_embeddings, else max_position_embeddings: {})",
                          *s.original_max_position_embeddings, longrope_context(c)));
  if (!s.factor && !c.original_max_position_embeddings)
    bad_field(where, "factor", "is required for rope_type \"longrope\" unless the config has a top-level "
                               "original_max_position_embeddings");
}

void resolve_longrope(const RopeScaling& s, const RopeConfig& c, RopeSpec& r) {
  r.short_factor = s.short_factor, r.long_factor = s.long_factor;
  r.original_context = longrope_context(c);
  if (c.original_max_position_embeddings)
    r.factor = static_cast<double>(*c.max_position_embeddings) / static_cast<double>(*c.original_max_position_embeddings);
  const double context = static_cast<double>(r.original_context);
  r.attention_factor = s.attention_factor ? *s.attention_factor
                       : r.factor <= 1.0  ? 1.0
                                          : std::sqrt(1 + std::log(r.factor) / std::log(context));
}

}  // namespace

const char* rope_kind_name(RopeKind kind) {
  for (const KindRow& r : kinds())
    if (r.kind == kind) return r.name;
  return "?";
}

RopeConfig read_rope_config(const Json& j, const std::string& file, std::int64_t head_dim) {
  RopeConfig c;
  c.theta = number_or(j, file, "rope_theta", 10000.0);
  if (!(c.theta > 1) || !std::isfinite(c.theta))
    bad_field(file, "rope_theta", fmt::format("must be a number greater than 1 (got {})", c.theta));
  c.max_position_embeddings = optional_length(j, file, "max_position_embeddings");
  c.original_max_position_embeddings = optional_length(j, file, "original_max_position_embeddings");
  const Json* rs = field(j, "rope_scaling");
  if (!rs) return c;
  if (!rs->is_object()) bad_field(file, "rope_scaling", fmt::format("must be an object (got {})", rs->dump()));
  const std::string where = file + " rope_scaling";
  RopeScaling s = read_scaling(*rs, where, head_dim);
  if (s.kind == RopeKind::kYarn && !s.original_max_position_embeddings && !c.max_position_embeddings)
    bad_field(file, "max_position_embeddings", "is required for rope_type \"yarn\" when rope_scaling gives no "
                                               "original_max_position_embeddings (the original context)");
  if (s.kind == RopeKind::kLongrope) check_longrope(s, c, file, where);
  if (s.kind != RopeKind::kDefault) c.scaling = std::move(s);
  return c;
}

RopeSpec rope_spec(const RopeConfig& c, std::int64_t head_dim) {
  RopeSpec r;
  r.theta = c.theta;
  r.rotary_dim = head_dim;
  if (!c.scaling) return r;
  const RopeScaling& s = *c.scaling;
  r.kind = s.kind;
  r.factor = s.factor.value_or(1.0);
  switch (s.kind) {
    case RopeKind::kDefault:
    case RopeKind::kLinear: break;
    case RopeKind::kLlama3:
      r.low_freq_factor = *s.low_freq_factor, r.high_freq_factor = *s.high_freq_factor;
      r.original_context = *s.original_max_position_embeddings;
      break;
    case RopeKind::kYarn: resolve_yarn(s, c.max_position_embeddings.value_or(0), r); break;
    case RopeKind::kLongrope: resolve_longrope(s, c, r); break;
  }
  return r;
}

std::string RopeOverride::flags() const {
  std::string out;
  if (!scaling.empty()) out += fmt::format("--rope-scaling '{}'", scaling);
  if (theta != 0) out += fmt::format("{}--rope-theta {}", out.empty() ? "" : " ", theta);
  return out;
}

Json apply_rope_override(Json config, const RopeOverride& o) {
  constexpr const char* kHint = "--rope-scaling takes config.json's rope_scaling object, e.g. "
                                "'{\"rope_type\": \"yarn\", \"factor\": 4.0, \"original_max_position_embeddings\": 32768}'";
  if (!o.scaling.empty()) {
    Json scaling = parse_json_input<Json>(o.scaling, "--rope-scaling", kHint);
    if (!scaling.is_object() && !scaling.is_null())
      throw BadInput(fmt::format("--rope-scaling {}: not a JSON object", printable(o.scaling)), kHint);
    config["rope_scaling"] = std::move(scaling);
  }
  if (o.theta != 0) {
    if (!(o.theta > 1) || !std::isfinite(o.theta))
      throw BadInput(fmt::format("--rope-theta {}: must be a number greater than 1 (0: the config's own)", o.theta),
                     "RoPE's base: 10000 (Llama 2), 500000 (Llama 3), 1000000 (Qwen3)");
    config["rope_theta"] = o.theta;
  }
  return config;
}

std::string rope_summary(const RopeSpec& r) {
  std::string out = rope_kind_name(r.kind);
  if (r.kind == RopeKind::kLinear || r.kind == RopeKind::kLlama3 || r.kind == RopeKind::kYarn)
    out += fmt::format(" ×{:g}", r.factor);
  if (r.original_context > 0) out += fmt::format(" over {}", r.original_context);
  if (r.attention_factor != 1.0) out += fmt::format(", attention factor {:.4g}", r.attention_factor);
  return out + fmt::format(", theta {}", r.theta);
}

}  // namespace ulysses::arch
