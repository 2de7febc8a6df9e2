// The fields of a Hugging Face config.json the toolkit checks or needs (torch-free).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

namespace ulysses {

struct HfConfigSummary {
  std::string model_type;               // "llama", "mistral", "qwen2", "qwen3"
  std::int64_t vocab_size = 0;
  std::int64_t num_attention_heads = 0;
  std::int64_t num_key_value_heads = 0; // defaults to num_attention_heads when absent
};

// Reads the fields above; BadInput naming the file and the missing/invalid field.
HfConfigSummary read_hf_config_summary(const std::filesystem::path& config_json);

// Heads compatible with Ulysses SP=p: heads % p == 0 and (kv % p == 0 or p % kv == 0).
// Throws BadInput with both numbers and the valid SP degrees as a hint; `source` names the file/flag.
void check_heads_for_sp(std::int64_t heads, std::int64_t kv_heads, std::int64_t sp, const std::string& source);

}  // namespace ulysses
