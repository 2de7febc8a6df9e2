// This node's memory for the processes of this cgroup: the cgroup limit where one is set (v2 memory.max, v1
// memory.limit_in_bytes), else MemTotal. Torch-free: the planner's default on CPU and the trainer's refusal.
#pragma once

#include <cstdint>
#include <string>

namespace ulysses::plan {

struct HostMemory {
  std::int64_t bytes = 0;
  std::string source;   // "MemTotal", or the cgroup file
};
HostMemory host_memory();

}  // namespace ulysses::plan
