// The architecture table (see architectures.hpp). One row per line: tests/arch adds a row to a copy of
// this file to check that a row is all a new architecture needs.
#include "arch/architectures.hpp"

#include <iterator>

namespace ulysses::arch {
namespace {

using enum HeadDimRule;
using enum BiasRule;
using enum WindowRule;
using enum MoeRule;

// Every rule means exactly what transformers 4.57 makes of the config (LlamaConfig, MistralConfig, ...).
constexpr ArchitectureRules kArchitectures[] = {
  // model_type  class_name             kv=H   head_dim           bias                qk_norm window                  mlp_bias moe
  {"llama",      "LlamaForCausalLM",    true,  kOptional,         kAttentionBiasFlag, false,  kNoWindow,              true,  kDense},
  {"mistral",    "MistralForCausalLM",  false, kOptionalZeroNull, kNoBias,            false,  kSlidingWindow,         false, kDense},
  {"mixtral",    "MixtralForCausalLM",  false, kOptionalZeroNull, kNoBias,            false,  kOptionalSlidingWindow, false, kMixtral},
  {"qwen2",      "Qwen2ForCausalLM",    false, kOptional,         kQkvAlways,         false,  kUseSlidingWindowFlag,  false, kDense},
  {"qwen2_moe",  "Qwen2MoeForCausalLM", false, kOptional,         kQkvBiasFlag,       false,  kUseSlidingWindowFlag,  false, kQwen2Moe},
  {"qwen3",      "Qwen3ForCausalLM",    false, kRequired,         kAttentionBiasFlag, true,   kUseSlidingWindowFlag,  false, kDense},
  {"qwen3_moe",  "Qwen3MoeForCausalLM", false, kOptional,         kAttentionBiasFlag, true,   kUseSlidingWindowFlag,  false, kQwen3Moe},
};

}  // namespace

const ArchitectureRules* find_architecture(std::string_view model_type) {
  for (const ArchitectureRules& a : kArchitectures)
    if (model_type == a.model_type) return &a;
  return nullptr;
}

std::string supported_model_types() {
  std::string out;
  for (const ArchitectureRules& a : kArchitectures) out += (out.empty() ? "" : ", ") + std::string(a.model_type);
  return out;
}

}  // namespace ulysses::arch
