#include "ckpt/lora.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/ranges.h>

#include "ckpt/source.hpp"
#include "core/error.hpp"
#include "core/json_input.hpp"
#include "io/checkpoint_format.hpp"

namespace fs = std::filesystem;

namespace ulysses::ckpt {

double LoraRun::scale() const { return rslora ? alpha / std::sqrt(static_cast<double>(rank)) : alpha / rank; }

std::vector<arch::ParameterSpec> LoraRun::parameters(const arch::ModelConfig& c) const {
  return arch::lora_parameters(c, rank, targets);
}

std::string LoraRun::summary() const {
  return fmt::format("rank {}, alpha {:g} (scale {:g}{}), targets {}", rank, alpha, scale(), rslora ? ", rsLoRA" : "",
                     fmt::join(targets, ", "));
}

std::optional<LoraRun> lora_run(const nlohmann::json& options, const fs::path& file) {
  if (!options.is_object() || !options.contains("lora_rank")) return std::nullopt;   // before LoRA: a full fine-tune
  const auto field = [&](const char* key) -> const nlohmann::json& {
    if (!options.contains(key))
      throw BadInput(fmt::format("{}: options.lora_rank is set but options.{} is missing", file.string(), key),
                     checkpoint::kDamagedHint);
    return options.at(key);
  };
  const auto what = [&](const char* key) { return fmt::format("{}: options.{}", file.string(), key); };
  LoraRun r;
  r.rank = json_value<std::int64_t>(field("lora_rank"), what("lora_rank"), checkpoint::kDamagedHint);
  if (r.rank <= 0) return std::nullopt;
  r.alpha = json_value<double>(field("lora_alpha"), what("lora_alpha"), checkpoint::kDamagedHint);
  r.rslora = json_value<bool>(field("lora_rslora"), what("lora_rslora"), checkpoint::kDamagedHint);
  r.init_from = json_value<std::string>(field("init_from"), what("init_from"), checkpoint::kDamagedHint);
  const nlohmann::json& targets = field("lora_targets");
  if (!targets.is_array() || targets.empty())
    throw BadInput(fmt::format("{} is {}, not a list of projection names", what("lora_targets"), targets.dump()),
                   checkpoint::kDamagedHint);
  for (const nlohmann::json& t : targets) r.targets.push_back(json_value<std::string>(t, what("lora_targets"),
                                                                                       checkpoint::kDamagedHint));
  return r;
}

LoraDelta::LoraDelta(const Weights& adapters, const std::string& stem, double scale)
    : scale_(static_cast<float>(scale)) {
  const std::string a = stem + ".lora_A.weight", b = stem + ".lora_B.weight";
  const auto& sa = adapters.info(a).shape;   // [r, in]
  const auto& sb = adapters.info(b).shape;   // [out, r]
  ULY_CHECK(sa.size() == 2 && sb.size() == 2 && sa[0] == sb[1], "{} [{}] and {} [{}] are not LoRA factors", a,
            fmt::join(sa, ", "), b, fmt::join(sb, ", "));
  rank_ = sa[0];
  in_ = sa[1];
  out_ = sb[0];
  std::vector<char> scratch;
  a_.resize(static_cast<std::size_t>(rank_ * in_));
  b_.resize(static_cast<std::size_t>(out_ * rank_));
  adapters.read_f32(a, 0, a_.size(), a_.data(), scratch);
  adapters.read_f32(b, 0, b_.size(), b_.data(), scratch);
}

void LoraDelta::add_to(std::uint64_t first, std::uint64_t n, float* w) const {
  ULY_CHECK(first + n <= static_cast<std::uint64_t>(out_ * in_), "elements [{}, {}) of a [{}, {}] weight", first,
            first + n, out_, in_);
  const auto in = static_cast<std::uint64_t>(in_);
  std::vector<double> row_delta;   // B[row, :] · A over a piece of one row, in double: its fp32 rounding is PEFT's
  for (std::uint64_t e = 0; e < n;) {
    const std::uint64_t row = (first + e) / in, col = (first + e) % in, len = std::min(in - col, n - e);
    row_delta.assign(len, 0.0);
    for (std::int64_t k = 0; k < rank_; ++k) {
      const double bk = b_[row * static_cast<std::uint64_t>(rank_) + static_cast<std::uint64_t>(k)];
      const float* a = a_.data() + static_cast<std::uint64_t>(k) * in + col;
      for (std::uint64_t j = 0; j < len; ++j) row_delta[j] += bk * a[j];
    }
    for (std::uint64_t j = 0; j < len; ++j) w[e + j] += static_cast<float>(row_delta[j]) * scale_;
    e += len;
  }
}

std::vector<std::string> lora_stems(const std::vector<arch::ParameterSpec>& adapters) {
  std::vector<std::string> stems;
  for (const arch::ParameterSpec& p : adapters)
    if (p.name.ends_with(".lora_A.weight")) stems.push_back(p.name.substr(0, p.name.size() - 14));
  return stems;
}

nlohmann::ordered_json peft_adapter_config(const LoraRun& lora, const std::string& base) {
  const bool whole = std::floor(lora.alpha) == lora.alpha;   // PEFT writes lora_alpha as the int it usually is
  return {{"task_type", "CAUSAL_LM"},
          {"peft_type", "LORA"},
          {"base_model_name_or_path", base.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(base)},
          {"revision", nullptr},
          {"inference_mode", true},
          {"r", lora.rank},
          {"target_modules", lora.targets},
          {"lora_alpha", whole ? nlohmann::ordered_json(static_cast<std::int64_t>(lora.alpha))
                               : nlohmann::ordered_json(lora.alpha)},
          {"lora_dropout", 0.0},
          {"fan_in_fan_out", false},
          {"bias", "none"},
          {"use_rslora", lora.rslora},
          {"modules_to_save", nullptr},
          {"init_lora_weights", true},
          {"layers_to_transform", nullptr},
          {"layers_pattern", nullptr},
          {"rank_pattern", nlohmann::ordered_json::object()},
          {"alpha_pattern", nlohmann::ordered_json::object()},
          {"use_dora", false}};
}

}  // namespace ulysses::ckpt
