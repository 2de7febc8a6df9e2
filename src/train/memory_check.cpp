#include "train/memory_check.hpp"

#include <algorithm>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/log.hpp"
#include "train/device.hpp"

namespace ulysses::train {
namespace {

std::optional<std::int64_t> read_limit(const char* path) {   // a cgroup limit file; nullopt for "max" or none
  std::ifstream in(path);
  std::string text;
  if (!(in >> text) || text == "max") return std::nullopt;
  try {
    return std::stoll(text);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::int64_t mem_total() {   // /proc/meminfo "MemTotal: N kB"
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  std::int64_t kb = 0;
  while (in >> key >> kb >> unit)
    if (key == "MemTotal:") return kb * 1024;
  return 0;
}

std::string size(std::int64_t bytes) {
  return human_bytes(static_cast<std::uint64_t>(std::max<std::int64_t>(bytes, 0)));
}

std::int64_t usable(std::int64_t bytes) { return static_cast<std::int64_t>(kUsableFraction * static_cast<double>(bytes)); }

}  // namespace

HostMemory host_memory() {
  HostMemory m{mem_total(), "MemTotal"};
  for (const char* path : {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"})
    if (const auto limit = read_limit(path); limit && *limit > 0 && *limit < m.bytes) m = {*limit, path};
  return m;
}

void check_states_fit(const StatePlan& states, const c10::Device& device, int ranks_on_node, bool sharded,
                      bool offloaded) {
  const HostMemory host = host_memory();
  if (device.is_cuda()) {
    const std::int64_t gpu = device_memory_bytes(device);
    if (gpu > 0 && states.device.total() > usable(gpu))
      throw BadInput(fmt::format("the model states need {} per GPU ({} sharding{}), more than {:.0f}% of the {} of {}",
                                 size(states.device.total()), sharded ? "with" : "without",
                                 offloaded ? ", optimizer offloaded" : "", 100 * kUsableFraction, size(gpu),
                                 device_name(device)),
                     !sharded    ? "shard them: --sharding full_shard (16/W bytes per parameter per rank)"
                     : !offloaded ? "add --offload-optimizer (2/W bytes per parameter stay on the GPU) or more ranks"
                                  : "use more ranks (each holds 2/W bytes per parameter)");
  }
  const std::int64_t per_rank = kProcessBytes + states.host.total() + (device.is_cuda() ? 0 : states.device.total());
  const std::int64_t node = per_rank * ranks_on_node;
  if (host.bytes > 0 && node > usable(host.bytes))
    throw BadInput(
        fmt::format("the model states of the {} ranks on this node need {} ({} each: states {} + {} for the process), "
                    "more than {:.0f}% of its {} ({})",
                    ranks_on_node, size(node), size(per_rank), size(per_rank - kProcessBytes), size(kProcessBytes),
                    100 * kUsableFraction, size(host.bytes), host.source),
        !sharded && ranks_on_node > 1
            ? "shard them: --sharding full_shard (the ranks of a node then hold 16 bytes per parameter between them)"
            : "spread the ranks over more nodes (fewer per node) or train a smaller model");
}

}  // namespace ulysses::train
