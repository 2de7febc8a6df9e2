// The memory plan as people read it: one line per category, per rank and per node, shared by ulysses-plan and
// ulysses-train --dry-run.
#pragma once

#include <string>
#include <vector>

#include "plan/memory_model.hpp"

namespace ulysses::plan {

//   device memory per rank (GPU)             9.88 GiB
//     weights                               0.47 GiB
//     ...
//     total                                 33.1 GiB of 73.6 usable (92% of 80.0 GiB): fits
//   host memory per rank                       ...
//   host memory per node (8 ranks)           612 GiB of 1.72 TiB usable: fits
std::vector<std::string> breakdown_lines(const Breakdown& b, const Layout& l, const Machine& m);

// "bf16; full_shard over 32 ranks; optimizer offloaded; checkpointing (32 of 32 layer inputs in host memory);
//  TiledMLP (4096-token tiles); tiled logits (2094-token chunks)"
std::string features_line(const Features& f, const arch::ModelConfig& c, const Layout& l);

}  // namespace ulysses::plan
