// ulysses-train --calibrate-memory FILE: measures this device's memory profile for the planner
// (plan/calibration.hpp says what is fitted). One rank; the --model-config model (a small one of the family
// to plan for is enough: the profile's factors are per counted element); --precision and --device as a run
// would have them. Each of the 4 feature sets × each of --calibrate-lengths is a real two-step training run of
// this binary in a child process (a singleton: launcher variables removed) on two sequences of random tokens
// written to a temporary dataset, so each peak is what a run's metrics report: the caching allocator's
// high-water mark on CUDA, the process's peak RSS on the CPU. Prints each point, measured and fitted, and writes
// the profile.
#pragma once

#include "comm/communicator.hpp"
#include "train/options.hpp"

namespace ulysses::train {

int run_calibration(const TrainOptions& options, comm::Communicator& world);

}  // namespace ulysses::train
