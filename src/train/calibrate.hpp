// ulysses-train --calibrate-memory FILE: measures this device's memory profile for the planner
// (plan/calibration.hpp says what is fitted). One rank; the --model-config model (a small one of the family
// to plan for is enough: the profile's factors are per element, not per model); --precision and --device as a
// run would have them. Each of the 3 feature sets runs one optimizer step on random tokens at each of
// --calibrate-lengths; the peak is the caching allocator's high-water mark on CUDA (reset between points) and,
// on the CPU, the peak RSS of a fresh child process per point (fork before any LibTorch work), as a real run's
// metrics report it. Prints each point, measured and fitted, and writes the profile.
#pragma once

#include "comm/communicator.hpp"
#include "train/options.hpp"

namespace ulysses::train {

int run_calibration(const TrainOptions& options, comm::Communicator& world);

}  // namespace ulysses::train
