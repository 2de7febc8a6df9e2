// The training loop of one rank: data → Ulysses model → loss over SP × DP → AdamW, with checkpoints,
// resume, metrics and stop signals. Every rank runs the same loop in lockstep; rank 0 logs and writes.
#pragma once

#include "comm/communicator.hpp"
#include "dist/process_groups.hpp"
#include "train/options.hpp"

namespace ulysses::train {

// Returns the exit code: 0 when the run reached options.steps, kExitPreempted after a signal-triggered save.
int run_training(const TrainOptions& options, const dist::ProcessGroups& groups, comm::Communicator& sp_group,
                 comm::Communicator& world);

}  // namespace ulysses::train
