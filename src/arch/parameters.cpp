#include "arch/parameters.hpp"

#include <fmt/format.h>

#include "arch/layer_spec.hpp"

namespace ulysses::arch {
namespace {

// Σ over the layers of (all − active) parameters: the routed experts a token does not compute with (all 2-d).
std::int64_t inactive_parameter_count(const ModelConfig& c) {
  std::int64_t n = 0;
  for (const LayerSpec& l : layer_specs(c)) n += l.parameter_count() - l.active_parameter_count();
  return n;
}

}  // namespace

std::int64_t ParameterSpec::numel() const {
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  return n;
}

std::vector<ParameterSpec> parameters(const ModelConfig& c) {
  std::vector<ParameterSpec> out{{"model.embed_tokens.weight", {c.vocab_size, c.hidden_size}}};
  for (const LayerSpec& l : layer_specs(c)) {
    const std::string prefix = fmt::format("model.layers.{}.", l.index);
    for (const Block& b : l.blocks)
      for (const LayerParameter& p : b.parameters) out.push_back({prefix + p.name, p.shape, l.index, p.peft_target});
  }
  out.push_back({"model.norm.weight", {c.hidden_size}});
  if (!c.tie_word_embeddings) out.push_back({"lm_head.weight", {c.vocab_size, c.hidden_size}});
  return out;
}

std::vector<ParameterSpec> lora_parameters(const ModelConfig& c, std::int64_t rank,
                                           const std::vector<std::string>& targets) {
  std::vector<ParameterSpec> out;
  for (const ParameterSpec& p : parameters(c))
    for (const std::string& target : targets)
      if (p.peft_target == target) {
        const std::string stem = p.name.substr(0, p.name.size() - std::string(".weight").size());
        out.push_back({stem + ".lora_A.weight", {rank, p.shape[1]}, p.layer});   // [r, in]
        out.push_back({stem + ".lora_B.weight", {p.shape[0], rank}, p.layer});   // [out, r]
      }
  return out;
}

std::int64_t parameter_count(const ModelConfig& c) {
  std::int64_t n = 0;
  for (const ParameterSpec& p : parameters(c)) n += p.numel();
  return n;
}

std::int64_t matmul_parameter_count(const ModelConfig& c) {
  std::int64_t n = 0;
  for (const ParameterSpec& p : parameters(c))
    if (p.shape.size() == 2 && (c.tie_word_embeddings || p.name != "model.embed_tokens.weight")) n += p.numel();
  return n;
}

std::int64_t layer_parameter_count(const ModelConfig& c) { return c.num_layers > 0 ? layer_spec(c, 0).parameter_count() : 0; }

std::int64_t active_parameter_count(const ModelConfig& c) { return parameter_count(c) - inactive_parameter_count(c); }

std::int64_t active_matmul_parameter_count(const ModelConfig& c) {
  return matmul_parameter_count(c) - inactive_parameter_count(c);
}

}  // namespace ulysses::arch
