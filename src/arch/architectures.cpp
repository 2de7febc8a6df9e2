// The architecture table (see architectures.hpp). One row per line: tests/arch adds a row to a copy of
// this file to check that a row is all a new architecture needs.
#include "arch/architectures.hpp"

#include <iterator>

namespace ulysses::arch {
namespace {

using enum HeadDimRule;
using enum BiasRule;
using enum WindowRule;

// Every rule means exactly what transformers 4.57 makes of the config (LlamaConfig, MistralConfig, ...).
constexpr ArchitectureRules kArchitectures[] = {
  // model_type class_name            kv=H   head_dim           bias                qk_norm window                 mlp_bias
  {"llama",     "LlamaForCausalLM",   true,  kOptional,         kAttentionBiasFlag, false,  kNoWindow,             true},
  {"mistral",   "MistralForCausalLM", false, kOptionalZeroNull, kNoBias,            false,  kSlidingWindow,        false},
  {"qwen2",     "Qwen2ForCausalLM",   false, kOptional,         kQkvAlways,         false,  kUseSlidingWindowFlag, false},
  {"qwen3",     "Qwen3ForCausalLM",   false, kRequired,         kAttentionBiasFlag, true,   kUseSlidingWindowFlag, false},
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
