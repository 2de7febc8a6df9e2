// When a run stops early to be resumed: a signal, or the job's end drawing near.
//
// SIGUSR1 / SIGTERM / SIGINT (a Ctrl-C; a second one ends the process unsaved) → "save and stop" request. The handler only sets a flag; it is installed before the run
// starts (main), so a signal during start-up (weights, checkpoint, communicators) is kept, not fatal. The trainer
// checks the flag before the first step and after each step, agrees on it across all ranks (one rank signalled is
// enough), saves (nothing when no step ran), and exits with kExitPreempted (3). Slurm's `--signal=USR1@lead`,
// `scancel --signal=USR1` and a preemption's SIGTERM reach it this way.
//
// The job's end (Slurm's time limit, --end-time or SLURM_JOB_END_TIME): should the signal not come, or a step and
// a save outlast its lead, the trainer stops by itself once the next step and a save would run past the end less
// --stop-margin (as Megatron's --exit-duration-in-mins): saved, exit 3, requeued by the sbatch.
#pragma once

#include <optional>

namespace ulysses::train {

void install_stop_signals();
bool stop_requested();        // this rank received a signal
int stop_signal();            // which one (0 if none)

// The job's end in seconds since the epoch: `end_time` when positive, else SLURM_JOB_END_TIME when set (a
// BadInput when it is not a number), else none.
std::optional<double> job_end_time(double end_time);

// Whether a run must stop now to save before the job ends: now + one more step + a save + margin > end.
bool past_deadline(double now, double end, double step_seconds, double save_seconds, double margin);

double now_since_epoch();

}  // namespace ulysses::train
