// What a run continues from and where it writes: --resume (auto, a run, its checkpoints/, latest or a step
// directory) and the checkpoint's files checked against its manifest, the options that changed since the
// checkpoint's run, and --output's state (--overwrite).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <vector>

#include "comm/communicator.hpp"
#include "train/options.hpp"

namespace ulysses::train {

// The checkpoints --resume may continue, in the order to try them (empty: a fresh start). A named one alone
// (BadInput when it is not a checkpoint); auto: the one `latest` names, then every other complete step-* directory
// of --output, newest first — a lost or dangling `latest` is said by `speak` (rank 0), not fatal.
std::vector<std::filesystem::path> resume_candidates(const TrainOptions& o, bool speak);

// Every rank, together: the first candidate whose files all match its manifest (sizes and XXH3, trainer_state.json
// and config.json too). Each file is hashed by one rank, the largest first to the rank with the fewest bytes so far,
// so a rank reads about 1/W of the checkpoint. A named checkpoint that fails is a BadInput on the rank that found
// it, naming the file; auto goes on to the next, the failing rank saying why; none verifying is a BadInput on every
// rank. Call it inside bad_input_on_any_rank.
std::optional<std::filesystem::path> verified_checkpoint(const std::vector<std::filesystem::path>& candidates,
                                                         bool fallback, comm::Communicator& world);

// The options of the run a checkpoint continues (its trainer_state.json) against this one's: `speak` (rank 0) lists
// every difference; those that change which data each step sees — the dataset (its content, io/manifest.hpp's
// data_identity: the same data under another path is no change), the seed, the sequences per step —
// are a BadInput unless --allow-changes (the schedule's may change: extending --steps or lowering --lr is a choice).
void check_resume_changes(const TrainOptions& o, const std::filesystem::path& from, std::int64_t dp, bool speak);

// A fresh start in an --output that holds checkpoints (a `latest`, or any complete step-* directory) is a BadInput
// unless --overwrite; with it, rank 0 removes the old run's checkpoints, metrics and default TensorBoard folder.
void check_output(const TrainOptions& o, int rank);

// --output, its checkpoints/, metrics.jsonl and TensorBoard folder, where they exist, are of the kind the run writes
// there (a directory, a file): a BadInput naming the one that is not, before the run takes its first step.
void check_output_paths(const TrainOptions& o);

}  // namespace ulysses::train
