// LoRA checkpoints in ulysses-ckpt, torch-free. A run with --lora-rank saves its adapters only (model/lora.hpp names
// them <projection>.lora_A.weight [r, in] and .lora_B.weight [out, r]); the base is the run's --init-from folder.
// The adapters' shape and scale are the options trainer_state.json records (lora_rank, lora_alpha, lora_targets,
// lora_rslora, init_from). Exported as PEFT writes an adapter (export-peft), or merged into the base as PEFT's
// merge_and_unload() does, W' = W + scale · B·A in fp32 (export-hf --merge-lora).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "arch/model_config.hpp"
#include "arch/parameters.hpp"

namespace ulysses::ckpt {

class Weights;

// The adapters a LoRA run trained (its trainer_state.json options).
struct LoraRun {
  std::int64_t rank = 0;
  double alpha = 0;
  bool rslora = false;
  std::vector<std::string> targets;   // PEFT module names, expanded (q_proj, …)
  std::string init_from;              // the base's folder as the run was given it; empty: from scratch (--seed)

  double scale() const;   // alpha / rank, rsLoRA alpha / √rank
  std::vector<arch::ParameterSpec> parameters(const arch::ModelConfig& c) const;
  std::string summary() const;   // "rank 4, alpha 8 (scale 2), targets q_proj, v_proj"
};

// The LoRA run a trainer state's options describe; nullopt for a full fine-tune (lora_rank 0 or absent).
// BadInput naming `file` when the fields are missing or of the wrong type.
std::optional<LoraRun> lora_run(const nlohmann::json& options, const std::filesystem::path& file);

// One adapted projection's update scale · B·A [out, in], held as its factors in fp32 (r × (in + out) floats).
class LoraDelta {
 public:
  // Reads `<stem>.lora_A.weight` and `<stem>.lora_B.weight` of `adapters` (stem: "model.layers.0.self_attn.q_proj").
  LoraDelta(const Weights& adapters, const std::string& stem, double scale);
  // w holds elements [first, first + n) of the row-major [out, in] weight: each gains scale · (B·A) there, rounded
  // as PEFT's fp32 merge rounds it (the product to fp32, times the scale, added).
  void add_to(std::uint64_t first, std::uint64_t n, float* w) const;

 private:
  std::int64_t rank_ = 0, in_ = 0, out_ = 0;
  float scale_ = 0;
  std::vector<float> a_, b_;   // A [r, in], B [out, r]
};

// The LoRA stems (projections with adapters) of a set of adapter names, each once.
std::vector<std::string> lora_stems(const std::vector<arch::ParameterSpec>& adapters);

// adapter_config.json as PEFT's LoraConfig.save_pretrained writes it (CAUSAL_LM); base: null when empty.
nlohmann::ordered_json peft_adapter_config(const LoraRun& lora, const std::string& base);

}  // namespace ulysses::ckpt
