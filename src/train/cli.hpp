// ulysses-train's command line, torch-free: the flags, the TOML config file (--config; flags override it) and
// --help's examples. Parsed twice with the same table: by the front (train/front.cpp), which refuses a plan that
// cannot fit before LibTorch is loaded, and by the core it starts (train/main.cpp).
#pragma once

#include <CLI/CLI.hpp>

#include "train/options.hpp"

namespace ulysses::train {

// Fills `o` (and `print_config`, --print-config) when `app` parses.
void set_up(CLI::App& app, TrainOptions& o, bool& print_config);

inline constexpr const char* kTrainTitle = "ulysses-train: Llama-family training with Ulysses sequence parallelism";

}  // namespace ulysses::train
