#include "plan/host_memory.hpp"

#include <fstream>
#include <optional>

namespace ulysses::plan {
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

}  // namespace

HostMemory host_memory() {
  HostMemory m{mem_total(), "MemTotal"};
  for (const char* path : {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"})
    if (const auto limit = read_limit(path); limit && *limit > 0 && *limit < m.bytes) m = {*limit, path};
  return m;
}

}  // namespace ulysses::plan
