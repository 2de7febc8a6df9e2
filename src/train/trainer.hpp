// The training loop of one rank: data → Ulysses model → loss over SP × DP → AdamW, with checkpoints,
// resume, metrics and stop signals. Every rank runs the same loop in lockstep; rank 0 logs and writes.
#pragma once

#include "comm/communicator.hpp"
#include "dist/process_groups.hpp"
#include "train/options.hpp"

namespace ulysses::train {

// Picks the rank's device (--device) and the collectives' backend (--comm), makes the SP and gradient
// communicators on it over groups' MPI sub-communicators; `world` (MPI, CPU tensors) carries control messages.
// Returns the exit code: 0 when the run reached options.steps, kExitPreempted after a signal-triggered save.
int run_training(const TrainOptions& options, const dist::ProcessGroups& groups, comm::Communicator& world);

// Before the rank layout: a world that --sp does not divide is refused with the degrees the model allows there,
// where the model's config can be read (else RankLayout's own refusal follows).
void check_world_for_sp(const TrainOptions& options, int world);

}  // namespace ulysses::train
