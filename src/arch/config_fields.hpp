// Reading config.json's fields (model_config.cpp, rope.cpp): each way a field can be wrong is one BadInput naming
// the file and the field, with kConfigHint.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace ulysses::arch::config_fields {

using Json = nlohmann::ordered_json;

inline constexpr const char* kConfigHint =
    "pass the config.json of a Hugging Face Llama, Mistral, Mixtral, Qwen2, Qwen2-MoE, Qwen3 or Qwen3-MoE model";
// Upper bound on sizes and context lengths, far above any published model.
inline constexpr std::int64_t kMaxSize = std::int64_t{1} << 24;

const Json* field(const Json& j, const char* key);   // the value of `key`, or nullptr when absent or null
[[noreturn]] void bad_field(const std::string& file, const char* key, const std::string& why);
std::int64_t positive_int(const Json& v, const std::string& file, const char* key, std::int64_t max = kMaxSize);
std::int64_t required_int(const Json& j, const std::string& file, const char* key, std::int64_t max = kMaxSize);
double number_or(const Json& j, const std::string& file, const char* key, double fallback);
bool bool_or(const Json& j, const std::string& file, const char* key, bool fallback);

}  // namespace ulysses::arch::config_fields
