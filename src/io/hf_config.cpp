#include "io/hf_config.hpp"

#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <fmt/ranges.h>

#include "core/error.hpp"

namespace ulysses {
namespace {

std::int64_t positive_int(const nlohmann::json& j, const char* key, const std::string& file) {
  if (!j.contains(key)) throw BadInput(fmt::format("{}: required field \"{}\" is missing", file, key),
                                       "pass the config.json of a Hugging Face Llama/Mistral/Qwen model");
  const auto& v = j.at(key);
  if (!v.is_number_integer() || v.get<std::int64_t>() <= 0)
    throw BadInput(fmt::format("{}: field \"{}\" must be a positive integer (got {})", file, key, v.dump()));
  return v.get<std::int64_t>();
}

}  // namespace

HfConfigSummary read_hf_config_summary(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw BadInput(fmt::format("cannot open model config {}", path.string()),
                          "pass the path of a Hugging Face config.json");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::parse_error& e) {
    throw BadInput(fmt::format("{}: not valid JSON (byte {}): {}", path.string(), e.byte, e.what()));
  }
  HfConfigSummary s;
  const std::string file = path.string();
  s.model_type = j.value("model_type", std::string());
  s.vocab_size = positive_int(j, "vocab_size", file);
  s.num_attention_heads = positive_int(j, "num_attention_heads", file);
  s.num_key_value_heads = j.contains("num_key_value_heads") && !j["num_key_value_heads"].is_null()
                              ? positive_int(j, "num_key_value_heads", file)
                              : s.num_attention_heads;
  return s;
}

void check_heads_for_sp(std::int64_t heads, std::int64_t kv, std::int64_t sp, const std::string& source) {
  auto ok = [&](std::int64_t p) { return heads % p == 0 && (kv % p == 0 || p % kv == 0); };
  if (ok(sp)) return;
  std::vector<std::string> valid;
  for (std::int64_t p = 1; p <= heads; ++p)
    if (ok(p)) valid.push_back(std::to_string(p));
  std::string why = heads % sp != 0
      ? fmt::format("attention heads ({}) are not divisible by --sp ({})", heads, sp)
      : fmt::format("key/value heads ({}) and --sp ({}) divide neither way", kv, sp);
  throw BadInput(fmt::format("{}: {}", source, why), fmt::format("use --sp {}", fmt::join(valid, ", ")));
}

}  // namespace ulysses
