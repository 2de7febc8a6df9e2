// Saving and loading the trainer's state in the torch-free checkpoint format (io/checkpoint_format.hpp).
// Weights and optimizer state are identical on every rank (no sharding yet), so rank 0 writes them once and
// any layout can load them: resuming at another SP × DP layout needs no conversion.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "core/rank_layout.hpp"
#include "train/adamw.hpp"

namespace ulysses::train {

struct TrainerState {
  std::int64_t step = 0;            // optimizer steps done
  std::uint64_t cursor = 0;         // sequences consumed by the data loader
  std::int64_t tokens_seen = 0;     // valid labels trained on
  nlohmann::json options;           // the resolved options of the run that wrote it
};

// Rank 0 only. Writes checkpoints_dir/step-NNNNNNN atomically, then points `latest` at it, then prunes.
std::filesystem::path save_checkpoint(const std::filesystem::path& checkpoints_dir, const NamedTensors& weights,
                                      const AdamW& optimizer, const TrainerState& state, const RankLayout& layout,
                                      const std::filesystem::path& model_config, const std::string& architecture,
                                      int keep_last);

// Every rank. Copies weights into `params` (by name; all must be present with their shapes) and the
// optimizer state into `optimizer`; returns the trainer state. BadInput naming the checkpoint otherwise.
TrainerState load_checkpoint(const std::filesystem::path& checkpoint_dir, const NamedTensors& params,
                             AdamW& optimizer);

}  // namespace ulysses::train
