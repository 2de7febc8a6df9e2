// SIGUSR1 / SIGTERM → "save and stop" request. The handler only sets a flag; the trainer checks it after
// each step, agrees on it across all ranks (one rank signalled is enough), saves, and exits with
// kExitPreempted (3). Slurm's `--signal=USR1@lead` and `scancel --signal=USR1` reach it this way.
#pragma once

namespace ulysses::train {

void install_stop_signals();
bool stop_requested();        // this rank received a signal
int stop_signal();            // which one (0 if none)

}  // namespace ulysses::train
