// What a run continues from and where it writes: --resume (auto, a run, its checkpoints/, latest or a step
// directory), the options that changed since the checkpoint's run, and --output's state (--overwrite).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>

#include "train/options.hpp"

namespace ulysses::train {

// The checkpoint --resume names (nullopt: a fresh start; with auto, also when --output holds none). BadInput when
// it names something that is not a checkpoint.
std::optional<std::filesystem::path> resume_from(const TrainOptions& o);

// The options of the run a checkpoint continues (its trainer_state.json) against this one's: `speak` (rank 0) lists
// every difference; those that change which data each step sees — the dataset, the seed, the sequences per step —
// are a BadInput unless --allow-changes (the schedule's may change: extending --steps or lowering --lr is a choice).
void check_resume_changes(const TrainOptions& o, const std::filesystem::path& from, std::int64_t dp, bool speak);

// A fresh start in an --output that holds checkpoints is a BadInput unless --overwrite; with it, rank 0 removes the
// old run's checkpoints, metrics and default TensorBoard folder.
void check_output(const TrainOptions& o, int rank);

}  // namespace ulysses::train
