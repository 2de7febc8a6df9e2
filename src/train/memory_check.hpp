// The refusal before anything is built: a run whose model states cannot fit the memory it has ends every rank
// with exit 2 and one line naming the numbers and what would make it fit (--dry-run included, which builds
// no model either).
//
// What is counted is what is certain: the model states per rank (plan_states: the exact shard arithmetic) and
// the process itself (LibTorch, MPI: kProcessBytes per rank, measured by the sharding benchmark's anchor). On a
// CPU device the host is the device, and the node's memory (the cgroup limit where one is set, else MemTotal)
// is shared by the ranks on it. On a GPU the device states are checked against the GPU's memory and the
// offloaded ones against the node's host memory. Both against kUsableFraction of what there is. Activations
// are an estimate (estimate_memory) until the planner is calibrated against measurements, so they do not
// refuse a run yet.
#pragma once

#include <cstdint>
#include <string>

#include <c10/core/Device.h>

#include "train/model_states.hpp"

namespace ulysses::train {

inline constexpr double kUsableFraction = 0.92;
inline constexpr std::int64_t kProcessBytes = std::int64_t{400} << 20;   // a rank's own RSS with a tiny model

struct HostMemory {
  std::int64_t bytes = 0;
  std::string source;   // "cgroup memory.max", "MemTotal"
};
HostMemory host_memory();   // this node's, for the processes of this cgroup

// BadInput when the states of `ranks_on_node` ranks do not fit (see above); `sharded`/`offloaded` pick the hint.
void check_states_fit(const StatePlan& states, const c10::Device& device, int ranks_on_node, bool sharded,
                      bool offloaded);

}  // namespace ulysses::train
