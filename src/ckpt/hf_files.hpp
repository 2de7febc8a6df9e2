// What ulysses-ckpt writes and accepts beside the weights of a Hugging Face directory, torch-free: the
// config.json / generation_config.json of an export (so that from_pretrained rebuilds the very model the
// trainer ran), and the tensors an import may skip. The architecture rules come from arch/.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "arch/model_config.hpp"

namespace ulysses::ckpt {

// config.json of an export: the checkpoint's config with every field transformers reads written out
// as the trainer resolved it (head_dim, num_key_value_heads, biases, tie_word_embeddings, ...), plus
// architectures, model_type and the dtype of the written weights.
nlohmann::ordered_json export_config(const arch::ModelConfigFile& file, const std::string& torch_dtype);

// generation_config.json: bos/eos/pad token ids from the config (those present).
nlohmann::ordered_json generation_config(const arch::ModelConfigFile& file);

// Tensors a Hugging Face directory may hold beyond the parameters, ignored on import: old exports'
// rotary inv_freq buffers, and lm_head.weight of a tied model (equal to the embeddings by definition).
bool ignorable_extra(const arch::ModelConfig& c, const std::string& name);

}  // namespace ulysses::ckpt
