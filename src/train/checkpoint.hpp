// Saving and loading the trainer's state in the torch-free checkpoint format (io/checkpoint_format.hpp).
// Replicated states are written by rank 0 as whole tensors (model.safetensors, optimizer.safetensors);
// sharded ones by every rank that holds a copy of a shard, in parallel, without gathering (per-rank files,
// io/sharded_checkpoint.hpp), rank 0 adding the manifest with the layout and every file's checksum. Either
// is read as whole tensors by name, each rank reading only the elements it holds, so any layout and any
// sharding mode resumes any checkpoint without conversion.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "comm/communicator.hpp"
#include "core/rank_layout.hpp"
#include "train/model_states.hpp"

namespace ulysses::train {

struct TrainerState {
  std::int64_t step = 0;            // optimizer steps done
  std::uint64_t cursor = 0;         // sequences consumed by the data loader
  std::int64_t tokens_seen = 0;     // valid labels trained on
  nlohmann::json options;           // the resolved options of the run that wrote it
  nlohmann::json data;              // its data's identity (shard::data_identity); null in checkpoints from before it
};

// Every rank of `world` (collective when sharded). Rank 0 makes checkpoints_dir/step-NNNNNNN under a temporary
// name, renames it when every file is complete, then points `latest` at it, then prunes, and returns its path
// (the others return an empty path). model_config: the text of its config.json (train::RunModelConfig).
std::filesystem::path save_checkpoint(const std::filesystem::path& checkpoints_dir, ModelStates& states,
                                      const TrainerState& state, const RankLayout& layout,
                                      const std::string& model_config, const std::string& architecture,
                                      int keep_last, comm::Communicator& world);

// Every rank. Loads the weights and the optimizer state into `states` (by name; all must be present with their
// shapes) and returns the trainer state. BadInput naming the checkpoint otherwise.
TrainerState load_checkpoint(const std::filesystem::path& checkpoint_dir, ModelStates& states);

// A checkpoint's trainer_state.json, every field checked (a BadInput naming the file and the field): the step, the
// data cursor, the tokens seen, the run's options (an object; empty when the file has none) and its data's identity
// (null when the file has none).
TrainerState read_trainer_state(const std::filesystem::path& path);

}  // namespace ulysses::train
